"""One shard: the hosts the ring maps to it, behind the typed surface of :class:`ShardApi`.

A shard owns a slice of hosts (docs/invariants.md #1) and everything that is per host.
:class:`Shard` is what the rest of the crawl talks to (crawler.engine.shardapi): it takes
work in (admission, operator policy, seeds' scope, host hand-overs), answers questions
(a URL's state, a host's view, the ledger's audit, its status) and owns its start and
shutdown. Fetching is its :class:`~crawler.engine.dispatcher.Dispatcher`'s job; its parts
are built once by :func:`crawler.engine.assembly.build_shard` and read by no one else.

With regions a question about a host that lives on another shard is forwarded there,
through that shard's :class:`ShardApi` (``peer``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable, Sequence

from crawler.policy.hostpolicy import HostTarget, PolicyChange, name_of
from crawler.engine.dispatcher import Dispatcher
from crawler.engine.hostview import host_view
from crawler.engine.optional import NoRegions
from crawler.engine.parts import ShardParts
from crawler.engine.recorder import Recorder
from crawler.engine.shardapi import HostView, ShardApi
from crawler.engine.status import ShardStatus
from crawler.errors import ConfigError, FencedError, StorageError
from crawler.frontier.store import UrlStatus
from crawler.frontier.urlitem import UrlItem
from crawler.placement.peers import HostState, HostPlacement, Probe, timed_get
from crawler.policy.traprules import TrapRules
from crawler.render.jobs import SubRequest, SubResponse
from crawler.robots import RobotsCache
from crawler.urls import host_key, origin

log = logging.getLogger(__name__)


def vet_seeds(urls: Sequence[str], traps: TrapRules, robots: RobotsCache | None) -> list[str | None]:
    """Why each seed would be refused by a shard, or None (POST /seeds, before the seen
    check): ``robots`` when the shard's cached rules (``robots``; None when robots.txt is
    not obeyed) disallow it, ``scope: <rule>`` when it breaks a trap rule (length, query
    parameters, repeated segments)."""
    out: list[str | None] = []
    for url in urls:
        rule = traps.check(url, 0)
        if rule is not None:
            out.append(f"scope: {rule}")
        elif robots is not None and robots.allowed(url, origin(url)) is False:
            out.append("robots: disallowed by robots.txt")
        else:
            out.append(None)
    return out


def _unreachable(shard_id: str) -> Callable[[str], ShardApi]:
    def peer(owner: str) -> ShardApi:
        raise ConfigError(f"{owner} is not reachable from {shard_id} (no regions)")

    return peer


class Shard:
    """One shard (module docstring); implements :class:`~crawler.engine.shardapi.ShardApi`.

    Args:
        parts: what the assembly built.
        dispatcher: the fetch loop over those parts.
        recorder: the rows of URLs refused at admission.
        peer: another shard by id (regions forward calls about moved hosts there).
    """

    def __init__(self, parts: ShardParts, dispatcher: Dispatcher, recorder: Recorder,
                 peer: Callable[[str], ShardApi] | None = None) -> None:
        self.shard_id = parts.shard_id
        self.parts = parts
        self._dispatcher = dispatcher
        self._recorder = recorder
        # With regions a batch's URLs may all live elsewhere: nothing to admit here then.
        self._routes = not isinstance(parts.regions, NoRegions)
        self._peer = peer if peer is not None else _unreachable(parts.shard_id)
        self.batches_received = 0
        self._started = False
        self._final_counts: dict[str, int] | None = None

    # -- work in ------------------------------------------------------------------------

    def _check_gate(self) -> None:
        if not self.parts.gate():
            raise FencedError(f"{self.shard_id} is not accepting work (fenced or cut off from its driver)")

    def admit(self, items: Sequence[UrlItem]) -> int:
        """Take a batch of URLs whose hosts this shard owns (crawler.engine.admission: de-duplicated
        and committed before this returns, cached robots refusals recorded, budget drops
        counted); returns how many were queued. Durable in the local store only: callers
        from elsewhere use :meth:`accept`."""
        self._check_gate()
        p = self.parts
        self.batches_received += 1
        keep, refused = p.admission.take(items)
        for item in refused:
            self._recorder.refused(item)
        p.news.credit(keep)
        accepted = len(keep)
        boosted = [i for i in keep if i.boost or i.fresh]
        if boosted:  # an operator's priority, and news, live in memory only: never spilled
            p.frontier.push(boosted, in_memory=True)
            keep = [i for i in keep if not (i.boost or i.fresh)]
        p.frontier.push(keep)
        p.counters.accepted += accepted
        self._dispatcher.wake()
        return accepted

    async def accept(self, items: list[UrlItem]) -> int:
        """:meth:`admit`, returning only once the batch is durable where this shard's state
        is kept: in its store, and with a remote output in OUT too (crawler.recovery.statelog), so
        that a sender may forget the batch when this returns (docs/invariants.md #11).
        With regions, URLs of hosts that live elsewhere go on to their owners, durably."""
        self._check_gate()
        kept, forwarded = await self.parts.regions.route(items)
        queued = self.admit(kept) if kept or not self._routes else 0
        await self.synced()
        return queued + forwarded

    async def adopt(self, state: HostState) -> int:
        """Take over a host handed over by another shard (crawler.placement.handover); durable
        before it returns."""
        queued = await self.parts.regions.adopt(state)
        self._dispatcher.wake()
        return queued

    async def synced(self) -> None:
        """Return once every change journaled so far is in OUT (a no-op for a local output)."""
        await self.parts.state_log.synced()

    async def set_host_policy(self, change: PolicyChange) -> None:
        """Operator policy (crawler.policy.hostpolicy.PolicyChange) of one politeness key,
        or with ``hostname_wide`` of every key of a hostname that this shard owns now or
        later; saved at once so it survives restarts (in OUT too before this returns).
        ``max_pages`` cuts the queue of a host past its new limit (counted as
        ``host_limit``, no rows)."""
        if not change.hostname_wide and (owner := self.parts.regions.owner_elsewhere(change.host)) is not None:
            await self._peer(owner).set_host_policy(change)
            return
        self.apply_host_policy(change)
        await self.synced()

    def apply_host_policy(self, change: PolicyChange) -> None:
        """:meth:`set_host_policy` here, journaled but not yet synced to OUT."""
        p = self.parts
        host, interval_s, paused, max_pages = change.host, change.interval_s, change.paused, change.max_pages
        if change.hostname_wide:
            keys = set(p.politeness.set_name_override(host, interval_s=interval_s, paused=paused))
            keys.update(k for k in p.frontier.keys() if name_of(k) == host)
            drops = p.host_budget.set_name_limit(host, max_pages, p.frontier.queued_for) if max_pages is not None else {}
        else:
            p.politeness.set_override(host, interval_s=interval_s, paused=paused)
            keys = {host}
            drops = {host: p.host_budget.set_limit(host, max_pages, p.frontier.queued_for(host))} if max_pages is not None else {}
        p.admission.limit(drops)  # the trim and the budgets it set: one commit
        for key in keys:
            p.frontier.reschedule(key)
        p.checkpointer.save(journal=True)  # an operator's setting: journaled
        self._dispatcher.wake()

    async def widen_scope(self, urls: list[str]) -> None:
        """Seeds added while the crawl runs: scope ``host``/``domain`` grows with them."""
        self.parts.pipeline.links.scope.add_seeds(urls)

    async def vet_seeds(self, urls: list[str]) -> list[str | None]:
        """Why each seed would be refused here, or None (:func:`vet_seeds`)."""
        p = self.parts
        return vet_seeds(urls, p.pipeline.links.traps, p.robots.cache if p.settings.respect_robots else None)

    def hold(self, seconds: float) -> None:
        """Start no request for ``seconds`` (after a resume: a host contacted just before
        the stop is not contacted again sooner than one interval)."""
        self.parts.hold.hold(seconds)

    # -- questions --------------------------------------------------------------------

    async def url_status(self, url: str | None, url_hash: str | None = None) -> UrlStatus | None:
        if url is not None and (owner := self.parts.regions.owner_elsewhere(host_key(url))) is not None:
            return await self._peer(owner).url_status(url, url_hash)
        store = self.parts.store
        return store.url_status(url, url_hash=url_hash) if store is not None else None

    async def url_for_hash(self, url_hash: str) -> str | None:
        store = self.parts.store
        return store.url_for_hash(url_hash) if store is not None else None

    async def host_info(self, target: HostTarget) -> HostView:
        if not target.hostname_wide and (owner := self.parts.regions.owner_elsewhere(target.key)) is not None:
            return await self._peer(owner).host_info(target)
        return host_view(self.parts, target)

    async def place(self, host: str, region: str | None) -> HostPlacement:
        return await self.parts.regions.place(host, region)

    async def located(self, host: str, region: str) -> None:
        await self.parts.regions.located_at(host, region)

    async def held_keys(self, after: int | None, limit: int) -> list[int]:
        store = self.parts.store
        return store.audit.keys(after, limit) if store is not None else []

    async def held_ids(self, after: int | None, limit: int) -> list[tuple[int, int, str]]:
        store = self.parts.store
        return store.audit.ids(after, limit) if store is not None else []

    async def probe(self, url: str) -> Probe:
        """A timed GET of ``url`` outside every politeness slot: a region probe, whose
        asking shard holds the host's slot meanwhile (crawler.placement.handover)."""
        _, probe = await timed_get(self.parts.fetcher.fetch, url)
        return probe

    async def render_answer(self, req: SubRequest) -> SubResponse:
        """A request a browser made while rendering one of this shard's pages
        (actors/render.py): answered by the shard's gate (crawler.render.gate)."""
        renderer = self.parts.pipeline.renderer
        if renderer is None:
            return SubResponse(refused="closed")
        return await renderer.gate.answer(req)

    # -- the loop ---------------------------------------------------------------------

    async def run(self) -> None:
        """Run the output and journal loops, the start-up steps, then dispatch until :meth:`stop`."""
        p = self.parts
        output = asyncio.ensure_future(p.outbox.run())
        journal = asyncio.ensure_future(p.state_log.run())
        try:
            for step in p.on_start:
                await step()
            self._started = True
            await self._dispatcher.run()
        finally:
            p.outbox.stop()
            await output
            p.state_log.stop()
            await journal

    def stop(self) -> None:
        """Dispatch and retry nothing more (in-flight work is cancelled by :meth:`close`)."""
        self._dispatcher.stop()
        self.parts.router.stop()

    async def flush_rows(self) -> None:
        """Write and ack every row so far (the driver went silent: crawler.recovery.watchdog)."""
        await self.parts.outbox.flush(final=True)

    async def close(self, *, cancel_in_flight: bool = True) -> None:
        """Stop; cancel or finish in-flight work; flush, ack and checkpoint; close."""
        p = self.parts
        self.stop()
        await self._dispatcher.drain(cancel=cancel_in_flight)
        await p.router.close()
        await p.regions.close()
        try:
            await p.outbox.flush(final=True)
        except (FencedError, StorageError) as exc:
            # Not acked: the URLs stay claimed in the store, and the next run fetches them again.
            log.error("%s: final rows not written: %s (the next run fetches them again)", self.shard_id, exc)
        await p.events.close()  # done by the final flush, unless that was fenced off
        await p.fetcher.close()
        try:
            await self.synced()
        except FencedError as exc:  # a newer incarnation of this shard holds its state (DESIGN invariant 15)
            log.error("%s: last changes not journaled: %s (their senders deliver them again)", self.shard_id, exc)
        if p.store is not None:
            self._final_counts = p.store.counts()  # after the last acks, for the ledger
            p.store.close()

    async def shutdown(self) -> ShardStatus:
        """:meth:`close`, then the final status with the store's counts."""
        await self.close()
        return self.report().but(store_counts=self.store_counts())

    # -- status -----------------------------------------------------------------------

    def store_counts(self) -> dict[str, int] | None:
        """The durable store's URLs by state (crawler.session.ledger); after :meth:`close`, as closed."""
        if self._final_counts is not None or self.parts.store is None:
            return self._final_counts
        return self.parts.store.counts()

    async def status(self) -> ShardStatus:
        return self.report()

    def report(self) -> ShardStatus:
        """This shard's numbers now, for progress and for termination (crawler.session.termination)."""
        p, d = self.parts, self._dispatcher
        queued = len(p.frontier)
        transit = p.router.pending() + p.pipeline.pending() + p.regions.pending()
        could_work = queued > 0 and not d.budget_spent and p.frontier.next_wakeup() is not None
        paused_hosts, paused_urls = p.frontier.parked() if not d.budget_spent else (0, 0)
        refresh_waiting, refresh_due = p.frontier.refreshes()
        rs = p.router.stats()
        return ShardStatus(
            shard=self.shard_id,
            idle=not d.in_flight and transit == 0 and not could_work and (self._started or not p.on_start),
            paused_hosts=paused_hosts,
            paused_urls=paused_urls,
            queued=queued,
            in_flight=d.in_flight,
            in_transit=transit,
            hosts=p.frontier.host_count(),
            batches_received=self.batches_received,
            batches_sent=rs.get("batches_sent", 0),
            budget_spent=d.budget_spent,
            counters=p.counters.copy(),
            dropped=dict(p.dropped),
            router=rs,
            rows_pending=p.outbox.pending(),
            frontier_recounts=p.frontier.recounts,
            refresh_waiting=refresh_waiting,
            refresh_due=refresh_due,
            resumed=p.resumed,
            events=p.events.stats(),
            news=p.news.stats(fresh=d.stopping),
            state_log=p.state_log.stats(),
            regions=p.regions.stats(),
            politeness_wait_s=float(p.politeness.stats()["wait_s"]),
        )

    def backed_off_hosts(self) -> int:
        """Hosts slowed by backoff or a Retry-After now: a scan of every host, so asked by
        the metrics exporter once a second (actors/metrics.py), never by a status poll."""
        return self.parts.politeness.backed_off()
