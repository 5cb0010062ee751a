"""A crawl from start to stop: the session, the runtime seam and the in-process runtime, stats, the ledger, termination."""
