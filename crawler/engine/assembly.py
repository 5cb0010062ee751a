"""Assembling one shard from a config: the same wiring in one process and on Ray.

:func:`build_shard` creates a shard's per-host policy objects (politeness, robots,
frontier, budgets), its page pipeline, outbox and checkpointer around a
:class:`~crawler.engine.shard.Shard`, connects it to the crawl-wide services it is
given (seen group, content index, page budget, delivery to other shards), and resumes it
from its durable store. ``actors/host_shard.py`` calls it with Ray clients,
``crawler.session.inprocess`` with in-process services.
"""

from __future__ import annotations

import asyncio
import os
import random
import zlib
from typing import Any, Awaitable, Callable, Sequence

from crawler.engine.admission import Admission
from crawler.engine.batching import MicroBatcher
from crawler.engine.checkpoint import Checkpointer, resume_queue
from crawler.clock import SYSTEM_CLOCK, Clock
from crawler.config.settings import CrawlConfig
from crawler.events.emitter import EventEmitter, build_emitter
from crawler.errors import ConfigError
from crawler.fetch.fetcher import classify
from crawler.placement.handover import HostParts, Peers, RegionBook, Regions
from crawler.frontier.frontier import Frontier
from crawler.frontier.urlitem import UrlItem
from crawler.recovery import statefiles as state
from crawler.frontier.store import FrontierStore
from crawler.recovery.lease import Fence
from crawler.engine.outbox import Outbox, RowWriter
from crawler.engine.pipeline import PagePipeline, ParseSlot
from crawler.frontier.refreshfeed import RefreshFeed
from crawler.render.build import build_renderer
from crawler.render.renderer import RenderService
from crawler.recovery.statelog import Restored, StateLog
from crawler.robots import RobotsCache, RobotsClient
from crawler.engine.linkrouter import LinkRouter, SeenService
from crawler.engine.dispatcher import Claims, DispatchSettings, Dispatcher, Gate, Hold, always_open
from crawler.engine.gates import BudgetGate, FetchGate, PageBudget, RegionGate, RobotsGate
from crawler.engine.handler import FetchHandler
from crawler.engine.internalerrors import InternalErrors
from crawler.engine.optional import NoCheckpoints, NoEvents, NoFeed, NoJournal, NoRegions
from crawler.engine.parts import ShardParts
from crawler.engine.recorder import Recorder
from crawler.engine.requests import Fetcher as FetchClient
from crawler.engine.requests import RequestLane
from crawler.engine.shard import Shard
from crawler.engine.shardapi import ShardApi
from crawler.engine.partbuilders import (
    build_fetcher, build_frontier, build_link_policy, build_news, build_placement, build_politeness, build_recrawl,
    build_regions, build_sitemaps, build_writer,
)
from crawler.placement.topology import Topology
from crawler.policy.hostbudget import HostBudget
from crawler.urls import host_key, join_url
from crawler.counters import ShardCounters, restore_dropped

#: ``await content(batch)`` -> ``(dup_kind, dup_of)`` per ``(url, sha256, simhash)``.
ContentCall = Callable[[list[tuple[str, str, int | None]]], Awaitable[Sequence[tuple[str | None, str | None]]]]
Deliver = Callable[[str, list[UrlItem]], Awaitable[Any]]


def _fenced_by(restored: Restored | None, gate: Gate) -> Gate:
    """``gate``, closed too once a write found a newer incarnation of the shard (DESIGN
    invariant 15; answered from that verdict, no read of its own)."""
    inc = restored.incarnation if restored is not None else None
    if inc is None:
        return gate
    return lambda: not inc.fenced and gate()


def _flush_hooks(checkpointer: Checkpointer | None, emitter: EventEmitter | None) -> Callable[[bool], Awaitable[None]] | None:
    """The outbox's per-round hook: checkpoint, then the events' (the final round drains them)."""
    hooks = [h for h in (checkpointer.tick if checkpointer else None, emitter.on_flush if emitter else None) if h]
    if len(hooks) < 2:
        return hooks[0] if hooks else None

    async def both(final: bool) -> None:
        for hook in hooks:
            await hook(final)

    return both


def _resume(
    cfg: CrawlConfig,
    shard_id: str,
    store: FrontierStore,
    checkpointer: Checkpointer,
    frontier: Frontier,
    *,
    restored: Restored | None,
    emitter: EventEmitter | None,
    regions: Regions | None,
    counters: ShardCounters,
    hold: Hold,
    unclean: bool = False,
) -> tuple[list[Callable[[], Awaitable[None]]], int]:
    """Bring a shard's parts back from its store (and, rebuilt from OUT, the rows written
    since the snapshot): the steps to run before its first dispatch, and how many URLs
    were re-queued."""
    on_start: list[Callable[[], Awaitable[None]]] = []
    settled = 0
    if restored is not None and restored.anything:
        # Rebuilt from OUT: rows written since the snapshot whose acks were not yet
        # journaled settle the rest (crawler.recovery.statefiles.reconcile_store).
        rows = state.rows_since(shard_id, cfg.output.path, dict(cfg.output.storage_options) or None, restored.snapshot_wall)
        settled = state.reconcile_store(store, rows)
        if emitter is not None:
            # Events of rows since the snapshot may have been waiting in the lost log
            # (the ones before it came back with the snapshot): sent again, at least once.
            async def resend(rows: list[dict[str, Any]] = rows) -> None:
                emitter.on_durable(state.event_rows(rows))

            on_start.append(resend)
    # Policies first: the frontier schedules the resumed hosts by them (a paused host
    # must be parked from the start, not scheduled as never contacted).
    had_checkpoint = checkpointer.restore()
    if regions is not None and regions.moving:
        on_start.append(regions.resume_moves)  # moves a crash interrupted
    if restored is not None and restored.anything:
        counters.restarts_from_out += 1
        counters.restored_done_from_rows += settled
    resumed = resume_queue(store, frontier)
    if unclean:
        hold.hold(unclean_hold_s(cfg))
    elif had_checkpoint or resumed:
        # No request before one interval: a host contacted just before the stop is
        # not contacted again too soon.
        hold.hold(max(cfg.politeness.interval_s, 0.05))
    return on_start, resumed


def unclean_hold_s(cfg: CrawlConfig) -> float:
    """How long a shard that follows an unclean end waits before its first request.

    Its predecessor -- a crashed or partitioned incarnation, or the shards of a run
    whose driver died -- may still have a request open to a host this shard is about to
    contact: on a machine cut off from the cluster it runs on (a zombie), and a request
    lasts up to ``fetch.timeout_s``. Waiting that long, plus one interval, keeps one
    request in flight per host as the server sees it (docs/invariants.md #2) across
    incarnations; a clean resume waits one interval only.
    """
    return cfg.fetch.timeout_s + max(cfg.politeness.interval_s, 0.05)


def build_shard(
    cfg: CrawlConfig,
    shard_id: str,
    *,
    seeds: Sequence[str],
    seen: SeenService,
    content: ContentCall,
    budget: PageBudget,
    deliver: Deliver,
    owner_of: Callable[[str], str],
    store: FrontierStore | None = None,
    clock: Clock = SYSTEM_CLOCK,
    rng: random.Random | None = None,
    fetcher: FetchClient | None = None,
    writer: RowWriter | None = None,
    run_blocking: Callable[..., Awaitable[Any]] = asyncio.to_thread,
    fence: Fence | None = None,
    state_log: StateLog | None = None,
    restored: Restored | None = None,
    render_service: RenderService | None = None,
    topology: Topology | None = None,
    peers: Peers | None = None,
    gate: Gate | None = None,
    wrap_fetcher: Callable[[FetchClient], FetchClient] | None = None,
    unclean_start: bool = False,
    peer: Callable[[str], ShardApi] | None = None,
) -> Shard:
    """A ready-to-run shard (see the module docstring); ``fetcher``/``writer`` default to
    the real ones, ``run_blocking`` to a worker thread (tests pass fakes and inline runs):
    the outbox's flushes run there, and the input-sized parses of pages, feeds, sitemaps
    and robots.txt files, one at a time (crawler.engine.pipeline.ParseSlot, DESIGN
    invariant 16).
    ``state_log``/``restored``: with a remote output, the store's journal in OUT and what
    OUT held when the store was rebuilt from it (crawler.recovery.statefiles.open_shard_store).
    ``render_service``: where pages are rendered when ``render.mode`` is not ``never``.
    ``topology``/``peers``: with ``runtime.regions``, the crawl's shards by region and how
    to reach them (crawler.placement.handover). ``gate``: may the shard work now (default: while
    ``fence`` holds the output's lease). ``wrap_fetcher``: wraps the fetcher the shard
    fetches pages through (the actor times them); robots, sitemaps, probes and renders too
    go through the shard's, rendering and the own region's probe through the bare one.
    ``unclean_start``: this shard follows an incarnation that did not stop cleanly (a
    restart after a crash, or a run that took over a dead run's lease): its first request
    waits :func:`unclean_hold_s`.

    Every part is built with its collaborators passed in, in dependency order, and the
    shard last: no part is wired after construction (tests/unit/test_assembly.py)."""
    pol, rt, rc = cfg.politeness, cfg.runtime, cfg.recrawl
    rng = rng or random.Random(zlib.crc32(shard_id.encode()))  # the same in every process (str hash is salted)
    politeness = build_politeness(cfg, clock)
    robots_cache = RobotsCache(cfg.user_agent, ttl_s=pol.robots_ttl_s, error_ttl_s=pol.robots_error_ttl_s, clock=clock)
    frontier = build_frontier(cfg, politeness, clock, rng, store)
    recrawl = build_recrawl(cfg)
    links = build_link_policy(cfg, seeds)
    news = build_news(cfg, clock)
    parse_slot = ParseSlot(run_blocking)  # robots.txt, pages, feeds, sitemaps: one parse at a time
    robots = RobotsClient(
        robots_cache, classify=classify, normalize=links.normalizer, join=join_url, host_of=host_key, pacer=politeness,
        clock=clock, run_blocking=parse_slot,
    )
    host_budget = HostBudget(
        cfg.limits.max_pages_per_host, novelty_window=cfg.dedup.novelty_window, novelty_threshold=cfg.dedup.novelty_threshold
    )
    batcher: MicroBatcher[tuple[str, str, int | None], tuple[str | None, str | None]] = MicroBatcher(
        content, max_size=rt.content_batch_size, max_delay_s=rt.content_batch_delay_s, clock=clock
    )
    fetcher = fetcher if fetcher is not None else build_fetcher(cfg, clock)
    counters = ShardCounters()
    renderer = None
    if cfg.render.mode != "never" and render_service is not None:
        renderer = build_renderer(
            cfg, shard_id, render_service, fetch=fetcher.fetch, politeness=politeness, robots=robots_cache,
            links=links, clock=clock, rng=random.Random(rng.random()), counters=counters,
        )
    pipeline = PagePipeline(
        shard_id,
        links,
        batcher,
        clock,
        user_agent_token=cfg.product_token(),
        max_links_per_page=cfg.urls.max_links_per_page,
        min_text_tokens=cfg.dedup.min_text_tokens,
        max_body_bytes=cfg.limits.max_body_bytes,
        store_bodies=cfg.output.store_bodies,
        recrawl=recrawl,
        renderer=renderer,
        counters=counters,
        news=news,
        run_blocking=parse_slot,
    )
    admission = Admission(store, robots_cache, host_budget, frontier, respect_robots=pol.respect_robots, dropped=pipeline.dropped)
    checkpointer = None
    out, opts = cfg.output.path, dict(cfg.output.storage_options) or None
    hold = Hold(clock)  # the emitter holds the shard while its log is full
    claims = Claims(store)  # the router commits them before its seen check
    book = None
    if rt.regions:
        if store is None or topology is None or peers is None:
            raise ConfigError("runtime.regions: needs the Ray runtime and a crawl with durable state (not --local)")
        book = RegionBook(build_placement(cfg, clock, random.Random(rng.random())), frontier)
    if store is not None:

        async def ship() -> None:
            assert state_log is not None
            pending = getattr(emitter.log, "backup", None) if emitter is not None else None
            await state_log.snapshot(lambda dest: store.backup(dest, lambda: state_log.seq), events=pending)

        checkpointer = Checkpointer(
            store,
            {
                "robots": (robots_cache.snapshot, robots_cache.restore),
                "host_budget": (host_budget.snapshot, host_budget.restore),
                "politeness": (lambda: politeness.snapshot(protecting_only=True), politeness.restore),
                "counters": (pipeline.counters.as_dict, pipeline.counters.restore),
                "dropped": (lambda: dict(pipeline.dropped), lambda saved: restore_dropped(pipeline.dropped, saved)),
                **({"render_hosts": (renderer.decider.snapshot, renderer.decider.restore)} if renderer else {}),
                **({"regions": (book.snapshot, book.restore)} if book is not None else {}),
            },
            clock,
            interval_s=rt.checkpoint_interval_s,
            ship=ship if state_log is not None else None,
            ship_interval_s=rt.state_ship_interval_s,
            decisions=admission,  # budgets and robots verdicts: in the store, newer than the checkpoint
            state=state_log,
        )
    emitter = build_emitter(
        cfg.events, shard_id, out, opts, clock,
        log_path=os.path.splitext(store.path)[0] + ".events.sqlite" if store is not None else None,
        hold=hold.hold,
    )
    feed = RefreshFeed(store, frontier, clock) if rc.enabled and store is not None else None
    outbox = Outbox(
        writer if writer is not None else build_writer(cfg, shard_id, clock, restored.incarnation if restored else None),
        store,
        clock,
        interval_s=cfg.output.outbox_interval_s,
        run_blocking=run_blocking,
        on_flush=_flush_hooks(checkpointer, emitter),
        fence=fence.ok if fence is not None else None,
        on_durable=emitter.on_durable if emitter is not None else None,
        on_acked=feed.acked if feed is not None else None,
    )
    regions = None
    if book is not None:
        assert store is not None and topology is not None and peers is not None and checkpointer is not None
        host_parts = HostParts(
            store, frontier, politeness, robots_cache, host_budget, flush=lambda: outbox.flush(final=True),
            busy=frontier.busy, adopted=feed.adopted if feed is not None else (lambda host: 0),
        )
        regions = build_regions(shard_id, topology, book, host_parts, peers, clock, fetcher, checkpointer, state_log)
    sitemaps = build_sitemaps(cfg, links, pipeline, recrawl, news, store, clock, parse_slot) if cfg.sitemaps.enabled else None
    router = LinkRouter(
        seen, owner_of, deliver, batch_size=rt.batch_size, flush_interval_s=rt.link_flush_interval_s,
        early_flush_s=rt.link_flush_early_s, small_batch=rt.link_flush_small, clock=clock,
        before_flush=claims.commit,  # claims are durable before links are marked seen
    )
    on_start: list[Callable[[], Awaitable[None]]] = []
    resumed = 0
    if store is not None and checkpointer is not None:
        on_start, resumed = _resume(
            cfg, shard_id, store, checkpointer, frontier, restored=restored, emitter=emitter, regions=regions,
            counters=pipeline.counters, hold=hold, unclean=unclean_start,
        )
    parts = ShardParts(
        shard_id,
        DispatchSettings(cfg.fetch.max_in_flight, cfg.fetch.attempts, pol.respect_robots),
        clock,
        frontier=frontier,
        politeness=politeness,
        robots=robots,
        pipeline=pipeline,
        host_budget=host_budget,
        admission=admission,
        budget=budget,
        fetcher=wrap_fetcher(fetcher) if wrap_fetcher is not None else fetcher,
        outbox=outbox,
        router=router,
        store=store,
        checkpointer=checkpointer if checkpointer is not None else NoCheckpoints(),
        feed=feed if feed is not None else NoFeed(),
        sitemaps=sitemaps,
        news=news,
        state_log=state_log if state_log is not None else NoJournal(),
        regions=regions if regions is not None else NoRegions(shard_id),
        events=emitter if emitter is not None else NoEvents(),
        gate=_fenced_by(restored, gate if gate is not None else (fence.ok if fence is not None else always_open)),
        hold=hold,
        claims=claims,
        on_start=tuple(on_start),
        resumed=resumed,
    )
    return assemble(parts, peer)


def assemble(parts: ShardParts, peer: Callable[[str], ShardApi] | None = None) -> Shard:
    """The shard over ``parts``: its recorder, request lane, gates (crawler.engine.gates),
    response handler and dispatcher, each given only the parts it needs."""
    p, counters = parts, parts.counters
    recorder = Recorder(p.pipeline, p.outbox, p.robots.cache, p.feed, counters, settled=lambda url: errors.settled(url))
    errors = InternalErrors(p.shard_id, p.settings.attempts, retry=p.frontier.retry, fail=recorder.failed, counters=counters)
    lane = RequestLane(p.politeness, p.fetcher, counters)
    gates: list[FetchGate] = []
    if not isinstance(p.regions, NoRegions):
        gates.append(RegionGate(p.regions))
    if p.settings.respect_robots:
        gates.append(RobotsGate(p.robots, lane, p.frontier, p.politeness, p.admission, recorder, p.sitemaps,
                                attempts=p.settings.attempts, counters=counters))
    gates.append(BudgetGate(p.budget))
    handler = FetchHandler(p.settings.attempts, frontier=p.frontier, pipeline=p.pipeline, host_budget=p.host_budget,
                           admission=p.admission, router=p.router, news=p.news, recorder=recorder, counters=counters)
    dispatcher = Dispatcher(p.settings, frontier=p.frontier, gates=gates, lane=lane, handler=handler, sitemaps=p.sitemaps,
                            router=p.router, errors=errors, feed=p.feed, timing=(p.clock, p.hold, p.gate), claims=p.claims)
    return Shard(parts, dispatcher, recorder, peer)
