"""What an error while a shard processes a URL costs: never a web outcome (docs/invariants.md #13).

The dispatcher (crawler.engine.dispatcher) hands every exception out of processing one URL
(robots, page budget, fetch, pipeline, link delivery) to :class:`InternalErrors`, which
sorts it:

* the shard is stopping: nothing. The URL stays claimed in the store (or queued, if its
  claim was never committed) and is fetched again on resume, its links past the seen
  filter (crawler.engine.checkpoint.resume_queue);
* "not now" from a service (crawler.errors.retry_later: the content index or the page
  budget past its restart allowance, the state store failing): the URL goes back to its
  host's queue with backoff, counted ``deferred``, with no row;
* anything else is a bug: counted ``internal_errors`` and logged with its traceback; the
  URL is tried again with backoff, its links sent past the seen filter, up to
  ``fetch.attempts`` tries in all, and only then gets a ``failed`` row ("internal error:
  ..."). Links of a delivery given up are counted by the router (``links_lost``), their
  seen marks undone (crawler.engine.linkrouter), so no link is dropped unsaid.

A page whose links wait for a receiver that refuses them for now is none of these: the
router asks the receiver again, and the page stays in flight, unacked, meanwhile.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from crawler.errors import retry_later
from crawler.frontier.urlitem import UrlItem
from crawler.counters import ShardCounters

log = logging.getLogger(__name__)


class InternalErrors:
    """Sorts the errors of processing URLs (module docstring) for one shard.

    Args:
        shard_id: for the log.
        attempts: tries of a URL that hits a bug before its ``failed`` row (``fetch.attempts``).
        retry: puts a URL back in its host's queue after a backoff (Frontier.retry).
        fail: records a URL's ``failed`` row with the given error.
        counters: the shard's counters (``deferred``, ``internal_errors``).
    """

    def __init__(self, shard_id: str, attempts: int, *, retry: Callable[[UrlItem], Any],
                 fail: Callable[[UrlItem, str], None], counters: ShardCounters) -> None:
        self._shard_id = shard_id
        self._attempts = attempts
        self._retry = retry
        self._fail = fail
        self._counters = counters
        self._bugs: dict[str, int] = {}  # URL -> bugs it hit so far (until its row)

    def cost(self, item: UrlItem, exc: Exception, *, stopping: bool) -> None:
        """Handle ``exc``, raised while processing ``item``."""
        if stopping:
            log.info("%s: %s left for the resume (%r)", self._shard_id, item.url, exc)
            return
        if retry_later(exc):
            self._counters.deferred += 1
            log.warning("%s: %s deferred: %r", self._shard_id, item.url, exc)
            self._retry(item)
            return
        self._counters.internal_errors += 1
        log.error("%s: internal error processing %s", self._shard_id, item.url, exc_info=exc)
        bugs = self._bugs[item.url] = self._bugs.get(item.url, 0) + 1
        if bugs < self._attempts:
            # Its links may be marked seen and not delivered (marks the router could not
            # undo): the next fetch sends them past the seen filter; owners de-duplicate.
            item.replay = True
            self._retry(item)
            return
        del self._bugs[item.url]
        if item.kind != "sitemap":  # a sitemap is not an admitted URL: no row
            self._fail(item, f"internal error: {exc!r}")

    def settled(self, url: str) -> None:
        """``url`` has its row: forget the bugs it hit."""
        self._bugs.pop(url, None)
