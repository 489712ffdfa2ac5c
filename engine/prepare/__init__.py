"""Stage 1, prepare & whole-graph optimize: validate, infer, fold, simplify."""

from .bounded_rows import bound_selections, bounded_outputs
from .canonicalize import canonicalize
from .cse import deduplicate_constants, eliminate_common_subexpressions
from .expert_rows import bound_expert_selections
from .fold_constants import fold_constants
from .infer_shapes import infer_shapes
from .integer_products import lower_integer_products
from .simplify import eliminate_dead_nodes, eliminate_identities
from .validate import validate
from .variables import check_variables, order_variable_access
from .weight_only import WEIGHT_ONLY_PRODUCTS, lower_weight_only_matmuls
from .widen import widen_float16

__all__ = [
    "bound_expert_selections",
    "bound_selections",
    "bounded_outputs",
    "canonicalize",
    "check_variables",
    "deduplicate_constants",
    "eliminate_common_subexpressions",
    "eliminate_dead_nodes",
    "eliminate_identities",
    "fold_constants",
    "infer_shapes",
    "lower_integer_products",
    "WEIGHT_ONLY_PRODUCTS",
    "lower_weight_only_matmuls",
    "order_variable_access",
    "validate",
    "widen_float16",
]
