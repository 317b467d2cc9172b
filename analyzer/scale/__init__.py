"""Scale: the store, partitions, spill and the Spark engine beside the single pass."""
