"""GraphEngine: a graph compiler and inference service modeled on GE."""
__version__ = "0.1.0"
