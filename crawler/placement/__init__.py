"""Which shard and region own a host: the hash ring, the topology, the region policy, host handover."""
