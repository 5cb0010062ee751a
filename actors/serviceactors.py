"""Shared-service actors: one shard of the seen set, the content index, the page budget.

Each is a thin shell over a plain class (crawler.seen.SeenSet, crawler.services) that is
tested without Ray; this module only moves batches in and out.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any, Awaitable, Callable, Sequence, TypeVar

import ray

from actors.metrics import SeenMetrics
from actors.rayclasses import remote_class
from crawler.recovery import stamps, statefiles as state
from crawler.recovery.copyschedule import CopyGate, CopySchedule
from crawler.clock import SYSTEM_CLOCK
from crawler.errors import ServiceUnavailableError, StorageError, retry_later
from crawler.seen import ForgetCall, SeenGroup, SeenSet, ShardCall
from crawler.content.index import ContentShard, ShardReply, ShardRequest
from crawler.services.budget import BudgetPool
from crawler.services.contentindex import ContentIndexService, shard_log


#: Longest wait for a replaced run's actor to release a seen store.
OPEN_WAIT_S = 20.0
#: Longest wait for a restarting service actor (its node was lost: Ray restarts it
#: elsewhere from its snapshot) before the call fails.
SERVICE_RETRY_S = 120.0

T = TypeVar("T")


async def call_service(call: Callable[[], Awaitable[T]], what: str, give_up_s: float = SERVICE_RETRY_S) -> T:
    """``await call()``, again while the actor behind it is restarting or refuses for now.

    Retried, with backoff, for up to ``give_up_s``: the actor restarting (its node was
    lost), and an error raised in the actor's method that says "not now" (Ray delivers
    it as ``RayTaskError`` with the actor's exception as ``cause``: a shard fenced while
    its driver is silent, the object store failing: crawler.errors.retry_later). Past
    ``give_up_s`` either ends as :class:`ServiceUnavailableError`, itself a "not now" the
    caller may wait out (the link router does: docs/invariants.md #13). Any other error in
    the actor is raised at once, as Ray gives it (an instance of its cause's class too).

    Safe only for calls that may run twice (Ray cannot say whether a call cut short by
    the restart ran): the content index never calls a page a duplicate of itself, a
    budget lease granted twice only spends pages sooner (never more than ``max_pages``),
    and a shard's ``accept`` is idempotent (its store ignores a URL it holds).
    """
    delay, deadline = 0.05, time.monotonic() + give_up_s
    while True:
        try:
            return await call()
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as exc:
            failure: Exception = exc
        except ray.exceptions.RayTaskError as exc:
            if not retry_later(exc.cause if exc.cause is not None else exc):
                raise
            failure = exc
        if time.monotonic() >= deadline:
            raise ServiceUnavailableError(f"{what}: unavailable for {give_up_s:.0f}s ({failure})") from failure
        await asyncio.sleep(delay)
        delay = min(delay * 2, 2.0)


@ray.remote(num_cpus=0)
class SeenFilter:
    """One shard of the seen-URL set (Bloom filter in front of an exact store).

    With ``path`` the exact store is a SQLite file there (every call committed before it
    returns), so a restarted actor reopens the same set. The store is exclusive to one
    process: a replaced run's actor may hold it until it notices it lost the lease, so
    opening waits up to :data:`OPEN_WAIT_S` for it to let go.
    """

    def __init__(
        self, capacity: int, error_rate: float, exact: bool, bloom: str, path: str | None = None,
        remote: tuple[str, dict[str, Any] | None, str] | None = None, index: int = 0, identity: str | None = None,
    ) -> None:
        # remote: (OUT, storage options, file name) of this shard's copy in a remote output.
        # path: a spec resolved on this actor's node (crawler.recovery.statefiles.here).
        self.remote = remote
        self.copies = CopyGate()
        self.metrics = SeenMetrics(index)
        path = state.here(path) if path else None
        # With a remote output the node's disk is a cache: the set starts from OUT's copy.
        # A copy older than the crash (or none) forgets URLs marked since: they may be
        # admitted again, each a duplicate delivery the owner's store refuses (counted).
        self.restored = 0
        if path and remote:
            out, opts, name = remote
            fetched = state.fetch_local(out, opts, name, os.path.join(os.path.dirname(path), name))
            self.restored = int(fetched or ray.get_runtime_context().was_current_actor_reconstructed)
        deadline = time.monotonic() + OPEN_WAIT_S
        while True:
            try:
                self.set = SeenSet(capacity, error_rate, exact=exact, bloom=bloom, path=path or None,
                                   identity=identity)
                return
            except StorageError as exc:
                if "open in another" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def close(self) -> None:
        self.set.close()

    def ship(self, wall: float, schedule: CopySchedule, final: bool = False) -> None:
        """Copy the set to OUT when ``schedule`` says enough changed (crawler.recovery.copyschedule)."""
        if self.remote is not None and self.copies.due(schedule, final=final):
            out, opts, name = self.remote
            held = len(self.set)
            self.copies.copied(state.ship(self.set.backup, out, name, wall, opts), held)

    def check_and_add_hashes(self, hashes: list[int]) -> list[bool]:
        out = self.set.check_and_add_hashes(hashes)
        self.copies.note(sum(out))
        self.metrics.record(self.set.checks, self.set.false_positives)
        return out

    def forget_hashes(self, hashes: list[int]) -> int:
        n = self.set.forget_hashes(hashes)
        self.copies.note(n)
        return n

    def key_page(self, after: int | None, limit: int) -> list[int]:
        return self.set.key_page(after, limit)

    def stats(self) -> dict[str, Any]:
        return {**self.set.stats(), "restored_from_out": self.restored}


class SeenGroupClient:
    """The shards' seen service on a cluster: :class:`SeenGroup` over the SeenFilter actors.

    The splitting by hash, one call per shard and the merge live in
    ``crawler.seen.group`` (tested without Ray); this only turns each actor into a shard
    callable (a Ray ``ObjectRef`` is awaitable).
    """

    def __init__(self, actors: Sequence[Any]) -> None:
        self.actors = list(actors)
        self._group = SeenGroup([self._shard(a) for a in self.actors], [self._forget(a) for a in self.actors])

    @staticmethod
    def _shard(actor: Any) -> ShardCall:
        # A function per actor binds that actor now (a lambda in a loop would bind the last).
        return lambda hashes: actor.check_and_add_hashes.remote(hashes)

    @staticmethod
    def _forget(actor: Any) -> ForgetCall:
        return lambda hashes: actor.forget_hashes.remote(hashes)

    async def check_and_add(self, urls: list[str]) -> list[bool]:
        """For each URL, True if its seen shard had not seen it (it is now marked seen)."""
        return await self._group.check_and_add(urls)

    async def forget(self, urls: list[str]) -> int:
        """Undo the marks of URLs whose delivery failed (SeenGroup.forget)."""
        return await self._group.forget(urls)


@ray.remote(num_cpus=0)
class ContentShardActor:
    """One shard of the duplicate-content index (crawler.content.index.ContentShard), for
    an index spread over several actors (``runtime.content_shards`` > 1)."""

    def __init__(self, distance: int, tables: int, path: str | None, remote: tuple[str, dict[str, Any] | None] | None = None,
                 identity: str | None = None) -> None:
        path = state.here(path) if path else None
        self.path, self.remote = path, remote
        self.copies = CopyGate()
        if path and remote:
            state.fetch_local(remote[0], remote[1], os.path.basename(path), path)
        self.shard = ContentShard(distance, tables, path, identity)

    def call(self, req: ShardRequest) -> ShardReply:
        return self.shard.call(req)

    def save(self) -> None:
        self.shard.save()

    def ship(self, wall: float, schedule: CopySchedule, final: bool = False) -> None:
        """Copy the shard's log to OUT when ``schedule`` says it grew enough (crawler.recovery.copyschedule)."""
        if self.path and self.remote is not None:
            self.shard.save()
            self.copies.grown_to(state.file_size(self.path))
            if self.copies.due(schedule, final=final):
                size = state.ship_file(self.remote[0], self.remote[1], os.path.basename(self.path), self.path, wall)
                self.copies.copied(size, size)

    def stats(self) -> dict[str, int]:
        return self.shard.stats()


class _RemoteShard:
    """A ContentShardActor behind crawler.services.contentindex.ShardHandle (an ObjectRef is awaitable)."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor

    def call(self, req: ShardRequest) -> Any:
        return self.actor.call.remote(req)

    def save(self) -> Any:
        return self.actor.save.remote()

    def stats(self) -> Any:
        return self.actor.stats.remote()


@ray.remote(num_cpus=0)
class ContentIndexActor:
    """The crawl-wide duplicate-content index (crawler.services.contentindex.ContentIndexService): its
    one shard in this actor, or ``shards`` ContentShardActors it coordinates."""

    def __init__(
        self, distance: int, tables: int, path: str | None, every_s: float, remote: tuple[str, dict[str, Any] | None] | None = None,
        shards: int = 1, restart: dict[str, Any] | None = None, crawl: str | None = None,
    ) -> None:
        path = state.here(path) if path else None
        self.path, self.remote = path, remote
        self.copies = CopyGate()
        self.shard_actors: list[Any] = []
        handles = None
        if shards > 1:
            self.shard_actors = [
                remote_class(ContentShardActor).options(**(restart or {})).remote(
                    distance, tables, shard_log(path, i) if path else None, remote, stamps.part(crawl, stamps.content_part(i)))
                for i in range(shards)
            ]
            handles = [_RemoteShard(a) for a in self.shard_actors]
        elif path and remote:
            state.fetch_local(remote[0], remote[1], os.path.basename(shard_log(path, 0)), shard_log(path, 0))
        self.service = ContentIndexService(distance, tables, SYSTEM_CLOCK, path=path, every_s=every_s, shards=shards,
                                           handles=handles, crawl=crawl)

    async def ship(self, wall: float, schedule: CopySchedule, final: bool = False) -> None:
        """Copy the index's logs to OUT when ``schedule`` says they grew enough (crawler.recovery.copyschedule)."""
        if self.path and self.remote is not None:
            await self.service.save()
            if self.shard_actors:
                await asyncio.gather(*(a.ship.remote(wall, schedule, final) for a in self.shard_actors))
            else:
                log_path = shard_log(self.path, 0)
                self.copies.grown_to(state.file_size(log_path))
                if self.copies.due(schedule, final=final):
                    size = state.ship_file(self.remote[0], self.remote[1], os.path.basename(log_path), log_path, wall)
                    self.copies.copied(size, size)

    async def check_and_add(self, items: list[tuple[str, str, int | None]]) -> list[tuple[str | None, str | None]]:
        return await self.service.check_and_add(items)

    async def save(self) -> None:
        await self.service.save()

    async def stats(self) -> dict[str, Any]:
        return await self.service.stats()


@ray.remote(num_cpus=0)
class Budget:
    """The global ``limits.max_pages`` count (crawler.services.budget.BudgetPool).

    With a remote output every grant is written to ``OUT/state/budget.json`` before the
    lease returns (one PUT per lease of up to ``runtime.budget_lease_max`` pages), so a
    pool restarted from OUT on another node never grants pages twice."""

    def __init__(self, max_pages: int | None, path: str | None, remote: tuple[str, dict[str, Any] | None] | None = None,
                 identity: str | None = None, output: tuple[str, dict[str, Any] | None] | None = None) -> None:
        # output: (OUT, storage options): the rows a damaged or missing count is rebuilt from.
        path = state.here(path) if path else None
        self.path, self.remote = path, remote
        if path and remote:
            state.fetch_local(remote[0], remote[1], "budget.json", path)
        spent = (lambda: state.pages_spent(*output)) if output is not None else None
        self.pool = BudgetPool(max_pages, path, identity=identity, spent=spent)

    def ship(self, wall: float, schedule: CopySchedule, final: bool = False) -> None:
        """Copy the count to OUT (a few bytes: every time; ``schedule`` is for the big pieces)."""
        if self.path and self.remote is not None:
            state.ship_file(self.remote[0], self.remote[1], "budget.json", self.path, wall)

    def lease(self, n: int) -> int:
        granted = self.pool.lease(n)
        if granted and self.path and self.remote is not None:
            state.ship_file(self.remote[0], self.remote[1], "budget.json", self.path, time.time())
        return granted
