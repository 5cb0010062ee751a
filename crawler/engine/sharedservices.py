"""The crawl-wide services shards share, as plain classes: the page budget and the
duplicate-content index (the seen-URL group is crawler.seen.group).

The in-process runtime (crawler.session.inprocess) calls them directly; the Ray runtime wraps each
in a thin actor (actors/serviceactors.py). Either way a shard sees the same async interfaces,
so it cannot tell where it runs, and the logic is tested here without Ray.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from typing import Any, Awaitable, Callable, Protocol, Sequence

from crawler.clock import Clock
from crawler.config.settings import CrawlConfig
from crawler.content.index import ContentIndexGroup, ContentShard, ShardReply, ShardRequest
from crawler.errors import DamagedStateError, ForeignStateError
from crawler.output.fs import write_local_atomic
from crawler.recovery import stamps

log = logging.getLogger(__name__)




class BudgetPool:
    """The global ``limits.max_pages`` count, handed out in leases.

    With ``path`` the pages granted so far are saved before a lease returns, so a
    restarted pool does not hand out again what it already gave (``max_pages`` holds
    across a restart of the pool; pages leased to a shard that then crashed are spent).

    The file is stamped with ``identity`` (crawler.recovery.stamps). A file that is missing,
    cannot be read as a count, or is another crawl's is rebuilt from ``spent()``: the
    pages the rows in OUT show fetched (crawler.recovery.statefiles.pages_spent), which is
    what the budget counts. Rebuilt, not refused: the rows are the truth of what was
    spent, nothing is lost (leases a crashed shard held unused become available again),
    and a refusal would only ask the operator to do by hand what this does. Without
    ``spent`` such a file is refused with one line (:class:`DamagedStateError`).
    """

    def __init__(self, max_pages: int | None, path: str | None = None, *, identity: str | None = None,
                 spent: Callable[[], int] | None = None) -> None:
        self.max_pages = max_pages
        self.path = path
        self.identity = identity
        self.granted = 0
        self.rebuilt = ""  # why the count was rebuilt from the rows ("": it was not)
        if path and max_pages is not None:  # an unlimited crawl never reads nor writes it
            self._open(path, spent)

    def _open(self, path: str, spent: Callable[[], int] | None) -> None:
        problem = ""
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            granted = data["granted"] if isinstance(data, dict) else None
            if isinstance(granted, bool) or not isinstance(granted, int) or granted < 0:
                raise ValueError(f"'granted' is {granted!r}, not a count of pages")
            stamps.check(path, data.get(stamps.STAMP_KEY), self.identity)
            self.granted = granted
            if self.identity is not None and data.get(stamps.STAMP_KEY) is None:
                self._save()  # a file made before stamps: stamped now
            return
        except FileNotFoundError:
            problem = "missing"
        except (ValueError, KeyError, TypeError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            problem = f"damaged ({exc})"
        except ForeignStateError as exc:
            problem = str(exc)
        if spent is None:
            if problem == "missing":
                return
            raise DamagedStateError(f"{path}: the page budget is {problem}: delete it to start the count over")
        self.granted = spent()
        if problem != "missing":
            self.rebuilt = problem
            log.warning("%s: the page budget was %s; rebuilt from the rows in the output: %d pages spent",
                        path, problem, self.granted)
        self._save()

    def _save(self) -> None:
        assert self.path is not None
        data: dict[str, Any] = {"granted": self.granted}
        if self.identity is not None:
            data[stamps.STAMP_KEY] = self.identity
        write_local_atomic(self.path, json.dumps(data).encode())

    def lease(self, n: int) -> int:
        """Take up to ``n`` pages; 0 once the budget is spent."""
        if self.max_pages is None:
            return n
        give = max(0, min(n, self.max_pages - self.granted))
        if give:
            self.granted += give
            if self.path:
                self._save()
        return give

    def remaining(self) -> int | None:
        return None if self.max_pages is None else self.max_pages - self.granted


def lease_size(max_pages: int, shards: int, cap: int) -> int:
    """Pages a shard asks for at a time: at most ``cap``, and small enough (1/8 of an even
    share) that no shard sits on pages another shard could use as the budget runs out."""
    return max(1, min(cap, max_pages // (8 * max(1, shards))))


class LeasedBudget:
    """A shard's view of the page budget: spends local leases, refills them on demand.

    Args:
        lease: ``await lease(n)`` -> pages granted by the pool (0 when spent).
        max_pages: ``limits.max_pages`` (None: unlimited, no calls at all).
        shards: how many shards share the pool.
        cap: ``runtime.budget_lease_max``.
    """

    def __init__(self, lease: Callable[[int], Awaitable[int]], max_pages: int | None, shards: int, cap: int) -> None:
        self._lease = lease
        self.max_pages = max_pages
        self._size = lease_size(max_pages, shards, cap) if max_pages is not None else 0
        self.local = 0
        self.spent = False
        self._lock = asyncio.Lock()

    async def acquire(self) -> bool:
        """Take one page; False once the budget is spent."""
        if self.max_pages is None:
            return True
        if self.local == 0 and not self.spent:
            async with self._lock:
                if self.local == 0 and not self.spent:
                    got = await self._lease(self._size)
                    self.local += got
                    self.spent = got == 0
        if self.local > 0:
            self.local -= 1
            return True
        return False


class ShardHandle(Protocol):
    """How the content index reaches one of its shards (in process, or a Ray actor)."""

    def call(self, req: ShardRequest) -> Awaitable[ShardReply]: ...

    def save(self) -> Awaitable[None]: ...

    def stats(self) -> Awaitable[dict[str, int]]: ...


class LocalShard:
    """A :class:`ContentShard` in this process, behind the :class:`ShardHandle` interface."""

    def __init__(self, shard: ContentShard) -> None:
        self.shard = shard

    async def call(self, req: ShardRequest) -> ShardReply:
        return self.shard.call(req)

    async def save(self) -> None:
        self.shard.save()

    async def stats(self) -> dict[str, int]:
        return self.shard.stats()


class ContentIndexService:
    """The crawl-wide duplicate-content index (mirrors live on other hosts, so it is
    global): a :class:`~crawler.content.index.ContentIndexGroup` over ``shards`` in-process
    :class:`~crawler.content.index.ContentShard` objects logging to ``<path>-<i>.log``, or
    over the given ``handles`` (the Ray content actor passes shard actors).

    One batch at a time (verdicts depend on every earlier batch); a batch is one call per
    shard, carrying the previous batch's additions. Shards save every ``every_s`` of
    ``clock`` and on :meth:`save`; after a restart, duplicates of pages indexed since the
    last save are missed (stored as originals); nothing else is lost. ``crawl``: the
    crawl's identity, each log stamped with it (crawler.recovery.stamps).
    """

    def __init__(self, distance: int, tables: int, clock: Clock, *, path: str | None = None, every_s: float = 30.0,
                 shards: int = 1, handles: Sequence[ShardHandle] | None = None, crawl: str | None = None) -> None:
        self.path = path
        self._clock = clock
        self._every_s = every_s
        self._last_save = clock.now()
        if handles is None:
            handles = [LocalShard(ContentShard(distance, tables, shard_log(path, i) if path else None,
                                               stamps.part(crawl, stamps.content_part(i))))
                       for i in range(shards)]
        self.handles = list(handles)
        self.group = ContentIndexGroup(distance, tables, len(self.handles))
        self._lock = asyncio.Lock()

    async def check_and_add(self, items: list[tuple[str, str, int | None]]) -> list[tuple[str | None, str | None]]:
        """``(dup_kind, original's url_hash)`` per ``(url, sha256, simhash|None)``, in order."""
        async with self._lock:
            plan, reqs = self.group.plan(items)
            replies = await asyncio.gather(*(h.call(r) for h, r in zip(self.handles, reqs)))
            out = self.group.resolve(plan, replies)
            if self._clock.now() - self._last_save >= self._every_s:
                await self._save()
            return out

    async def _flush(self) -> None:
        await asyncio.gather(*(h.call(r) for h, r in zip(self.handles, self.group.pending_requests()) if r is not None))

    async def _save(self) -> None:
        await self._flush()
        await asyncio.gather(*(h.save() for h in self.handles))
        self._last_save = self._clock.now()

    async def save(self) -> None:
        """Index what is queued and append every shard's new entries to its log."""
        async with self._lock:
            await self._save()

    def log_names(self) -> list[str]:
        """Basenames of the shards' logs (what a remote OUT keeps a copy of)."""
        return [os.path.basename(shard_log(self.path, i)) for i in range(len(self.handles))] if self.path else []

    async def stats(self) -> dict[str, Any]:
        """Totals: duplicates found, entries and bytes held, candidates checked per lookup."""
        async with self._lock:
            await self._flush()
            return self.group.stats(await asyncio.gather(*(h.stats() for h in self.handles)))


#: Path prefix of the content index's shard logs in a state folder.
CONTENT_LOG = "content"


def content_log_names(cfg: CrawlConfig) -> list[str]:
    """Basenames of the content shards' logs of a crawl (``content-000.log``...)."""
    return [os.path.basename(shard_log(CONTENT_LOG, i)) for i in range(cfg.runtime.content_shards)]


def shard_log(path: str, i: int) -> str:
    """The log file of content shard ``i`` for the index at ``path`` (a path prefix)."""
    return f"{path}-{i:03d}.log"
