"""Stage 3, subgraph optimize: per-engine rewrites (fusion) inside partitions."""

from .fusion import FUSIONS, fuse

__all__ = ["fuse", "FUSIONS"]
