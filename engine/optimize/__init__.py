"""Stage 3, subgraph optimize: per-engine rewrites inside partitions."""

from .fusion import FUSIONS, fuse
from .layout import assign_layouts
from .layout_views import reshape_round_trips

__all__ = ["FUSIONS", "assign_layouts", "fuse", "reshape_round_trips"]
