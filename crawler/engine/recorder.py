"""Where every fetch of a URL ends: exactly one row (docs/invariants.md #5).

The dispatcher, its gates, admission and the internal-error sorter all end a URL here:
:meth:`Recorder.record` counts the row's outcome, puts it in the outbox (which writes
it and then acks the URL in the store) and tells the refresh feed when the URL is due
again; :meth:`Recorder.refused` is the row of a URL robots.txt refuses.
"""

from __future__ import annotations

from typing import Callable

from crawler.engine.optional import FeedPart
from crawler.engine.outbox import Outbox
from crawler.engine.pipeline import Outcome, PagePipeline
from crawler.frontier.urlitem import UrlItem
from crawler.robots import RobotsCache
from crawler.urls import origin
from crawler.counters import ShardCounters


class Recorder:
    """One shard's rows (module docstring).

    Args:
        pipeline: builds a row for an outcome without a page (crawler.engine.pipeline).
        outbox: writes the rows, then acks their URLs.
        robots: the rules cache (why a refused URL was refused).
        feed: the refresh feed (the next fetch of a URL just recorded).
        counters: the shard's counters (rows by outcome, refreshes).
        settled: called with a URL once it has its row (crawler.engine.internalerrors).
    """

    def __init__(self, pipeline: PagePipeline, outbox: Outbox, robots: RobotsCache, feed: FeedPart,
                 counters: ShardCounters, settled: Callable[[str], None]) -> None:
        self._pipeline, self._outbox, self._robots, self._feed = pipeline, outbox, robots, feed
        self._counters = counters
        self._settled = settled

    def record(self, item: UrlItem, outcome: Outcome) -> None:
        """``item``'s one row."""
        row = outcome.row
        self._settled(item.url)
        self._counters.count_outcome(row.outcome)
        if item.kind == "refresh":
            self._counters.refresh_fetches += 1
            self._counters.changes_found += bool(row.changed)
        self._outbox.put(row, outcome.body, outcome.schedule, outcome.raw_body)
        self._feed.after_record(item, row, outcome.schedule)

    def failed(self, item: UrlItem, error: str) -> None:
        """A ``failed`` row with ``error`` (an internal error past its tries)."""
        self.record(item, self._pipeline.outcome(item, "failed", error=error))

    def refused(self, item: UrlItem) -> None:
        """A URL the robots rules refuse: ``robots_blocked``, or ``failed`` with the cause
        when robots.txt got no response at all (the site said nothing, the network failed)."""
        cause = self._robots.unreachable_reason(origin(item.url))
        if cause is None:
            self.record(item, self._pipeline.outcome(item, "robots_blocked", error="disallowed by robots.txt"))
        else:
            self.failed(item, f"robots.txt unreachable: {cause}")
