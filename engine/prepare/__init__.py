"""Stage 1, prepare & whole-graph optimize: validate, infer, fold, simplify."""

from .fold_constants import fold_constants
from .infer_shapes import infer_shapes
from .simplify import eliminate_dead_nodes, eliminate_identities
from .validate import validate

__all__ = ["validate", "infer_shapes", "fold_constants", "eliminate_dead_nodes",
           "eliminate_identities"]
