"""The URL ledger's audit: what the durable stores say, compared key by key.

DESIGN invariant 13 (the verdict follows the ledger) needs more than counts. The seen
sets' counter of URLs called new cannot be compared with what the shards hold once any
seen check was bypassed (a failed seen call delivers a batch unfiltered; a page fetched
again after a crash re-sends its links) or a seen set restarted from an older copy in OUT
(it forgot recent marks): both sides move apart for reasons that lose nothing, so that
check had to be switched off exactly when deliveries get lost (a restart). The durable
facts stay comparable:

* every seen set's exact store (crawler.seen.store.DiskStore): the 64-bit hash of every
  URL it marked seen;
* every shard's frontier store (crawler.frontier.store): every URL it admitted, keyed by
  the same hash, with its state.

**A mark that no shard holds is a lost URL** (docs/invariants.md #3: a URL is marked seen
when it is enqueued, so nothing will ever admit it again). The other way round is
harmless: a URL held without a mark (a bypassed check, a forgotten mark) costs one
duplicate delivery, which its owner refuses, if it is ever linked again. A delivery that
failed and undid its marks (``seen_forget``) left neither; a page kept claimed to retry
its links leaves marks that its retry (or its replay after a restart) delivers, which is
why the verdict is taken only when a crawl has finished: every page done, nothing in
flight (crawler.session.crawlsession.CrawlSession.stop).

:func:`audit_marks` walks both sides in key order, a page per store at a time, merged in
windows (bounded memory: one page per store, whatever the crawl's size); each store is
read once, by its own index. :func:`audit_rows` does the same for the acked URLs against
the output's rows, to name the URLs behind a count that does not balance.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Awaitable, Callable, Protocol, Sequence

import numpy as np
import pyarrow.compute as pc

from crawler.config.settings import CrawlConfig
from crawler.frontier.store import DONE
from crawler.frontier.urlitem import UrlItem
from crawler.output import read_pages
from crawler.seen.hashing import MASK64, shard_of
from crawler.session import ledger, relink
from crawler.urls import url_hash

log = logging.getLogger(__name__)

#: Keys asked of one store per call (8 bytes each: half a megabyte per page).
PAGE = 65_536
#: Lost keys kept to be named and requeued; more are counted (the next audit finds them).
KEEP = 100_000
#: URLs a report names.
SAMPLE = 10

Fetch = Callable[[int | None, int], Awaitable[Sequence[Any]]]
"""One store's page: ``await fetch(after, limit)`` -> up to ``limit`` keys (or rows whose
first item is the key) above ``after`` (None: from the start), ascending."""


class _Cursor:
    """One store read in key order, a page at a time."""

    def __init__(self, fetch: Fetch, limit: int, rows: bool) -> None:
        self._fetch, self._limit, self._rows = fetch, limit, rows
        self._after: int | None = None
        self.keys = np.empty(0, dtype=np.int64)
        self.items: list[Any] = []
        self.exhausted = False  # nothing beyond what is buffered

    async def fill(self) -> None:
        if self.keys.size or self.exhausted:
            return
        page = list(await self._fetch(self._after, self._limit))
        self.exhausted = len(page) < self._limit
        if not page:
            return
        if self._rows:
            self.keys = np.fromiter((r[0] for r in page), dtype=np.int64, count=len(page))
            self.items = page
        else:
            self.keys = np.asarray(page, dtype=np.int64)
        self._after = int(self.keys[-1])

    def take(self, upto: int | None) -> tuple[np.ndarray, list[Any]]:
        """The buffered keys (and rows) up to ``upto`` included (None: all of them)."""
        n = self.keys.size if upto is None else int(np.searchsorted(self.keys, upto, side="right"))
        keys, self.keys = self.keys[:n], self.keys[n:]
        items: list[Any] = []
        if self._rows:
            items, self.items = self.items[:n], self.items[n:]
        return keys, items


def _cat(parts: list[tuple[np.ndarray, list[Any]]]) -> tuple[np.ndarray, list[Any]]:
    keys = np.concatenate([k for k, _ in parts]) if parts else np.empty(0, dtype=np.int64)
    return keys, [i for _, items in parts for i in items]


async def _windows(
    left: Sequence[_Cursor], right: Sequence[_Cursor]
) -> AsyncIterator[tuple[np.ndarray, list[Any], np.ndarray, list[Any]]]:
    """Both sides in consecutive key ranges: each window holds every key of every store up
    to the smallest last key any store still reading has buffered, so a key and its match
    always meet in the same window."""
    cursors = [*left, *right]
    while True:
        await asyncio.gather(*(c.fill() for c in cursors))
        if all(c.exhausted and not c.keys.size for c in cursors):
            return
        bounds = [int(c.keys[-1]) for c in cursors if not c.exhausted]
        upto = min(bounds) if bounds else None
        lk, li = _cat([c.take(upto) for c in left])
        rk, ri = _cat([c.take(upto) for c in right])
        yield lk, li, rk, ri


@dataclass
class MarkAudit:
    """The seen sets' marks against the shards' stores."""

    marks: int = 0  # URLs the seen sets marked
    held: int = 0  # URLs the shards hold, in any state
    lost: int = 0  # marks that no shard holds
    unmarked: int = 0  # URLs held without a mark (harmless: see the module docstring)
    lost_keys: list[int] = field(default_factory=list)  # the first KEEP lost keys (signed)

    def to_json(self) -> dict[str, Any]:
        return {"checked": True, "marks": self.marks, "held": self.held, "lost": self.lost, "unmarked": self.unmarked}


async def audit_marks(seen: Sequence[Fetch], held: Sequence[Fetch], *, page: int = PAGE, keep: int = KEEP) -> MarkAudit:
    """Every mark of ``seen`` (the seen shards' :meth:`~crawler.seen.set.SeenSet.key_page`)
    looked up among the keys of ``held`` (the shards' stores), in one merged pass."""
    out = MarkAudit()
    left = [_Cursor(f, page, rows=False) for f in seen]
    right = [_Cursor(f, page, rows=False) for f in held]
    async for marks, _, keys, _ in _windows(left, right):
        out.marks += int(marks.size)
        out.held += int(keys.size)
        lost = marks[~np.isin(marks, keys)]
        out.lost += int(lost.size)
        out.unmarked += int((~np.isin(keys, marks)).sum())
        room = keep - len(out.lost_keys)
        if room > 0 and lost.size:
            out.lost_keys.extend(int(k) for k in lost[:room])
    return out


@dataclass
class RowAudit:
    """The shards' acked URLs against the rows in OUT."""

    acked_without_row: int = 0
    rows_without_holder: int = 0
    sample_acked: list[str] = field(default_factory=list)  # URLs acked (done) with no row
    sample_rows: list[str] = field(default_factory=list)  # URLs with a row no shard holds


def _signed(hex16: str) -> int:
    v = int(hex16, 16)
    return v - (1 << 64) if v >= 1 << 63 else v


def output_ids(out: str, storage_options: dict[str, Any] | None) -> tuple[np.ndarray, dict[int, str]]:
    """The distinct url_hash ids of the rows in OUT, sorted (signed, as the stores keep
    them), and a way back to their URLs for a sample."""
    table = read_pages(out, storage_options, dedupe=False, columns=["url"])
    urls = pc.unique(table["url"]).to_pylist() if table.num_rows else []
    by_id = {_signed(url_hash(u)): u for u in urls}
    return np.array(sorted(by_id), dtype=np.int64), by_id


def _array_fetch(keys: np.ndarray) -> Fetch:
    async def fetch(after: int | None, limit: int) -> list[int]:
        start = 0 if after is None else int(np.searchsorted(keys, after, side="right"))
        return [int(k) for k in keys[start : start + limit]]

    return fetch


async def audit_rows(held: Sequence[Fetch], out: str, storage_options: dict[str, Any] | None, *, page: int = PAGE) -> RowAudit:
    """Name what a ledger that does not balance is missing: URLs a shard acked (their row
    was durable then) that have no row in OUT, and rows of URLs no shard holds. Reads the
    output's URLs (as the ledger's row count does) and each store by its url_hash index."""
    ids, urls = output_ids(out, storage_options)
    res = RowAudit()
    left = [_Cursor(f, page, rows=True) for f in held]
    async for keys, rows, row_ids, _ in _windows(left, [_Cursor(_array_fetch(ids), page, rows=False)]):
        with_row = np.isin(keys, row_ids)
        for (_, state, url), has_row in zip(rows, with_row.tolist()):
            if state == DONE and not has_row:
                res.acked_without_row += 1
                if len(res.sample_acked) < SAMPLE:
                    res.sample_acked.append(url)
        orphans = row_ids[~np.isin(row_ids, keys)]
        res.rows_without_holder += int(orphans.size)
        res.sample_rows.extend(urls[int(k)] for k in orphans[: SAMPLE - len(res.sample_rows)])
    return res


class AuditRuntime(Protocol):
    """What the audit asks of the runtime (crawler.session.runtime.Runtime)."""

    async def seen_keys(self, index: int, after: int | None, limit: int) -> list[int]: ...

    async def seen_forget_keys(self, index: int, keys: list[int]) -> int: ...

    async def held_keys(self, shard_id: str, after: int | None, limit: int) -> list[int]: ...

    async def held_ids(self, shard_id: str, after: int | None, limit: int) -> list[tuple[int, int, str]]: ...

    async def deliver(self, shard_id: str, items: list[UrlItem]) -> None: ...


async def settle_lost(
    runtime: AuditRuntime,
    cfg: CrawlConfig,
    seeds: Sequence[str],
    shard_ids: Sequence[str],
    seen_shards: int,
    owner_of: Callable[[str], str],
    run_blocking: Callable[..., Awaitable[Any]] = asyncio.to_thread,
) -> dict[str, Any]:
    """At the end of a finished crawl (every shard idle, nothing in flight): audit the seen
    marks, name the lost URLs from the output (crawler.session.relink), queue the named
    ones again at their owners (the next run fetches them) and undo the marks of the
    ones no output names (a link to them admits them again). Returns ``marks`` for the
    ledger (crawler.session.ledger.build): the audit's counts, ``sample`` (URLs),
    ``requeued`` and ``unnamed``."""
    found = await audit_marks(
        [_bind(runtime.seen_keys, i) for i in range(seen_shards)], [_bind(runtime.held_keys, s) for s in shard_ids]
    )
    marks = {**found.to_json(), "sample": [], "requeued": 0, "unnamed": 0}
    if not found.lost:
        return marks
    log.error("%d URLs are marked seen and held by no shard: naming them from the output", found.lost)
    named = await run_blocking(relink.find, cfg, seeds, found.lost_keys)
    marks["sample"] = [f.url for f in list(named.values())[:SAMPLE]]
    by_owner: dict[str, list[UrlItem]] = {}
    for f in named.values():
        item = UrlItem(f.url, f.depth, f.referrer)
        by_owner.setdefault(owner_of(item.host), []).append(item)
    for owner, items in by_owner.items():
        # The marks are there already: straight to the owner, whose store keeps it (crawler.session.runtime.Runtime.deliver).
        await runtime.deliver(owner, items)
        marks["requeued"] += len(items)
    unnamed = [k for k in found.lost_keys if k not in named]
    marks["unnamed"] = found.lost - len(named)
    by_seen: dict[int, list[int]] = {}
    for k in unnamed:
        by_seen.setdefault(shard_of(k & MASK64, seen_shards), []).append(k & MASK64)
    for index, keys in by_seen.items():
        await runtime.seen_forget_keys(index, keys)
    return marks


def _bind(call: Callable[..., Awaitable[Sequence[Any]]], which: Any) -> Fetch:
    async def fetch(after: int | None, limit: int) -> Sequence[Any]:
        return await call(which, after, limit)

    return fetch


async def name_unaccounted(runtime: AuditRuntime, shard_ids: Sequence[str], out: str, storage_options: dict[str, Any] | None) -> RowAudit:
    """:func:`audit_rows` over the runtime's shards (stopped: their stores are read from their files)."""
    return await audit_rows([_bind(runtime.held_ids, s) for s in shard_ids], out, storage_options)


async def marks_at_stop(
    runtime: AuditRuntime,
    cfg: CrawlConfig,
    seeds: Sequence[str],
    shard_ids: Sequence[str],
    seen_shards: int,
    owner_of: Callable[[str], str],
    *,
    finished: bool,
    run_blocking: Callable[..., Awaitable[Any]] = asyncio.to_thread,
) -> dict[str, Any]:
    """``marks`` for the ledger of a run about to stop its shards: :func:`settle_lost` when
    the crawl finished, else why they were not audited. An audit that fails is reported
    as such (``failed``): the ledger then does not balance, since nothing proved it does."""
    if not cfg.dedup.seen_exact:
        return ledger.not_checked("bloom_only")
    if not finished:
        return ledger.not_checked("unfinished")
    try:
        return await settle_lost(runtime, cfg, seeds, shard_ids, seen_shards, owner_of, run_blocking)
    except Exception as exc:  # noqa: BLE001 - the stop goes on: rows flushed, stats written, resumable
        log.exception("auditing the seen marks failed")
        return {"checked": False, "failed": True, "why": f"the audit failed: {exc!r}"}


async def name_if_unaccounted(
    led: dict[str, Any], runtime: AuditRuntime, shard_ids: Sequence[str], out: str, storage_options: dict[str, Any] | None
) -> None:
    """When the counts do not balance, add the URLs behind the gap to ``led``
    (crawler.session.ledger.name_missing); the shards are stopped, their stores still there."""
    if not led["missing"]["unaccounted"]:
        return
    try:
        res = await name_unaccounted(runtime, shard_ids, out, storage_options)
    except Exception as exc:  # noqa: BLE001 - the count is reported either way
        log.warning("naming the unaccounted URLs failed: %r", exc)
        return
    ledger.name_missing(led, res.sample_acked, res.sample_rows, (res.acked_without_row, res.rows_without_holder))
