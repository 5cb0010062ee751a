"""Hosts placed in regions, and handed from one shard to another with all their state.

With ``runtime.regions`` every shard has a :class:`Regions` part (crawler.engine.assembly builds
it). It answers three questions for the shard:

* **Where does a URL go?** (:meth:`Regions.route`) Every URL of a host is first sent to
  the host's *home* (crawler.placement.topology). The home knows the region the host is placed in
  and forwards to the owner there; a shard that handed a host over keeps a forwarding
  entry (a tombstone) for senders that still think it is the owner. Forwarding is a
  durable delivery (the receiver made the batch durable before the call returns), so a
  URL is never lost on the way, and the owner's store ignores a URL it already has.
* **Where should a host live?** (:meth:`Regions.measure`, with crawler.placement.probes)
  On first contact the owner times a GET of the host's robots.txt from every region in
  turn, each one a request under the host's politeness (one in flight, the interval
  between), and the placement policy (crawler.placement.regionpolicy) decides. An
  operator's rule decides without measuring (:meth:`Regions.place`).
* **How does a host move?** (:meth:`Regions.start_move`, :meth:`Regions.adopt`, carried
  out by crawler.placement.moves), in this order:

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
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Sequence

from crawler.clock import Clock
from crawler.fetch.fetcher import FetchResult
from crawler.frontier.urlitem import UrlItem
from crawler.placement.moves import QUIESCE_POLL_S, Mover
from crawler.placement.peers import HostPlacement, HostState, Peers, Probe, timed_get
from crawler.placement.probes import Prober
from crawler.placement.regionbook import HostParts, RegionBook
from crawler.placement.regionpolicy import RegionPlacement
from crawler.placement.topology import Topology

__all__ = [
    "QUIESCE_POLL_S",
    "HostParts",
    "HostPlacement",
    "HostState",
    "Peers",
    "Probe",
    "RegionBook",
    "Regions",
    "timed_get",
]


@dataclass
class Regions:
    """A shard's side of regions (see the module docstring): it routes URLs and decides
    where a host lives; the moves are its :class:`crawler.placement.moves.Mover`'s, the
    measurements its :class:`crawler.placement.probes.Prober`'s, and what it keeps across
    restarts its :class:`crawler.placement.regionbook.RegionBook`."""

    shard_id: str
    topology: Topology
    book: RegionBook
    parts: HostParts
    peers: Peers
    clock: Clock
    #: ``await fetch(url)`` with this shard's own fetcher (the own region's probe).
    fetch: Callable[[str], Awaitable[FetchResult]]
    #: Saves the shard's checkpoint, journaled (crawler.engine.checkpoint), and waits until durable.
    save: Callable[[], Awaitable[None]]
    region: str = ""
    _mover: Mover = field(init=False)
    _prober: Prober = field(init=False)

    def __post_init__(self) -> None:
        self.region = self.topology.region_of_shard(self.shard_id) or ""
        self._mover = Mover(self.shard_id, self.topology, self.book, self.parts, self.peers, self.clock, self.save)
        self._prober = Prober(self.shard_id, self.region, self.topology, self.parts.politeness, self.peers,
                              self.clock, self.fetch, self.book.counters)

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
                if self._mover.exporting(host):  # its state is on the way: so are these, after it
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
                if (arrival := self._mover.arrival(host)) is not None:
                    await asyncio.shield(arrival)
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
        figures = await self._prober.figures(host, origin + "/robots.txt")
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

    # -- moving (crawler.placement.moves) -------------------------------------------------

    def start_move(self, host: str, target: str) -> asyncio.Future[str]:
        """Hold ``host`` now and hand it to ``target`` in the background; the future
        says where the host is once the move ended (here again if it failed)."""
        return self._mover.start(host, target)

    def pending(self) -> int:
        """Moves under way (the shard is not idle while one runs)."""
        return self._mover.pending()

    async def adopt(self, state: HostState) -> int:
        """Take a host over (step 3 of a move); returns how many of its URLs are queued.
        Durable before it returns (the caller awaits :attr:`save`)."""
        return await self._mover.adopt(state)

    async def resume_moves(self) -> None:
        """After a restart: finish the moves a crash interrupted (their hosts stay held)."""
        await self._mover.resume()

    async def close(self) -> None:
        """Wait for the moves under way (a stop hands the host over or keeps it)."""
        await self._mover.close()

    # -- the operator's rules --------------------------------------------------------------

    async def place(self, host: str, region: str | None) -> HostPlacement:
        """The operator's rule for ``host`` (None: measure again); at the owner it may
        start a move, which this waits for. Returns the placement now."""
        owner = await self._apply_rule(host, region)
        return await self.peers.place(owner, host, region) if owner is not None else self.describe(host)

    async def _apply_rule(self, host: str, region: str | None) -> str | None:
        """Set the rule here, and move the host if it lives here and must; returns the
        shard that owns the host and applies the rule there (None: done here)."""
        if host in self.moving:
            await asyncio.shield(self.start_move(host, self.moving[host]))
        owner = self._owner(host)  # where it lives before the rule
        placed = self.placement.set_rule(host, region)
        if owner is not None:
            # The host lives elsewhere (we are its home, or hold its tombstone): its owner
            # applies the rule, moves it if it must, and then tells the home.
            await self.save()
            return owner
        target = self.topology.owner_in(placed.region, host)
        if target != self.shard_id:
            # The home learns the new region once the host arrived (a failed move leaves
            # the host here, and the home routing to it); the rule goes with the record.
            await self.start_move(host, target)
        else:
            if self.topology.home_of(host) == self.shard_id:
                self.located[host] = placed.region
            await self.save()
        return None

    async def located_at(self, host: str, region: str) -> None:
        """As the host's home: the host now lives in ``region``."""
        self.located[host] = region
        await self.save()

    # -- views and persistence ----------------------------------------------------------

    def describe(self, host: str) -> HostPlacement:
        """Where the host is fetched from (the region of the shard that holds it, which a
        failed move leaves where it was), how its placement was chosen (rule or
        measurement, with the figures), and its moves (GET /hosts/{host})."""
        placed = self.placement.placement(host)
        shard = self.moved.get(host, self.shard_id)
        return HostPlacement(
            region=self.topology.region_of_shard(shard),
            how=placed.how,
            figures=dict(placed.figures),
            decided_at=placed.decided_at,
            moves=placed.moves,
            shard=shard,
            moving_to=self.moving.get(host),
        )


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
