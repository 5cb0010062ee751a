"""A shard's URLs: the frontier, the per-host back queues, the durable store, the refresh feed."""
