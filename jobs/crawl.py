"""The crawl driver: ``python -m jobs.crawl CONFIG [--out DIR] [--set k=v]``.

This is what ``ray job submit`` runs and what ``crawl run`` calls. The logic lives in
:class:`Crawl`, a handle on a running crawl (start, add seeds, stats, set a host's
policy, stop, wait) so the CLI, a notebook and a future HTTP control API share it.

Ray is joined at ``RAY_ADDRESS`` / ``--address`` when given; otherwise an embedded,
loopback-only, quiet Ray is started for the duration of the crawl.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time
import uuid
from typing import Any, Sequence

from crawler import config as config_mod
from crawler import ledger
from crawler.config import CrawlConfig, resolve_shards, to_dict
from crawler.errors import ConfigError, OutputExistsError
from crawler.hashring import HashRing
from crawler.output import OUTCOMES, compact_pages, open_fs
from crawler.resume import crawl_state_dir, mark_finished, prepare
from crawler.runner import merge_status, write_stats
from crawler.seen import shard_of, url_hash64
from crawler.termination import TerminationDetector
from crawler.urls import host_key

log = logging.getLogger("jobs.crawl")


def init_ray(address: str | None = None, *, num_cpus: int | None = None, temp_dir: str | None = None) -> bool:
    """Connect to a cluster, or start an embedded loopback Ray. Returns True if we started it.

    The embedded Ray binds to 127.0.0.1, sends no usage stats and starts no dashboard
    (it costs seconds and ~1 GB here; clusters started with ``ray up`` have their own).
    """
    import ray

    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address:
        ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
        return False
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    kw: dict[str, Any] = {}
    if temp_dir:
        kw["_temp_dir"] = temp_dir
    ray.init(
        _node_ip_address="127.0.0.1",
        include_dashboard=False,
        num_cpus=num_cpus,
        log_to_driver=False,
        logging_level=logging.WARNING,
        configure_logging=True,
        **kw,
    )
    return True


class Crawl:
    """A handle on one distributed crawl.

    ``start()`` creates the actors and seeds; ``wait()`` monitors until termination is
    proven (or ``stop()`` is called) and returns the final stats.
    """

    def __init__(
        self, cfg: CrawlConfig, *, address: str | None = None, poll_interval_s: float = 0.2, force: bool = False
    ) -> None:
        self.cfg = cfg
        self.address = address
        self.force = force
        self.mode = "new"
        self.record: Any = None
        self.resumed = 0
        self.crawl_name = ""
        self.poll_interval_s = poll_interval_s
        self.seeds = cfg.all_seeds()
        if not self.seeds:
            raise ConfigError("seeds: no seed URLs (set seeds: [...] or seeds_file:)")
        self.shards: dict[str, Any] = {}
        self.seen_actors: list[Any] = []
        self.content_actor: Any = None
        self.budget_actor: Any = None
        self.ring: HashRing | None = None
        self.detector = TerminationDetector()
        self._owns_ray = False
        self._stop_requested = False
        self.started_at: float | None = None
        self.final: dict[str, Any] | None = None
        self._last_total: dict[str, Any] = {}

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> "Crawl":
        """Create the actors (or find the crawl finished), restore or seed, start fetching.

        Steps, in order:
        1. join or start Ray;
        2. decide new / resume / finished from ``OUT/state/crawl.json`` (a resumed crawl
           keeps its shard counts: hosts are owned by shard, queues live per shard);
        3. create the SeenFilter group, the content index and the budget;
        4. create the HostShards (restartable, named, spread over nodes); each reopens
           its durable store, so a resumed crawl continues where it stopped;
        5. seed (seeds already seen are dropped, so re-seeding a resumed crawl is harmless).
        """
        import ray

        from actors.host_shard import HostShard, shard_actor_name
        from actors.services import Budget, ContentIndexActor, SeenFilter

        self._owns_ray = init_ray(self.address)
        cpus = int(ray.cluster_resources().get("CPU", 2))
        n = resolve_shards(self.cfg.runtime.shards, cpus)
        n_seen = resolve_shards(self.cfg.runtime.seen_shards, cpus)
        self.record, self.mode = prepare(self.cfg, n, n_seen, force=self.force)
        if self.mode == "finished":
            self.final = self._finished_stats()
            return self
        n, n_seen = self.record.shards, self.record.seen_shards
        sdir = crawl_state_dir(self.cfg)
        os.makedirs(sdir, exist_ok=True)
        d = self.cfg.dedup
        restarts = self.cfg.runtime.max_restarts
        cfg_dict = to_dict(self.cfg)
        per_shard = max(1000, d.seen_capacity // n_seen)
        self.seen_actors = [
            SeenFilter.options(max_restarts=restarts).remote(
                per_shard, d.seen_error_rate, d.seen_exact, os.path.join(sdir, f"seen-{i:03d}.sqlite")
            )
            for i in range(n_seen)
        ]
        self.content_actor = ContentIndexActor.options(max_restarts=restarts).remote(
            d.simhash_distance, d.simhash_tables, os.path.join(sdir, "content.snapshot")
        )
        self.budget_actor = Budget.options(max_restarts=restarts).remote(self.cfg.limits.max_pages)
        ids = [f"shard-{i:03d}" for i in range(n)]
        self.ring = HashRing(ids)
        self.crawl_name = f"raycrawl-{self.cfg.fingerprint()}-{uuid.uuid4().hex[:6]}"
        self.shards = {
            sid: HostShard.options(
                scheduling_strategy="SPREAD", name=shard_actor_name(self.crawl_name, sid), max_restarts=restarts
            ).remote(cfg_dict, sid, ids, self.seen_actors, self.content_actor, self.budget_actor, self.seeds, self.crawl_name, sdir)
            for sid in ids
        }
        ray.get([s.set_peers.remote(self.shards) for s in self.shards.values()])
        ray.get([s.start.remote() for s in self.shards.values()])
        self.started_at = time.monotonic()
        if self.mode == "resume":
            self.resumed = sum(st.get("resumed", 0) for st in self.statuses() or [])
            log.info("resuming the unfinished crawl in %s: %d URLs were queued", self.cfg.output.path, self.resumed)
        self.add_seeds(self.seeds, _initial=True)
        return self

    def _finished_stats(self) -> dict[str, Any]:
        fs, root = open_fs(self.cfg.output.path, dict(self.cfg.output.storage_options) or None)
        try:
            with fs.open(f"{root.rstrip('/')}/stats.json", "r") as f:
                stats = json.load(f)
        except (OSError, ValueError):
            stats = {}
        stats["finished"] = True
        stats["already_finished"] = True
        return stats

    def add_seeds(self, urls: Sequence[str], *, _initial: bool = False) -> int:
        """Add seed URLs to a running crawl (validated; scope widened). Returns how many were new."""
        import ray

        from crawler.frontier import UrlItem
        from crawler.urls import validate_seed

        clean = [validate_seed(u) for u in urls]
        if not _initial:
            ray.get([s.add_seeds.remote(clean) for s in self.shards.values()])
        hashes = [url_hash64(u) for u in clean]
        n_seen = len(self.seen_actors)
        parts: dict[int, list[int]] = {}
        for i, h in enumerate(hashes):
            parts.setdefault(shard_of(h, n_seen), []).append(i)
        novel = [False] * len(clean)
        for s, idx in parts.items():
            for i, v in zip(idx, ray.get(self.seen_actors[s].check_and_add_hashes.remote([hashes[i] for i in idx]))):
                novel[i] = v
        by_owner: dict[str, list[UrlItem]] = {}
        assert self.ring is not None
        for u, new in zip(clean, novel):
            if new:
                by_owner.setdefault(self.ring.node_for(host_key(u)), []).append(UrlItem(u, 0))
        ray.get([self.shards[o].accept.remote(b) for o, b in by_owner.items()])
        self.detector.note_driver_batches(len(by_owner))
        return sum(len(b) for b in by_owner.values())

    def statuses(self) -> list[dict[str, Any]] | None:
        """Every shard's status, or None if a shard is restarting (no consistent view now)."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        try:
            return ray.get([s.status.remote() for s in self.shards.values()], timeout=30)
        except (RayActorError, GetTimeoutError) as exc:
            log.warning("a shard did not answer (restarting?): %s", type(exc).__name__)
            return None

    def stats(self) -> dict[str, Any]:
        """Crawl-wide totals right now (pages, queued, in flight, hosts, errors, duplicates, bytes)."""
        if self.final is not None:
            return self.final
        return merge_status(self.statuses() or [])

    def set_host_policy(self, host: str, *, max_rps: float | None = None, paused: bool | None = None) -> None:
        """Override one host's politeness (``max_rps`` -> interval 1/max_rps) or pause it."""
        import ray

        assert self.ring is not None
        interval = None if max_rps is None else (float("inf") if max_rps <= 0 else 1.0 / max_rps)
        owner = self.shards[self.ring.node_for(host)]
        ray.get(owner.set_host_policy.remote(host, interval, paused))

    def poll(self) -> bool:
        """One termination check (call repeatedly, e.g. from a notebook); True once finished."""
        if self.final is not None:
            return True
        statuses = self.statuses()
        if statuses is None:
            self.detector.observe([{"shard": "?", "idle": False, "batches_sent": 0, "batches_received": 0, "counters": {}, "queued": 0}])
            return False
        for st in statuses:
            if st.get("error"):
                raise RuntimeError(f"{st['shard']} failed: {st['error']}")
        self._last_total = merge_status(statuses)
        return self.detector.observe(statuses)

    def request_stop(self) -> None:
        """Ask :meth:`wait` to stop at its next poll (safe from a signal handler)."""
        self._stop_requested = True

    def wait(self, progress: Any = None, timeout_s: float | None = None) -> dict[str, Any]:
        """Monitor until the crawl is proven finished, stopped, or ``timeout_s`` passes."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        finished = False
        while not self._stop_requested:
            done = self.poll()
            if progress is not None:
                progress.update(self._last_total)
            if done:
                finished = True
                break
            if deadline is not None and time.monotonic() > deadline:
                break
            time.sleep(self.poll_interval_s)
        return self.stop(finished=finished)

    def stop(self, *, finished: bool = False) -> dict[str, Any]:
        """Stop every shard (rows and bodies flushed), write stats.json, release the actors."""
        import ray

        if self.final is not None:
            return self.final
        elapsed = time.monotonic() - (self.started_at or time.monotonic())
        finals = ray.get([s.stop.remote() for s in self.shards.values()], timeout=60)
        ray.get(self.content_actor.save.remote(), timeout=60)
        seen_stats = ray.get([a.stats.remote() for a in self.seen_actors])
        ray.get([a.close.remote() for a in self.seen_actors], timeout=60)
        content_stats = ray.get(self.content_actor.stats.remote())
        total = merge_status(finals)
        c = total["counters"]
        seen_total: dict[str, Any] = {}
        for s in seen_stats:
            for k, v in s.items():
                if isinstance(v, (int, float)):
                    seen_total[k] = seen_total.get(k, 0) + v
        self.final = {
            "finished": finished,
            "elapsed_s": round(elapsed, 3),
            "pages_per_s": round(c.get("fetched", 0) / elapsed, 2) if elapsed > 0 else None,
            "outcomes": {k: c.get(k, 0) for k in OUTCOMES},
            "requests": c.get("requests", 0),
            "robots_requests": c.get("robots_requests", 0),
            "retries": c.get("retries", 0),
            "bytes": c.get("bytes", 0),
            "duplicates": {"exact": c.get("dup_exact", 0), "near": c.get("dup_near", 0)},
            "dropped": total["dropped"],
            "queued_unfetched": total["queued"],
            "shards": len(self.shards),
            "seen_shards": len(self.seen_actors),
            "seen": seen_total,
            "content": content_stats,
            "config_fingerprint": self.cfg.fingerprint(),
            "config": to_dict(self.cfg),
        }
        self.final["resumed_urls"] = self.resumed
        self.final["mode"] = self.mode
        opts = dict(self.cfg.output.storage_options) or None
        if finished:
            self.final["compacted_rows"] = compact_pages(self.cfg.output.path, opts)
        self.final["ledger"] = ledger.for_run(self.cfg.output.path, opts, finals, seen_total, finished=finished)
        write_stats(self.cfg, self.final)
        if finished and self.record is not None:
            mark_finished(self.cfg, self.record)
        self.shutdown()
        return self.final

    def shutdown(self) -> None:
        """Kill our actors, and the embedded Ray if we started it (never other Rays)."""
        import ray

        for a in [*self.shards.values(), *self.seen_actors, self.content_actor, self.budget_actor]:
            if a is not None:
                try:
                    ray.kill(a)
                except Exception as exc:  # noqa: BLE001 - already gone is fine at shutdown
                    log.debug("kill failed: %r", exc)
        if self._owns_ray:
            ray.shutdown()
            self._owns_ray = False


def run_crawl(cfg: CrawlConfig, *, address: str | None = None, progress: bool = True, force: bool = False) -> dict[str, Any]:
    """Run a crawl to the end with progress output and Ctrl-C handling; returns stats."""
    from jobs.progress import Progress

    crawl = Crawl(cfg, address=address, force=force)
    prog = Progress(enabled=progress, interval_s=cfg.runtime.progress_interval_s)
    previous = signal.getsignal(signal.SIGINT)

    def on_sigint(signum, frame):  # noqa: ARG001
        if crawl._stop_requested:  # second Ctrl-C: give up at once
            raise KeyboardInterrupt
        print("\nstopping: flushing what was fetched (Ctrl-C again to abort)...", file=sys.stderr)
        crawl.request_stop()

    try:
        signal.signal(signal.SIGINT, on_sigint)
    except ValueError:  # not the main thread (e.g. a notebook): no handler
        previous = None
    try:
        crawl.start()
        if crawl.mode == "finished":
            print(f"the crawl in {cfg.output.path} is already finished; nothing to do", file=sys.stderr)
            return crawl.final or {}
        if crawl.mode == "resume":
            print(f"resuming the unfinished crawl in {cfg.output.path} ({crawl.resumed} URLs queued)", file=sys.stderr)
        return crawl.wait(prog)
    finally:
        prog.close()
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        if crawl.final is None:
            crawl.shutdown()


def build_arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m jobs.crawl", description="Run a crawl on Ray.")
    p.add_argument("config", help="YAML crawl config (see configs/default.yaml)")
    p.add_argument("--out", help="output folder or fsspec URL (overrides output.path)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help="override a setting, e.g. --set limits.max_pages=100")
    p.add_argument("--address", help="Ray cluster address (default: RAY_ADDRESS, else embedded Ray)")
    p.add_argument("--no-progress", action="store_true", help="plain periodic log lines instead of a live line")
    p.add_argument("--force", action="store_true", help="start over in an output folder that holds a crawl of another config")
    return p


def load_config(path: str | None, out: str | None, overrides: Sequence[str]) -> CrawlConfig:
    """Load a config and apply ``--out`` / ``--set``; validates the seeds at once."""
    ov = list(overrides)
    if out:
        ov.append(f"output.path={out}")
    cfg = config_mod.load(path, ov)
    cfg.all_seeds()  # a malformed seed fails the run now, before any actor starts
    return cfg


def main(argv: Sequence[str] | None = None) -> int:
    args = build_arg_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        cfg = load_config(args.config, args.out, args.overrides)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        stats = run_crawl(cfg, address=args.address, progress=not args.no_progress, force=args.force)
    except OutputExistsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not stats.get("already_finished"):
        print_summary(stats, cfg.output.path)
    return 0 if stats.get("finished") else 130


def print_summary(stats: dict[str, Any], out: str, stream=None) -> None:
    """The end-of-crawl summary (what the demo prints)."""
    stream = stream or sys.stdout
    o = stats["outcomes"]
    state = "finished" if stats.get("finished") else "stopped"
    print(f"crawl {state} in {stats['elapsed_s']:.1f}s: {o['fetched']} pages fetched ({stats['pages_per_s']} pages/s)", file=stream)
    print("outcomes: " + ", ".join(f"{k} {v}" for k, v in o.items()), file=stream)
    print(
        f"requests {stats['requests']} (robots.txt {stats['robots_requests']}), retries {stats['retries']}, "
        f"duplicates exact {stats['duplicates']['exact']} near {stats['duplicates']['near']}, "
        f"queued unfetched {stats['queued_unfetched']}, shards {stats['shards']}",
        file=stream,
    )
    if stats.get("dropped"):
        print("links not followed: " + ", ".join(f"{k} {v}" for k, v in sorted(stats["dropped"].items())), file=stream)
    if stats.get("ledger"):
        print(ledger.describe(stats["ledger"]), file=stream)
    print(f"output: {out}/pages (Parquet), {out}/blobs, {out}/stats.json", file=stream)


if __name__ == "__main__":
    sys.exit(main())
