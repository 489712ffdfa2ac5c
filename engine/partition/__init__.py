"""Stage 2, partition: place each node on an engine, cut the graph into subgraphs."""

from .partition import Partition, collect_partitions, partition_graph
from .placement import place_nodes

__all__ = ["place_nodes", "partition_graph", "Partition", "collect_partitions"]
