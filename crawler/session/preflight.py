"""Before a run starts: a local output's state files checked, and its shards' stores settled.

With a local output every state file is on the driver's disk (``OUT/state``), so the
driver looks at all of them before any shard or service opens one (one place for both
runtimes, and a refusal is one line and exit 2 before an actor exists):

1. every file's stamp (crawler.recovery.stamps), read without writing: a shard store, an
   event log, a seen store or a content log of another crawl or shard is refused
   (:class:`~crawler.errors.ForeignStateError`); a file that is not what its name says
   is refused too (:class:`~crawler.errors.DamagedStateError`). ``budget.json`` is not
   refused: its pool rebuilds it from the rows (crawler.services.budget.BudgetPool);
2. each shard's store: its write-ahead log looked at before SQLite opens it (a cut
   loses committed transactions silently: crawler.recovery.walcheck), then the store
   settled against the rows its shard wrote (crawler.recovery.statefiles.settle_local):
   a URL with a row is done, whatever the store forgot;
3. when a store was damaged, it may also have lost URLs it had admitted and not yet
   fetched. The seen sets still mark them, so nothing would admit them again. Their
   hashes are the ones a seen store holds and no shard's store holds; their URLs are in
   the links of the pages fetched since the store's last surviving ack, whose bodies are
   in OUT: those pages are parsed again (the crawl's link rules) and every link with a
   lost hash is queued at its owner, as its delivery did the first time. A lost hash no
   stored page gives back (its page's body was not kept) is forgotten by the seen set,
   so the next page that links to it admits it again (docs/invariants.md #3). A
   Bloom-only seen set knows no hashes: its shards' queued URLs replay their links.

With a remote output the state is rebuilt from OUT by each shard (statelog); the stamps
are checked when each file is opened there.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

import pyarrow.dataset as pads

from crawler.config.settings import CrawlConfig
from crawler.content.index import read_log_stamp
from crawler.engine.partbuilders import build_link_policy
from crawler.services.contentindex import CONTENT_LOG, shard_log
from crawler.errors import StorageError
from crawler.events.emitter import EventLog
from crawler.frontier.audit import StoreAudit, read_stamp
from crawler.frontier.store import FrontierStore
from crawler.frontier.urlitem import UrlItem
from crawler.output import BlobStore, read_pages
from crawler.parse import is_html, parse_page
from crawler.placement.topology import Topology
from crawler.recovery import stamps
from crawler.recovery.statefiles import (CLOCK_SLACK_S, Settled, events_path, is_remote, log_events, seen_name,
                                         settle_local)
from crawler.recovery.walcheck import wal_cut
from crawler.seen.hashing import MASK64, url_hash64
from crawler.seen.set import claim_bloom_identity
from crawler.seen.store import PAGE_CACHE_KIB, DiskStore

log = logging.getLogger(__name__)


@dataclass
class Preflight:
    """What :func:`check_local_state` did: each shard's :class:`Settled`, the seen marks
    forgotten, and whether queued URLs replay their links (a damaged Bloom-only crawl)."""

    shards: dict[str, Settled] = field(default_factory=dict)
    relinked: int = 0  # lost admissions queued again from the links of stored pages
    forgotten: int = 0  # lost admissions no stored page gave back: their seen marks undone
    replay_all: bool = False

    @property
    def damaged(self) -> list[str]:
        return [sid for sid, s in self.shards.items() if s.damaged]


def check_local_state(cfg: CrawlConfig, sdir: str, shard_ids: Sequence[str], seen_shards: int, crawl: str | None,
                      seeds: Sequence[str] = ()) -> Preflight:
    """Steps 1-3 of the module docstring for the state folder ``sdir`` (resolved here);
    ``seeds`` are the crawl's (its link rules' scope)."""
    done = Preflight()
    if is_remote(cfg.output.path) or not os.path.isdir(sdir):
        return done
    _check_stamps(cfg, sdir, shard_ids, seen_shards, crawl)
    stores: dict[str, FrontierStore] = {}
    since: list[float | None] = []  # per damaged store: its last surviving ack's fetch time
    try:
        for sid in shard_ids:
            path = os.path.join(sdir, f"{sid}.sqlite")
            cut = wal_cut(path)  # before SQLite opens it: opening replays (and so hides) the cut
            store = stores[sid] = FrontierStore(path)
            StoreAudit(store).claim(stamps.part(crawl, stamps.shard_part(sid)))
            settled = settle_local(cfg, sid, store, cut=cut)
            log_events(cfg, sid, store.path, settled.rows, crawl)
            done.shards[sid] = settled
            if settled.damaged:
                since.append(settled.last_ack)
        if done.damaged and cfg.dedup.seen_exact:
            lost = _unheld(sdir, seen_shards, list(stores.values()))
            if lost:
                start = None if None in since else min(t for t in since if t is not None) - CLOCK_SLACK_S
                done.relinked = _relink(cfg, seeds, stores, lost, start)
                done.forgotten = _forget(sdir, seen_shards, lost)
        elif done.damaged:
            done.replay_all = True
            for store in stores.values():
                store.recover(replay_all=True)
    finally:
        for store in stores.values():
            store.close()
    return done


def _check_stamps(cfg: CrawlConfig, sdir: str, shard_ids: Sequence[str], seen_shards: int, crawl: str | None) -> None:
    for sid in shard_ids:
        path = os.path.join(sdir, f"{sid}.sqlite")
        if os.path.exists(path):
            stamps.check(path, read_stamp(path), stamps.part(crawl, stamps.shard_part(sid)), stamps.SHARD_FIX)
        events = events_path(path)
        if os.path.exists(events):
            stamps.check(events, EventLog.read_stamp(events), stamps.part(crawl, stamps.events_part(sid)))
    exact = cfg.dedup.seen_exact
    for i in range(seen_shards):
        path = os.path.join(sdir, f"seen-{i:03d}.sqlite")
        expected = stamps.part(crawl, stamps.seen_part(i))
        if exact and os.path.exists(path):
            try:
                found = DiskStore.read_stamp(path)
            except StorageError as exc:
                if "locked" not in str(exc):
                    raise
                continue  # a replaced run's seen actor still holds it: its successor checks it when it opens it
            stamps.check(path, found, expected)
        elif not exact:
            claim_bloom_identity(os.path.join(sdir, seen_name(i, False)), expected)
    for i in range(cfg.runtime.content_shards):
        path = shard_log(os.path.join(sdir, CONTENT_LOG), i)
        if os.path.exists(path):
            stamps.check(path, read_log_stamp(path), stamps.part(crawl, stamps.content_part(i)))


def _seen_paths(sdir: str, seen_shards: int) -> list[str]:
    return [p for p in (os.path.join(sdir, f"seen-{i:03d}.sqlite") for i in range(seen_shards)) if os.path.exists(p)]


def _unheld(sdir: str, seen_shards: int, stores: Sequence[FrontierStore]) -> set[int]:
    """The hashes (unsigned) the seen stores hold and no shard's store holds."""
    audits = [StoreAudit(s) for s in stores]
    lost: set[int] = set()
    for path in _seen_paths(sdir, seen_shards):
        disk = DiskStore(path, cache_kib=PAGE_CACHE_KIB, durable=True)
        try:
            for chunk in disk.iter_hashes():
                keys = [h - (1 << 64) if h >= 1 << 63 else h for h in chunk]
                held: set[int] = set()
                for audit in audits:
                    held |= audit.holding(keys)
                lost.update(k & MASK64 for k in keys if k not in held)
        finally:
            disk.close()
    return lost


def _relink(cfg: CrawlConfig, seeds: Sequence[str], stores: dict[str, FrontierStore], lost: set[int],
            start: float | None) -> int:
    """Queue again, at their owners, the lost URLs the links of the pages fetched since
    ``start`` (wall time; None: every page) give back; they leave ``lost``. Returns how many."""
    out, options = cfg.output.path, dict(cfg.output.storage_options) or None
    where = pads.field("blob_key").is_valid() | pads.field("redirect_to").is_valid()
    if start is not None:
        where &= pads.field("fetched_at") >= dt.datetime.fromtimestamp(start, dt.timezone.utc)
    rows = read_pages(out, options, where=where, columns=["url", "depth", "content_type", "blob_key", "redirect_to"])
    policy = build_link_policy(cfg, seeds)
    topology = Topology.of(list(stores), cfg.runtime.regions, cfg.placement.default_region)
    blobs = BlobStore(out, options)
    found: dict[str, list[UrlItem]] = {}
    for r in rows.to_pylist():
        depth = (r["depth"] or 0) + 1
        links = [r["redirect_to"]] if r["redirect_to"] else []
        if r["blob_key"]:
            body = blobs.get(r["blob_key"])
            if is_html(r["content_type"], body, None):
                page = parse_page(body, r["url"], r["content_type"], {}, user_agent_token=cfg.product_token(),
                                  max_links=cfg.urls.max_links_per_page)
                links += policy.follow(page, depth, Counter())
        for u in links:
            h = url_hash64(u)
            if h in lost:
                lost.discard(h)
                item = UrlItem(u, depth, r["url"])
                found.setdefault(topology.home_of(item.host), []).append(item)
    for sid, items in found.items():
        stores[sid].add(items)
    n = sum(len(v) for v in found.values())
    if n:
        log.warning("%d URLs admitted before the crash and lost with a damaged store are queued again"
                    " (found in the links of the pages stored since)", n)
    return n


def _forget(sdir: str, seen_shards: int, lost: set[int]) -> int:
    """Undo the seen marks of ``lost`` (unsigned hashes) in every seen store; returns how many."""
    total = 0
    for path in _seen_paths(sdir, seen_shards):
        disk = DiskStore(path, cache_kib=PAGE_CACHE_KIB, durable=True)
        try:
            mine = sorted(disk.lookup(lost))
            if mine:
                counters = dict(disk.counters)
                counters["novel"] = counters.get("novel", 0) - len(mine)
                counters["forgotten"] = counters.get("forgotten", 0) + len(mine)
                disk.delete(mine, counters)
                log.warning("%s: %d URLs marked seen are held by no shard's store and linked from no stored page:"
                            " forgotten, so the next page that links to one admits it again", path, len(mine))
            total += len(mine)
        finally:
            disk.close()
    return total
