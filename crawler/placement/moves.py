"""The move of a host from one shard to another, both sides of it: the four steps of the
old owner (:meth:`Mover.start`) and the adoption at the new one (:meth:`Mover.adopt`).
The module docstring of crawler.placement.handover says why no URL is lost or fetched
twice and why there are never two requests in flight to the host."""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable

from crawler.clock import Clock
from crawler.placement.peers import HostState, Peers
from crawler.placement.regionbook import HostParts, RegionBook
from crawler.placement.topology import Topology

log = logging.getLogger("crawler.placement.handover")  # the logger it always logged to

#: How often a move looks whether the host's request in flight has ended.
QUIESCE_POLL_S = 0.02


def _origins(host: str) -> list[str]:
    return [f"http://{host}", f"https://{host}"]


class Mover:
    """One shard's moves: those under way out of it (each a background task, with a future
    saying where the host is once it ended) and the hosts it adopts. Every change goes to
    the book (crawler.placement.regionbook.RegionBook) and is saved before it counts."""

    def __init__(self, shard_id: str, topology: Topology, book: RegionBook, parts: HostParts, peers: Peers,
                 clock: Clock, save: Callable[[], Awaitable[None]]) -> None:
        self.shard_id = shard_id
        self.region = topology.region_of_shard(shard_id) or ""
        self.topology = topology
        self.book = book
        self.parts = parts
        self.peers = peers
        self.clock = clock
        self.save = save
        self._moves: dict[str, asyncio.Future[str]] = {}
        self._exporting: set[str] = set()  # moves past the point of no additions
        self._tasks: set[asyncio.Task[None]] = set()

    def exporting(self, host: str) -> bool:
        """The host's state is on its way: nothing of it may be added here any more."""
        return host in self._exporting

    def arrival(self, host: str) -> asyncio.Future[str] | None:
        """The future of the host's move under way (where it is once the move ended)."""
        return self._moves.get(host)

    def start(self, host: str, target: str) -> asyncio.Future[str]:
        """Hold ``host`` now and hand it to ``target`` in the background; the future
        says where the host is once the move ended (here again if it failed)."""
        if host in self._moves:
            return self._moves[host]
        self.parts.frontier.hold(host)
        self.book.moving[host] = target
        fut: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._moves[host] = fut
        task = asyncio.ensure_future(self._move(host, target, fut))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return fut

    def pending(self) -> int:
        """Moves under way (the shard is not idle while one runs)."""
        return len(self.book.moving)

    async def _move(self, host: str, target: str, fut: asyncio.Future[str]) -> None:
        p, book = self.parts, self.book
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
                p.robots.snapshot(_origins(host)), p.budget.export_host(host), book.placement.export(host),
            )
            await self.peers.adopt(target, state)  # step 3: durable there
            p.frontier.evict(host)  # step 4
            p.store.hosts.remove_host(host)
            p.politeness.snapshots.drop_host(host)
            p.robots.drop(_origins(host))
            p.budget.forget_host(host)
            home = self.topology.home_of(host)
            if home != self.shard_id:
                book.placement.forget(host)  # the home keeps its rules
            book.moved[host] = target
            book.moving.pop(host, None)
            await self.save()
            region = self.topology.region_of_shard(target) or ""
            if home == self.shard_id:
                book.located[host] = region
                await self.save()
            else:
                await self.peers.located(home, host, region)
            book.counters["region_moves_out"] += 1
            log.info("%s: host %s handed over to %s (%d URLs)", self.shard_id, host, target, len(state.rows))
            fut.set_result(target)
        except asyncio.CancelledError:
            fut.cancel()
            raise
        except Exception as exc:  # noqa: BLE001 - the host stays here, held no longer
            log.error("%s: moving %s to %s failed: %r (it stays here)", self.shard_id, host, target, exc)
            book.counters["region_move_failures"] += 1
            if book.moving.pop(host, None) is not None:
                if self.topology.home_of(host) == self.shard_id:
                    book.located[host] = self.region  # routed here, where it stayed
                p.frontier.unhold(host)
                await self.save()
            fut.set_result(self.shard_id)
        finally:
            self._exporting.discard(host)
            self._moves.pop(host, None)

    async def adopt(self, state: HostState) -> int:
        """Take a host over (step 3 of a move); returns how many of its URLs are queued.
        Durable before it returns (it awaits :attr:`save`)."""
        p, book, host = self.parts, self.book, state.host
        again = p.store.hosts.has_host(host)  # a repeat after a crash: what we hold is newer
        queued = p.store.hosts.adopt(state.rows)
        if not again:
            p.politeness.snapshots.adopt_host(host, state.politeness)
            p.robots.restore(state.robots)
            p.budget.adopt_host(host, state.budget)
            if state.placement is not None:
                book.placement.adopt(host, state.placement)
        book.moved.pop(host, None)
        p.frontier.restore_spilled(host, queued)
        p.adopted(host)
        if self.topology.home_of(host) == self.shard_id:
            book.located[host] = self.region
        await self.save()
        book.counters["region_moves_in"] += 1
        return queued

    async def resume(self) -> None:
        """After a restart: finish the moves a crash interrupted (their hosts stay held)."""
        for host, target in list(self.book.moving.items()):
            self.book.moving.pop(host)
            self.start(host, target)

    async def close(self) -> None:
        """Wait for the moves under way (a stop hands the host over or keeps it)."""
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
