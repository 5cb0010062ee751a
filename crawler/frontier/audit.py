"""A shard's store checked against what it must agree with: its stamp, and the rows in OUT.

Two checks a resume makes before the shard trusts its store (crawler.recovery.statefiles):

* the stamp (crawler.recovery.stamps): the store is this crawl's, and this shard's;
* the rows: a row in ``OUT/pages`` is the truth of what was fetched (docs/invariants.md #6:
  a row is durable before its URL is acked, and its links were delivered before the row
  was written). A store that forgot acks (a crash between a part file and its ack, or
  commits lost with a cut write-ahead log) would fetch those URLs again; :meth:`StoreAudit.settle`
  marks them done from their rows instead, as the ack would have.

A URL's ack is seen in the store as ``state`` done (or dropped) with ``fetches`` at least
the row's ``fetch_seq``: every ack adds one fetch (crawler.frontier.store ``record``), and a
refresh is fetch ``fetches + 1``. A first fetch counts as acked by its state alone, so
stores made before ``fetches`` existed read right.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Iterable, Sequence

from crawler.frontier.store import FrontierStore
from crawler.frontier.urltable import CLAIMED, DONE, DROPPED, QUEUED, chunks, url_key
from crawler.frontier.urlitem import UrlItem
from crawler.recovery.stamps import SHARD_FIX, STAMP_KEY, check, read_sqlite_stamp


def _wall(value: Any) -> float:
    return value.timestamp() if isinstance(value, dt.datetime) else float(value or 0.0)


def _seq(row: dict[str, Any]) -> int:
    return int(row.get("fetch_seq") or 1)


def read_stamp(path: str) -> str | None:
    """The stamp of the store at ``path``, read without writing anything (a read-only
    connection leaves the write-ahead log as it is); None when it has none."""
    return read_sqlite_stamp(path, "meta", "frontier store", SHARD_FIX)


class StoreAudit:
    """The checks of the module docstring on one open :class:`FrontierStore`."""

    def __init__(self, store: FrontierStore) -> None:
        self.store = store
        self._t = store.table

    def claim(self, identity: str | None, *, where: str | None = None, fix: str = SHARD_FIX) -> None:
        """Check the store's stamp against ``identity``; stamp a store that has none.
        The stamp is journaled (a remote output's copy carries it too). ``where`` names the
        store in a refusal (default: its file), ``fix`` what to do."""
        if check(where or self.store.path, self.store.get_meta(STAMP_KEY), identity, fix):
            assert identity is not None
            self.store.set_meta(STAMP_KEY, identity, journal=True)

    def _states(self, urls: Iterable[str]) -> dict[int, tuple[int, int]]:
        keys = list(dict.fromkeys(url_key(u) for u in urls))
        found: dict[int, tuple[int, int]] = {}
        with self._t.lock:
            for part in chunks(keys):
                q = f"SELECT h, state, fetches FROM urls WHERE h IN ({','.join('?' * len(part))})"
                found.update((h, (state, fetches)) for h, state, fetches in self._t.db.execute(q, part))
        return found

    def unacked(self, rows: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
        """The rows whose ack the store lacks (their URL held and not acked), and how many
        of ``rows`` have their URL in the store at all."""
        todo, missing = self._sort(rows)
        return todo, len(rows) - len(missing)

    def _sort(self, rows: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(rows held and not acked, rows whose URL the store does not hold)."""
        states = self._states(r["url"] for r in rows)
        todo, missing = [], []
        for r in rows:
            held = states.get(url_key(r["url"]))
            if held is None:
                missing.append(r)
            elif held[0] not in (DONE, DROPPED) or (_seq(r) > 1 and held[1] < _seq(r)):
                todo.append(r)
        return todo, missing

    def settle(self, rows: Sequence[dict[str, Any]], *, first_interval_s: float, add_missing: bool) -> list[dict[str, Any]]:
        """Ack ``rows`` as the outbox would have: each URL done, its fetch counted, its last
        fetch time and outcome kept; returns the rows that changed the store.

        A URL that got no refresh schedule yet is due ``first_interval_s`` after its row (a
        first fetch's interval, crawler.frontier.recrawl); a refresh's row moves its due
        time one interval on. Validators are left as they were (the next refetch asks
        unconditionally at worst). ``add_missing`` first adds URLs the store never held
        (their admission was lost with the log: the row proves it was made). Local outputs
        only: nothing is journaled."""
        todo, missing = self._sort(rows)
        if add_missing and missing:
            self.store.add([UrlItem(r["url"], r.get("depth") or 0) for r in missing])
            todo += missing  # queued now: acked below like the rest
        todo.sort(key=lambda r: (_wall(r.get("fetched_at")), _seq(r)))
        params = []
        for r in todo:
            t = _wall(r.get("fetched_at"))
            blocked = r.get("outcome") == "robots_blocked"
            params.append((
                QUEUED, CLAIMED, DONE, _seq(r), t, None if blocked else first_interval_s, int(blocked), t, t, first_interval_s,
                r.get("content_sha256"), r.get("simhash"), r.get("outcome"), r.get("status"), url_key(r["url"]),
            ))
        with self._t.lock:
            self._t.begin()
            self._t.db.executemany(
                "UPDATE urls SET state=CASE WHEN state IN (?, ?) THEN ? ELSE state END, fetches=max(fetches, ?),"
                " last_crawled_at=max(coalesce(last_crawled_at, 0), ?), interval_s=coalesce(interval_s, ?),"
                " next_crawl_at=CASE WHEN ? THEN next_crawl_at WHEN next_crawl_at IS NULL OR next_crawl_at <= ?"
                " THEN ? + coalesce(interval_s, ?) ELSE next_crawl_at END,"
                " content_sha=coalesce(?, content_sha), fingerprint=coalesce(?, fingerprint),"
                " last_outcome=?, last_status=? WHERE h=?",
                params,
            )
            self._t.end()
        return todo

    def last_fetch(self) -> float | None:
        """The fetch time of the newest ack the store holds (None: none). Reads every row."""
        with self._t.lock:
            newest: float | None = self._t.db.execute("SELECT max(last_crawled_at) FROM urls").fetchone()[0]
        return newest

    def holding(self, keys: Sequence[int]) -> set[int]:
        """Which of ``keys`` (signed 64-bit URL hashes, as the seen stores keep them) the store holds."""
        found: set[int] = set()
        with self._t.lock:
            for part in chunks(list(keys)):
                q = f"SELECT h FROM urls WHERE h IN ({','.join('?' * len(part))})"
                found.update(h for (h,) in self._t.db.execute(q, part))
        return found
