"""The decisions that limit what a shard fetches, kept in its durable frontier
(crawler.frontier.store) since its last checkpoint: what hosts' page budgets became, the
robots.txt verdicts that came in force (crawler.engine.admission makes them).

They are written in the same commit as the URL changes they govern or caused, and
journaled right after them, so a store rebuilt from OUT never holds an admission without
the budget it spent, or a refusal without the verdict that made it. The ``decisions``
table is a log, one row per commit that made decisions (an append at the end of a B-tree:
cheaper per URL than a row per host); a checkpoint holds all of it, so writing one empties
it.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, NamedTuple, Sequence

from crawler.frontier.urltable import UrlTable

__all__ = ["DecisionLog", "Decisions", "Verdicts"]

#: Decisions that limit fetching, made together: ``{kind: {key: value}}``. ``kind`` names
#: who reads them back (``budget``: hosts' page budgets; ``robots``: origins' rules), ``key``
#: the host or origin, ``value`` any JSON value; a later decision on the same key
#: replaces it. Journaled as ``["decide", decisions]``.
Decisions = Mapping[str, Mapping[str, Any]]


class Verdicts(NamedTuple):
    """What :meth:`crawler.frontier.store.FrontierStore.admit`'s ``decide`` made of the URLs
    new to the store: URLs claimed at once (refused: their rows follow), URLs dropped by a
    counted rule, and the decisions that made them."""

    claim: Sequence[str] = ()
    drop: Sequence[str] = ()
    decisions: Decisions | None = None


class DecisionLog:
    """The decisions that limit fetching made since the shard's last checkpoint (the
    module docstring), on the store's :class:`~crawler.frontier.urltable.UrlTable`:
    appended in the transaction of the URL changes they go with, read back in order by a
    restart, emptied by the checkpoint that holds them."""

    def __init__(self, table: UrlTable) -> None:
        self._t = table

    def append(self, decisions: Decisions | None) -> None:
        """Add ``decisions`` in the open transaction (the caller holds the lock): one row."""
        if decisions:
            value = json.dumps(decisions, separators=(",", ":"))
            self._t.db.execute("INSERT INTO decisions(value) VALUES (?)", (value,))

    def write(self, decisions: Decisions) -> None:
        """Decisions with no URL change to go with them (a trap cut that left the queue as
        it was). Committed and journaled."""
        if not decisions:
            return
        with self._t.lock:
            self._t.begin()
            self.append(decisions)
            self._t.end()
            if self._t.journal is not None:
                self._t.journal("decide", decisions)

    def clear(self) -> None:
        """Forget every decision, in the open transaction (a checkpoint holds them now)."""
        self._t.db.execute("DELETE FROM decisions")

    def read(self) -> list[tuple[str, str, Any]]:
        """Every decision since the last checkpoint, oldest first, as ``(kind, key, value)``
        (a restart loads them over the checkpoint: crawler.engine.checkpoint)."""
        with self._t.lock:
            rows = self._t.db.execute("SELECT value FROM decisions ORDER BY seq").fetchall()
        return [(kind, key, value) for (batch,) in rows for kind, values in json.loads(batch).items()
                for key, value in values.items()]
