"""A whole crawl in one process: the engines, router, seen set and content index in one loop.

This is what ``crawl run --local`` uses and what the unit tier tests end to end. The Ray
runtime (``actors/``, ``jobs/crawl.py``) replaces the in-process services below with
actors and keeps every engine unchanged; both write the same output.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from typing import Any, Callable, Sequence

from crawler.clock import SYSTEM_CLOCK
from crawler.config import CrawlConfig, to_dict
from crawler.dedup import ContentIndex
from crawler.engine import LocalPageBudget, ShardEngine
from crawler.frontier import UrlItem
from crawler import ledger
from crawler.hashring import HashRing
from crawler.journal import FrontierStore
from crawler.output import compact_pages, open_fs
from crawler.resume import crawl_state_dir, mark_finished, prepare
from crawler.routing import LinkRouter
from crawler.seen import SeenSet
from crawler.termination import TerminationDetector

log = logging.getLogger(__name__)


class LocalSeen:
    """The seen-URL service backed by one in-process :class:`SeenSet` (on disk with ``path``)."""

    def __init__(self, cfg: CrawlConfig, path: str | None = None) -> None:
        d = cfg.dedup
        self.set = SeenSet(d.seen_capacity, d.seen_error_rate, exact=d.seen_exact, **({"path": path} if path else {}))

    async def check_and_add(self, urls: list[str]) -> list[bool]:
        return self.set.check_and_add(urls)


class LocalContent:
    """The content-duplicate service backed by one in-process :class:`ContentIndex`.

    With ``path`` the index is restored from a snapshot there and saved by :meth:`save`.
    """

    def __init__(self, cfg: CrawlConfig, path: str | None = None) -> None:
        self.path = path
        if path and os.path.exists(path):
            with open(path, "rb") as f:
                self.index = ContentIndex.restore(f.read())
        else:
            self.index = ContentIndex(cfg.dedup.simhash_distance, cfg.dedup.simhash_tables)

    def save(self) -> None:
        if self.path:
            save_snapshot(self.path, self.index.snapshot())

    async def check_and_add(self, items):
        return self.index.check_and_add(items)


def save_snapshot(path: str, data: bytes) -> None:
    """Write a snapshot atomically (temp file, fsync, rename)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def merge_status(statuses: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Sum per-shard statuses into crawl-wide totals (for progress and stats.json)."""
    total: dict[str, Any] = {"queued": 0, "in_flight": 0, "in_transit": 0, "hosts": 0, "counters": {}, "dropped": {}}
    for s in statuses:
        for k in ("queued", "in_flight", "in_transit", "hosts"):
            total[k] += s[k]
        for section in ("counters", "dropped"):
            for k, v in s[section].items():
                total[section][k] = total[section].get(k, 0) + v
    total["shards"] = len(statuses)
    return total


def write_stats(cfg: CrawlConfig, stats: dict[str, Any]) -> str:
    """Write ``OUT/stats.json`` (through fsspec, so s3:// works); returns its path."""
    fs, root = open_fs(cfg.output.path, dict(cfg.output.storage_options) or None)
    path = f"{root.rstrip('/')}/stats.json"
    fs.makedirs(root, exist_ok=True)
    with fs.open(path, "w") as f:
        json.dump(stats, f, indent=2, sort_keys=True, default=str)
    return path


class LocalCrawl:
    """Run a crawl with ``shards`` engines in the current event loop."""

    def __init__(
        self,
        cfg: CrawlConfig,
        *,
        shards: int = 1,
        clock=SYSTEM_CLOCK,
        fetcher_factory: Callable[[], Any] | None = None,
        poll_interval_s: float = 0.05,
        on_progress: Callable[[dict[str, Any]], None] | None = None,
        durable: bool = True,
        force: bool = False,
    ) -> None:
        self.cfg = cfg
        self.clock = clock
        self.seeds = cfg.all_seeds()
        self.mode = "new"
        self.record = None
        sdir = None
        if durable:
            # 1. New, resumed or finished? A resumed crawl keeps its shard count (hosts
            #    are owned by shard, and each shard's queue is in its own store).
            self.record, self.mode = prepare(cfg, shards, 1, force=force)
            shards = self.record.shards
            sdir = crawl_state_dir(cfg)
        self.state_dir = sdir
        self.seen = LocalSeen(cfg, os.path.join(sdir, "seen-000.sqlite") if sdir else None)
        self.content = LocalContent(cfg, os.path.join(sdir, "content.snapshot") if sdir else None)
        self.budget = LocalPageBudget(cfg.limits.max_pages)
        ids = [f"shard-{i:03d}" for i in range(shards)]
        self.ring = HashRing(ids)
        self.engines: dict[str, ShardEngine] = {}
        for sid in ids:
            eng = ShardEngine(
                cfg,
                sid,
                content=self.content,
                budget=self.budget,
                seeds=self.seeds,
                clock=clock,
                fetcher=fetcher_factory() if fetcher_factory else None,
                store=FrontierStore(os.path.join(sdir, f"{sid}.sqlite")) if sdir else None,
            )
            eng.attach_router(
                LinkRouter(
                    self.seen,
                    self.ring.node_for,
                    self._deliver,
                    batch_size=cfg.runtime.batch_size,
                    flush_interval_s=cfg.runtime.flush_interval_s,
                    before_flush=eng.commit_claims,
                )
            )
            self.engines[sid] = eng
        self.poll_interval_s = poll_interval_s
        self.on_progress = on_progress
        self.detector = TerminationDetector()

    async def _deliver(self, owner: str, items: list[UrlItem]) -> None:
        self.engines[owner].accept(items)

    async def seed(self, urls: Sequence[str]) -> int:
        """Seen-check and deliver seed URLs (depth 0); returns how many were new."""
        items = [UrlItem(u, 0) for u in urls]
        verdicts = await self.seen.check_and_add([i.url for i in items])
        by_owner: dict[str, list[UrlItem]] = {}
        for item, new in zip(items, verdicts):
            if new:
                by_owner.setdefault(self.ring.node_for(item.host), []).append(item)
        for owner, batch in by_owner.items():
            self.engines[owner].accept(batch)
        self.detector.note_driver_batches(len(by_owner))
        return sum(len(b) for b in by_owner.values())

    def status(self) -> list[dict[str, Any]]:
        return [e.status() for e in self.engines.values()]

    @property
    def resumed(self) -> int:
        """URLs that were queued when this crawl last stopped (0 for a new crawl)."""
        return sum(e.resumed for e in self.engines.values())

    async def run(self) -> dict[str, Any]:
        """Seed, crawl until termination is proven, flush, write stats.json; return the stats."""
        if self.mode == "finished":
            return self._finished_stats()
        started = time.monotonic()
        runners = [asyncio.get_running_loop().create_task(e.run()) for e in self.engines.values()]
        finished = False
        try:
            await self.seed(self.seeds)
            while True:
                await asyncio.sleep(self.poll_interval_s)
                statuses = self.status()
                if self.on_progress is not None:
                    self.on_progress(merge_status(statuses))
                if self.detector.observe(statuses):
                    finished = True
                    break
                for r in runners:
                    if r.done() and r.exception() is not None:
                        raise r.exception()  # type: ignore[misc]
        finally:
            for e in self.engines.values():
                e.stop()
            await asyncio.gather(*runners, return_exceptions=True)
            for e in self.engines.values():
                await e.close()
            self.content.save()
            close = getattr(self.seen.set, "close", None)
            if close is not None:
                close()
        elapsed = time.monotonic() - started
        stats = self.final_stats(elapsed)
        stats["finished"] = finished
        opts = dict(self.cfg.output.storage_options) or None
        if finished:
            # Rows repeated across a crash or a retried delivery: leave each (url, content) once.
            stats["compacted_rows"] = compact_pages(self.cfg.output.path, opts)
        statuses = [{**e.status(), "store_counts": e.store_counts()} for e in self.engines.values()]
        stats["ledger"] = ledger.for_run(self.cfg.output.path, opts, statuses, stats["seen"], finished=finished)
        write_stats(self.cfg, stats)
        if finished and self.record is not None:
            mark_finished(self.cfg, self.record)
        return stats

    def _finished_stats(self) -> dict[str, Any]:
        fs_path = os.path.join(self.cfg.output.path, "stats.json")
        try:
            with open(fs_path) as f:
                stats = json.load(f)
        except OSError:
            stats = {"outcomes": {}}
        stats["already_finished"] = True
        stats["finished"] = True
        return stats

    def final_stats(self, elapsed: float) -> dict[str, Any]:
        statuses = self.status()
        total = merge_status(statuses)
        c = total["counters"]
        return {
            "finished": True,
            "elapsed_s": round(elapsed, 3),
            "pages_per_s": round(c.get("fetched", 0) / elapsed, 2) if elapsed > 0 else None,
            "outcomes": {k: c.get(k, 0) for k in ("fetched", "redirect", "not_modified", "http_error", "failed", "robots_blocked")},
            "requests": c.get("requests", 0),
            "robots_requests": c.get("robots_requests", 0),
            "retries": c.get("retries", 0),
            "bytes": c.get("bytes", 0),
            "duplicates": {"exact": c.get("dup_exact", 0), "near": c.get("dup_near", 0)},
            "dropped": total["dropped"],
            "queued_unfetched": total["queued"],
            "shards": total["shards"],
            "seen": self.seen.set.stats(),
            "resumed_urls": self.resumed,
            "mode": self.mode,
            "content": self.content.index.stats(),
            "config_fingerprint": self.cfg.fingerprint(),
            "config": to_dict(self.cfg),
        }
