"""The measurement of a host from every region (crawler.placement.handover.Regions.measure):
its robots.txt timed from each region in turn, every probe a request under the host's
politeness (one in flight, the interval between), so measuring a host is as polite as
fetching from it."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Awaitable, Callable

from crawler.clock import Clock
from crawler.fetch.fetcher import FetchResult
from crawler.placement.peers import Peers, Probe, timed_get
from crawler.placement.topology import Topology
from crawler.policy.politeness import Politeness

log = logging.getLogger("crawler.placement.handover")  # the logger it always logged to


class Prober:
    """Times a host's robots.txt from every region, for one shard: its own region with the
    shard's own fetcher, the others through a shard of theirs (:meth:`Peers.probe`)."""

    def __init__(self, shard_id: str, region: str, topology: Topology, politeness: Politeness, peers: Peers,
                 clock: Clock, fetch: Callable[[str], Awaitable[FetchResult]], counters: Counter[str]) -> None:
        self.shard_id = shard_id
        self.region = region
        self.topology = topology
        self.politeness = politeness
        self.peers = peers
        self.clock = clock
        self.fetch = fetch
        self.counters = counters  # the book's: probes and their failures are counted there

    async def figures(self, host: str, url: str) -> dict[str, float | None]:
        """Seconds to the headers of ``url`` from each region, one after the other
        (None: that region got no answer)."""
        figures: dict[str, float | None] = {}
        for region in self.topology.regions or ():
            probe = await self.probe(host, region, url)
            figures[region] = probe.seconds
        return figures

    async def probe(self, host: str, region: str, url: str) -> Probe:
        """One timed GET of ``url`` from ``region``, once the host's politeness allows it."""
        pol = self.politeness
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
