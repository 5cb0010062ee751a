"""Acks in a shard's durable frontier (crawler.frontier.store): a URL is done only after its
outcome row is durable in the output (ack after store: docs/invariants.md #6, step 3), and
the ack writes the URL's per-URL state in the same commit (last fetch, next due time,
validators, hashes, counts). And the two ways a store set right after a crash or a restore
from an older copy changes states without a fetch: claims back to the queue, and URLs
marked done because their rows are already in the output.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Sequence

from crawler.frontier.recrawl import Schedule
from crawler.frontier.urltable import DONE, UrlTable, chunks, url_key
from crawler.output import OutcomeRow

__all__ = ["AckParams", "Acks"]

#: One ack's per-URL state, in the order of ``_RECORD``'s parameters (journaled as is).
AckParams = tuple[Any, ...]

_RECORD = (
    "UPDATE urls SET state=2, last_crawled_at=?, next_crawl_at=?, interval_s=coalesce(?, interval_s),"
    " etag=coalesce(?, etag), last_modified=coalesce(?, last_modified),"
    " content_sha=coalesce(?, content_sha), fingerprint=coalesce(?, fingerprint),"
    " fetches=fetches+1, changes=changes+?, last_outcome=?, last_status=? WHERE h=?"
)


def _wall(value: Any) -> float | None:
    if value is None:
        return None
    return value.timestamp() if isinstance(value, dt.datetime) else float(value)


class Acks:
    """The state changes of the module docstring, on the store's
    :class:`~crawler.frontier.urltable.UrlTable`; each is committed."""

    def __init__(self, table: UrlTable) -> None:
        self._t = table

    def record(self, fetched: Sequence[tuple[OutcomeRow, Schedule | None]]) -> None:
        """Ack rows that are durable: each URL done, with its per-URL state (last fetch,
        next due time, validators, hashes, counts). One commit, journaled as ``done``.

        Validators and hashes a response did not carry (a 304, a failure) keep their
        stored values: they still describe the copy we have.
        """
        if not fetched:
            return
        params: list[AckParams] = []
        for row, sched in fetched:
            params.append((
                _wall(row.fetched_at), sched.next_crawl_at if sched else None, sched.interval_s if sched else None,
                row.etag, row.last_modified, row.content_sha256, row.simhash, 1 if row.changed else 0,
                row.outcome, row.status, url_key(row.url),
            ))
        with self._t.lock:
            self._t.begin()
            self._t.db.executemany(_RECORD, params)
            self._t.end()
            if self._t.journal is not None:
                self._t.journal("done", params)

    def apply(self, params: Sequence[AckParams]) -> None:
        """Apply acks journaled by :meth:`record` (a replay: not journaled again)."""
        with self._t.lock:
            self._t.begin()
            self._t.db.executemany(_RECORD, params)
            self._t.end()

    def done(self, urls: Sequence[str]) -> None:
        """Mark URLs finished: their outcome rows are durable (not journaled: a store
        rebuilt from OUT learns it from the rows)."""
        if not urls:
            return
        with self._t.lock:
            self._t.begin()
            self._t.db.executemany("UPDATE urls SET state=? WHERE h=?", [(DONE, url_key(u)) for u in urls])
            self._t.end()

    def recover(self, *, replay_all: bool = False) -> int:
        """After a crash: claimed URLs go back to the queue, flagged for replay. Returns how many.

        ``replay_all`` flags every queued URL too (a store restored from an older copy:
        crawler.recovery.statefiles).
        """
        with self._t.lock:
            n: int = self._t.db.execute("UPDATE urls SET state=0, replay=1 WHERE state=1").rowcount
            if replay_all:
                self._t.db.execute("UPDATE urls SET replay=1 WHERE state=0")
            return n

    def finish_from_output(self, urls: Sequence[str]) -> int:
        """Mark queued or claimed URLs done because their rows are already in the output
        (a store restored from an older copy). Returns how many changed."""
        if not urls:
            return 0
        with self._t.lock:
            self._t.begin()
            changed = 0
            for part in chunks([(url_key(u),) for u in urls]):
                changed += self._t.db.executemany(
                    "UPDATE urls SET state=2 WHERE h=? AND state IN (0, 1)", part
                ).rowcount
            self._t.end()
        return changed
