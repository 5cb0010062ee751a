"""One shard's engine: its assembly, the scheduler loop, the page pipeline, link routing, admission, outbox, status and counters."""
