"""Surviving crashes and lost machines: the output lease, the crawl record, state files and logs, checkpoints, the watchdog."""
