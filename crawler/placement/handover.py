"""Hosts placed in regions, and handed from one shard to another with all their state.

With ``runtime.regions`` every shard has a :class:`Regions` part (crawler.engine.assembly builds
it). It answers three questions for the shard:

* **Where does a URL go?** (:meth:`Regions.route`) Every URL of a host is first sent to
  the host's *home* (crawler.placement.topology). The home knows the region the host is placed in
  and forwards to the owner there; a shard that handed a host over keeps a forwarding
  entry (a tombstone) for senders that still think it is the owner. Forwarding is a
  durable delivery (the receiver made the batch durable before the call returns), so a
  URL is never lost on the way, and the owner's store ignores a URL it already has.
* **Where should a host live?** (:meth:`Regions.measure`) On first contact the owner
  times a GET of the host's robots.txt from every region in turn, each one a request
  under the host's politeness (one in flight, the interval between), and the placement
  policy (crawler.placement.regionpolicy) decides. An operator's rule decides without measuring.
* **How does a host move?** (:meth:`Regions.move`, :meth:`Regions.adopt`), in this
  order:

  1. the host is held: the frontier hands out none of its URLs (a durable marker says
     a move is under way, so a restart finishes it instead of fetching);
  2. its request in flight, if any, ends and its rows are written and acked, so every
     URL of the host is in the store as queued or done;
  3. its rows, pacing (next allowed time, backoff, Crawl-delay, operator policy),
     robots rules, page budget and placement go to the new owner, which makes them
     durable before it answers; a second adoption after a crash changes nothing;
  4. only then does the old owner delete them and keep a tombstone; the home learns the
     new region.

  There is never a moment with two requests in flight to the host: the old owner's
  request ended before step 3, and the new owner's first one waits out the interval
  carried over in step 3. No URL is lost (the new owner holds every row before the old
  one lets go) or fetched twice (the old owner holds the host from step 1 on, and
  deletes in step 4; a URL both hold in between is fetched by neither).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Protocol, Sequence

from crawler.frontier.urlitem import UrlItem
from crawler.clock import Clock
from crawler.errors import DeliveryError
from crawler.fetch.fetcher import FetchResult
from crawler.frontier.frontier import Frontier
from crawler.frontier.store import FrontierStore
from crawler.policy.politeness import Politeness
from crawler.placement.regionpolicy import RegionPlacement
from crawler.robots import RobotsCache
from crawler.placement.topology import Topology
from crawler.policy.hostbudget import HostBudget

if TYPE_CHECKING:  # the scheduler imports this module
    from crawler.engine.scheduler import ShardScheduler

log = logging.getLogger(__name__)

#: How often a move looks whether the host's request in flight has ended.
QUIESCE_POLL_S = 0.02


@dataclass
class HostState:
    """Everything a shard knows of one host, handed to its next owner."""

    host: str
    source: str
    rows: list[list[Any]]
    politeness: dict[str, Any]
    robots: list[dict[str, Any]]
    budget: dict[str, Any]
    placement: dict[str, Any] | None


@dataclass(frozen=True)
class Probe:
    """One timed request of a host's robots.txt from one region."""

    seconds: float | None  # to the response headers; None: no response
    status: int | None


async def timed_get(fetch: Callable[[str], Awaitable[FetchResult]], url: str) -> tuple[FetchResult, Probe]:
    """GET ``url``; the response and the time to its headers (the fetcher's own clock)."""
    res = await fetch(url)
    if res.status is None:
        return res, Probe(None, None)
    end = res.headers_at if res.headers_at is not None else res.finished_at
    return res, Probe(max(0.0, end - res.started_at), res.status)


class Peers(Protocol):
    """The other shards, as a shard reaches them (in process, or by Ray actor handle)."""

    async def accept(self, shard: str, items: list[UrlItem]) -> int:
        """Deliver a batch durably to ``shard`` (its accept_durably)."""

    async def adopt(self, shard: str, state: HostState) -> None:
        """Hand a host over to ``shard``; returns once the state is durable there."""

    async def probe(self, region: str, host: str, url: str) -> Probe:
        """GET ``url`` from a shard of ``region`` (its own source address), timed."""

    async def place(self, shard: str, host: str, region: str | None) -> dict[str, Any]:
        """The operator's rule for ``host`` at ``shard`` (its owner): placed there."""

    async def located(self, shard: str, host: str, region: str) -> None:
        """Tell ``host``'s home that the host now lives in ``region``."""


@dataclass
class HostParts:
    """The per-host state of one shard that a handover moves."""

    store: FrontierStore
    frontier: Frontier
    politeness: Politeness
    robots: RobotsCache
    budget: HostBudget
    flush: Callable[[], Awaitable[None]]  # rows written and acked (the outbox)
    busy: Callable[[str], bool]  # one of the host's URLs is being processed
    adopted: Callable[[str], int]  # the host's refreshes a scan already passed (RefreshFeed)


def _origins(host: str) -> list[str]:
    return [f"http://{host}", f"https://{host}"]


@dataclass
class RegionBook:
    """What a shard's :class:`Regions` part keeps across restarts: its checkpoint part
    (crawler.recovery.checkpoint). Built before the checkpointer, which the :class:`Regions` part
    (built after both) saves through, so no part is wired to another after construction."""

    placement: RegionPlacement
    frontier: Frontier  # hosts that were moving stay held after a restore
    located: dict[str, str] = field(default_factory=dict)  # as home: host -> region (measured or moved)
    moved: dict[str, str] = field(default_factory=dict)  # tombstones: host -> shard it went to
    moving: dict[str, str] = field(default_factory=dict)  # moves under way: host -> target shard
    counters: Counter[str] = field(default_factory=Counter)

    def snapshot(self) -> dict[str, Any]:
        """The checkpoint part: placement, the home's table, tombstones and moves under way."""
        return {
            "placement": self.placement.snapshot(),
            "located": dict(self.located),
            "moved": dict(self.moved),
            "moving": dict(self.moving),
            "counters": dict(self.counters),
        }

    def restore(self, data: dict[str, Any]) -> None:
        """Load a :meth:`snapshot`; hosts that were moving stay held until
        :meth:`Regions.resume_moves` finishes their moves."""
        if data.get("placement"):
            self.placement.restore(data["placement"])
        self.located = {str(k): str(v) for k, v in dict(data.get("located") or {}).items()}
        self.moved = {str(k): str(v) for k, v in dict(data.get("moved") or {}).items()}
        self.moving = {str(k): str(v) for k, v in dict(data.get("moving") or {}).items()}
        self.counters.update({str(k): int(v) for k, v in dict(data.get("counters") or {}).items()})
        for host in self.moving:
            self.frontier.hold(host)


@dataclass
class Regions:
    """A shard's side of regions (see the module docstring)."""

    shard_id: str
    topology: Topology
    book: RegionBook
    parts: HostParts
    peers: Peers
    clock: Clock
    #: ``await fetch(url)`` with this shard's own fetcher (the own region's probe).
    fetch: Callable[[str], Awaitable[FetchResult]]
    #: Saves the shard's checkpoint, journaled (crawler.recovery.checkpoint), and waits until durable.
    save: Callable[[], Awaitable[None]]
    region: str = ""
    _moves: dict[str, asyncio.Future[str]] = field(default_factory=dict)
    _exporting: set[str] = field(default_factory=set)  # moves past the point of no additions
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.region = self.topology.region_of_shard(self.shard_id) or ""

    # The book's parts, under the names the steps below use.

    @property
    def placement(self) -> RegionPlacement:
        return self.book.placement

    @property
    def located(self) -> dict[str, str]:
        return self.book.located

    @property
    def moved(self) -> dict[str, str]:
        return self.book.moved

    @property
    def moving(self) -> dict[str, str]:
        return self.book.moving

    @property
    def counters(self) -> Counter[str]:
        return self.book.counters

    # -- routing ------------------------------------------------------------------

    def owner_elsewhere(self, host: str) -> str | None:
        """The shard a call about ``host`` should go to, when it is not this one (a host
        on its way out is still answered for here until it arrived)."""
        return None if host in self.moving else self._owner(host)

    def _owner(self, host: str) -> str | None:
        """Where a URL of ``host`` arriving here belongs; None: here.

        The home decides by where the host is (the newest region it heard of), else by a
        rule, else the default region: never by a measurement alone, which the host
        follows only once its move succeeded. Another shard follows its tombstone, or
        owns the host (the home or a tombstone sent it here)."""
        if self.topology.home_of(host) == self.shard_id:
            region = self.located.get(host)
            if region is None and (self.parts.frontier.queued_for(host) or self.parts.frontier.busy(host)):
                return None  # it has work here (a rule added since): it moves with all of it
            if region is None:
                placed = self.placement.placement(host)
                region = placed.region if placed.how == "rule" else self.placement.default_region
            owner = self.topology.owner_in(region, host)
            return None if owner == self.shard_id else owner
        return self.moved.get(host)

    async def route(self, items: Sequence[UrlItem]) -> tuple[list[UrlItem], int]:
        """Split a batch into the URLs this shard keeps and the ones it forwards (to their
        owners, durably, before this returns); returns (kept, forwarded).

        The kept ones are decided in the last step, with no wait after it, so the caller
        queues them before anything else runs: a move that started while this waited
        (for a forward, or for another move) sees them, or they see the move."""
        pending, forwarded = list(items), 0
        while True:
            keep: list[UrlItem] = []
            out: dict[str, list[UrlItem]] = {}
            waits: set[str] = set()
            for item in pending:
                host = item.host
                if host in self._exporting:  # its state is on the way: so are these, after it
                    waits.add(host)
                    keep.append(item)
                elif host in self.moving:  # still draining here: kept, handed over with the rest
                    keep.append(item)
                elif (owner := self._owner(host)) is None:
                    keep.append(item)
                else:
                    out.setdefault(owner, []).append(item)
            if not out and not waits:
                return keep, forwarded
            for host in waits:  # a host on its way: to wherever it arrives
                if host in self._moves:
                    await asyncio.shield(self._moves[host])
            if out:
                await asyncio.gather(*(self.peers.accept(owner, batch) for owner, batch in out.items()))
                n = sum(len(b) for b in out.values())
                forwarded += n
                self.counters["region_forwarded"] += n
            pending = keep  # decided again: the world may have moved meanwhile

    # -- measuring ------------------------------------------------------------------

    async def before_fetch(self, host: str, origin: str) -> bool:
        """Called as the owner is about to contact ``host``; True when the URL must wait
        (the probes took the host's slot, or the host is moving away). A rule that places
        the host elsewhere (a config changed between runs) moves it now; a host with no
        rule is measured on first contact and when its re-measurement is due."""
        if host in self.moving:
            return True
        if self.placement.placement(host).how == "rule":
            region = self.placement.region_of(host)
            if region != self.region:
                self.start_move(host, self.topology.owner_in(region, host))
                return True
            return False
        if self.placement.needs_measurement(host):
            await self.measure(host, origin)
            return True
        return False

    async def measure(self, host: str, origin: str) -> bool:
        """Time the host's robots.txt from every region (politely, one after the other)
        and place it; True if it must move (the move has started, the host is held)."""
        url = origin + "/robots.txt"
        figures: dict[str, float | None] = {}
        for region in self.topology.regions or ():
            probe = await self._polite_probe(host, region, url)
            figures[region] = probe.seconds
        self.counters["region_measurements"] += 1
        placed = self.placement.measured(host, figures)
        target = self.topology.owner_in(placed.region, host)
        if target == self.shard_id:
            if self.topology.home_of(host) == self.shard_id:
                self.located[host] = placed.region
            await self.save()
            return False
        self.start_move(host, target)  # the home learns the region once the host arrived
        return True

    async def _polite_probe(self, host: str, region: str, url: str) -> Probe:
        pol = self.parts.politeness
        wait = pol.next_allowed(host) - self.clock.now()
        if wait > 0:
            await self.clock.sleep(wait)
        self.counters["region_probes"] += 1
        box: list[Probe] = []
        if region == self.region:

            async def own() -> FetchResult:
                res, probe = await timed_get(self.fetch, url)
                box.append(probe)
                return res

            await pol.request(host, own)
            return box[0]

        async def remote() -> FetchResult:
            # The remote shard's clock is not ours: the request counts as having ended
            # here when its answer arrived (no headers time), which can only widen the gap.
            try:
                probe = await self.peers.probe(region, host, url)
            except Exception as exc:  # noqa: BLE001 - a region that cannot answer is not chosen
                log.warning("%s: timing %s from %s failed: %r", self.shard_id, host, region, exc)
                self.counters["region_probe_failures"] += 1
                probe = Probe(None, None)
            box.append(probe)
            now = self.clock.now()
            return FetchResult(url, probe.status, {}, b"", False, None, None, probe.status is None, now, None, now, None)

        await pol.request(host, remote)
        return box[0]

    # -- moving ---------------------------------------------------------------------

    def start_move(self, host: str, target: str) -> asyncio.Future[str]:
        """Hold ``host`` now and hand it to ``target`` in the background; the future
        says where the host is once the move ended (here again if it failed)."""
        if host in self._moves:
            return self._moves[host]
        self.parts.frontier.hold(host)
        self.moving[host] = target
        fut: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._moves[host] = fut
        task = asyncio.ensure_future(self._move(host, target, fut))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return fut

    def pending(self) -> int:
        """Moves under way (the shard is not idle while one runs)."""
        return len(self.moving)

    async def _move(self, host: str, target: str, fut: asyncio.Future[str]) -> None:
        p = self.parts
        try:
            await self.save()  # step 1: the marker (moving) is durable
            while p.busy(host) or p.politeness.in_flight(host):  # step 2
                await self.clock.sleep(QUIESCE_POLL_S)
            await p.flush()
            # From here on nothing of the host may be added here: the state below is all
            # of it. (Before, its own pages' links to it were kept: they go with the rest;
            # waiting for the move there would wait for ourselves.)
            self._exporting.add(host)
            state = HostState(
                host, self.shard_id, p.store.hosts.export_host(host), p.politeness.snapshots.export_host(host),
                p.robots.snapshot(_origins(host)), p.budget.export_host(host), self.placement.export(host),
            )
            await self.peers.adopt(target, state)  # step 3: durable there
            p.frontier.evict(host)  # step 4
            p.store.hosts.remove_host(host)
            p.politeness.snapshots.drop_host(host)
            p.robots.drop(_origins(host))
            p.budget.forget_host(host)
            home = self.topology.home_of(host)
            if home != self.shard_id:
                self.placement.forget(host)  # the home keeps its rules
            self.moved[host] = target
            self.moving.pop(host, None)
            await self.save()
            region = self.topology.region_of_shard(target) or ""
            if home == self.shard_id:
                self.located[host] = region
                await self.save()
            else:
                await self.peers.located(home, host, region)
            self.counters["region_moves_out"] += 1
            log.info("%s: host %s handed over to %s (%d URLs)", self.shard_id, host, target, len(state.rows))
            fut.set_result(target)
        except asyncio.CancelledError:
            fut.cancel()
            raise
        except Exception as exc:  # noqa: BLE001 - the host stays here, held no longer
            log.error("%s: moving %s to %s failed: %r (it stays here)", self.shard_id, host, target, exc)
            self.counters["region_move_failures"] += 1
            if self.moving.pop(host, None) is not None:
                if self.topology.home_of(host) == self.shard_id:
                    self.located[host] = self.region  # routed here, where it stayed
                p.frontier.unhold(host)
                await self.save()
            fut.set_result(self.shard_id)
        finally:
            self._exporting.discard(host)
            self._moves.pop(host, None)

    async def adopt(self, state: HostState) -> int:
        """Take a host over (step 3 of a move); returns how many of its URLs are queued.
        Durable before it returns (the caller awaits :attr:`save`)."""
        p, host = self.parts, state.host
        again = p.store.hosts.has_host(host)  # a repeat after a crash: what we hold is newer
        queued = p.store.hosts.adopt(state.rows)
        if not again:
            p.politeness.snapshots.adopt_host(host, state.politeness)
            p.robots.restore(state.robots)
            p.budget.adopt_host(host, state.budget)
            if state.placement is not None:
                self.placement.adopt(host, state.placement)
        self.moved.pop(host, None)
        p.frontier.restore_spilled(host, queued)
        p.adopted(host)
        if self.topology.home_of(host) == self.shard_id:
            self.located[host] = self.region
        await self.save()
        self.counters["region_moves_in"] += 1
        return queued

    async def place(self, host: str, region: str | None) -> dict[str, Any]:
        """The operator's rule for ``host`` (None: measure again); at the owner it may
        start a move, which this waits for. Returns the placement now."""
        if host in self.moving:
            await asyncio.shield(self.start_move(host, self.moving[host]))
        owner = self._owner(host)  # where it lives before the rule
        placed = self.placement.set_rule(host, region)
        if owner is not None:
            # The host lives elsewhere (we are its home, or hold its tombstone): its owner
            # applies the rule, moves it if it must, and then tells the home.
            await self.save()
            return await self.peers.place(owner, host, region)
        target = self.topology.owner_in(placed.region, host)
        if target != self.shard_id:
            # The home learns the new region once the host arrived (a failed move leaves
            # the host here, and the home routing to it); the rule goes with the record.
            await self.start_move(host, target)
        else:
            if self.topology.home_of(host) == self.shard_id:
                self.located[host] = placed.region
            await self.save()
        return self.describe(host)

    async def located_at(self, host: str, region: str) -> None:
        """As the host's home: the host now lives in ``region``."""
        self.located[host] = region
        await self.save()

    async def resume_moves(self) -> None:
        """After a restart: finish the moves a crash interrupted (their hosts stay held)."""
        for host, target in list(self.moving.items()):
            self.moving.pop(host)
            self.start_move(host, target)

    async def close(self) -> None:
        """Wait for the moves under way (a stop hands the host over or keeps it)."""
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # -- views and persistence ----------------------------------------------------------

    def describe(self, host: str) -> dict[str, Any]:
        """Where the host is fetched from (the region of the shard that holds it, which a
        failed move leaves where it was), how its placement was chosen (rule or
        measurement, with the figures), and its moves (GET /hosts/{host})."""
        placed = self.placement.placement(host)
        shard = self.moved.get(host, self.shard_id)
        return {
            "region": self.topology.region_of_shard(shard),
            "how": placed.how,
            "figures": dict(placed.figures),
            "decided_at": placed.decided_at,
            "moves": placed.moves,
            "shard": shard,
            "moving_to": self.moving.get(host),
        }

    def stats(self) -> dict[str, Any]:
        """Counters and gauges for the shard's status (crawl stats, metrics)."""
        return {
            "region": self.region,
            **{k: int(v) for k, v in self.counters.items()},
            "moving": len(self.moving),
            "tombstones": len(self.moved),
        }

    def snapshot(self) -> dict[str, Any]:
        """The checkpoint part (:meth:`RegionBook.snapshot`)."""
        return self.book.snapshot()

    def restore(self, data: dict[str, Any]) -> None:
        """Load a :meth:`snapshot` (:meth:`RegionBook.restore`)."""
        self.book.restore(data)


class InProcessPeers:
    """:class:`Peers` for shards that live in one process (tests, and the one-process
    runtime's shards): each call goes straight to the shard object. ``shards`` maps ids to
    :class:`crawler.engine.scheduler.ShardScheduler` objects, filled in once they are built."""

    def __init__(self, topology: Topology, shards: dict[str, ShardScheduler] | None = None) -> None:
        self.topology = topology
        self.shards: dict[str, ShardScheduler] = shards if shards is not None else {}

    async def accept(self, shard: str, items: list[UrlItem]) -> int:
        return await self.shards[shard].accept_durably(items)

    async def adopt(self, shard: str, state: HostState) -> None:
        await self.shards[shard].adopt(state)

    async def probe(self, region: str, host: str, url: str) -> Probe:
        shard = self.shards[self.topology.owner_in(region, host)]
        _, probe = await timed_get(shard.fetcher.fetch, url)
        return probe

    def _regions(self, shard: str) -> Regions:
        regions = self.shards[shard].regions
        if regions is None:
            raise DeliveryError(f"{shard} has no regions")
        return regions

    async def place(self, shard: str, host: str, region: str | None) -> dict[str, Any]:
        return await self._regions(shard).place(host, region)

    async def located(self, shard: str, host: str, region: str) -> None:
        await self._regions(shard).located_at(host, region)
