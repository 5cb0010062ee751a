"""One shard: its typed surface (shardapi, shard), the dispatch loop with its gates, handler
and recorder, its assembly, the page pipeline, link routing, admission, outbox and status."""
