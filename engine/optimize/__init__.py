"""Stage 3, subgraph optimize: per-engine rewrites inside partitions."""

from .fusion import FUSIONS, fuse
from .layout import assign_layouts

__all__ = ["FUSIONS", "assign_layouts", "fuse"]
