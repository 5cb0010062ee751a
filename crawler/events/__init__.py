"""page.fetched events for the indexer and their sinks."""
