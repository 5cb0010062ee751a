"""A shard's durable frontier (crawler.frontier.store) read in key order, page by page, for
the URL ledger's audit at the end of a run (crawler.session.ledgeraudit): every URL the
shard holds, checked against the seen sets' marks and the output's rows.
"""

from __future__ import annotations

import contextlib
import sqlite3
from typing import Any, Iterator

from crawler.errors import StorageError
from crawler.frontier.urltable import UrlTable

__all__ = ["AuditPages"]


class AuditPages:
    """The store read in key order, page by page (the module docstring). A closed store (a
    stopped shard) is read through a fresh connection to its file."""

    def __init__(self, table: UrlTable) -> None:
        self._t = table

    @contextlib.contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        with self._t.lock:
            if not self._t.closed:
                yield self._t.db
                return
        try:
            db = sqlite3.connect(self._t.path)
        except sqlite3.Error as exc:
            raise StorageError(f"cannot reopen the frontier store {self._t.path!r}: {exc}") from exc
        try:
            yield db
        finally:
            db.close()

    def _page(self, columns: str, key: str, after: int | None, limit: int) -> list[Any]:
        where = "" if after is None else f" WHERE {key} > ?"
        args = (limit,) if after is None else (after, limit)
        try:
            with self._reading() as db:
                return db.execute(f"SELECT {columns} FROM urls{where} ORDER BY {key} LIMIT ?", args).fetchall()
        except sqlite3.Error as exc:
            raise StorageError(f"reading the frontier store {self._t.path!r} failed: {exc}") from exc

    def keys(self, after: int | None, limit: int) -> list[int]:
        """Up to ``limit`` URL keys above ``after``, ascending: ``h``, the signed 64-bit
        crawler.seen.url_hash64 (the seen set's key) of every URL held, in any state. An
        index-only scan of the unique index on ``h``."""
        return [r[0] for r in self._page("h", "h", after, limit)]

    def ids(self, after: int | None, limit: int) -> list[tuple[int, int, str]]:
        """Up to ``limit`` (public url_hash as a signed integer, state, url) above ``after``,
        ascending by url_hash (the id rows carry): what the output is checked against."""
        return [(r[0], r[1], r[2]) for r in self._page("uh, state, url", "uh", after, limit)]
