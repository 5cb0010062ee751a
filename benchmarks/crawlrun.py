"""Run one crawl of the static bench web as a measured child process.

Parent side (:func:`run_crawler`) builds the crawl config, starts the child and samples
its process tree (with embedded Ray: the driver, gcs_server, raylet and every worker);
child side (``python -m benchmarks.crawlrun --mode ray|local --cfg FILE``) runs
:class:`jobs.crawl.Crawl` on an embedded loopback Ray, or
:func:`crawler.session.inprocess.local_session` in one process, and marks "start" (actors up,
seeds submitted) and "end" (everything flushed, before the actors are killed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Any

from benchmarks import common
from benchmarks.staticweb import DOMAIN, seeds

USER_AGENT = "raycrawl-bench/0.1 (+https://example.invalid/bot)"


def crawl_config(*, hosts: int, port: int, pages: int | None, interval: float, out: str,
                 shards: int | str = "auto", extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """A full-pipeline crawl config for the bench web (robots, politeness, dedup, storage all on)."""
    cfg: dict[str, Any] = {
        "seeds": seeds(hosts, port),
        "scope": "any",
        "user_agent": USER_AGENT,
        "limits": {"max_pages": pages, "max_depth": 64, "max_pages_per_host": 100000},
        "politeness": {"interval_s": interval, "max_interval_s": max(2.0, interval), "respect_robots": True},
        "fetch": {"resolve": {f"*.{DOMAIN}": "127.0.0.1"}, "timeout_s": 10, "connect_timeout_s": 5,
                  "attempts": 3, "backoff_s": 0.5, "max_backoff_s": 5},
        "output": {"path": out, "store_bodies": True},
        # Generous driver and lease timeouts: on a shared machine a starved driver can miss
        # the default 1.5 s of heartbeats, and the shards would stop (fenced) mid-benchmark.
        "runtime": {"shards": shards, "progress_interval_s": 5.0, "driver_timeout_s": 10.0, "lease_ttl_s": 30.0},
    }
    for section, values in (extra or {}).items():
        if isinstance(values, dict):
            cfg.setdefault(section, {}).update(values)
        else:
            cfg[section] = values
    return cfg


def run_crawler(mode: str, cfg: dict[str, Any], *, timeout_s: float, local_shards: int = 1,
                keep_output: bool = False) -> dict[str, Any]:
    """Run a crawl child and return its stats plus the measured pages/s, CPU and RSS."""
    work = tempfile.mkdtemp(prefix="rcb-crawl-")
    cfg = dict(cfg)
    cfg["output"] = {**cfg.get("output", {}), "path": os.path.join(work, "out")}
    cfg_path = os.path.join(work, "cfg.json")
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    argv = [sys.executable, "-m", "benchmarks.crawlrun", "--mode", mode, "--cfg", cfg_path,
            "--timeout", str(timeout_s), "--local-shards", str(local_shards), "--ray-tmp", os.path.join(work, "ray")]
    try:
        run = common.run_measured(argv, timeout_s=timeout_s + 120, cwd=_repo_root())
        if run.result is None:
            raise RuntimeError(f"crawl child ({mode}) gave no result (rc={run.returncode}); stderr:\n{run.stderr_tail}")
        stats = run.result["stats"]
        fetched = stats["outcomes"]["fetched"]
        summary = common.summarize(run, fetched)
        summary["mode"] = mode
        summary["stats"] = {k: stats.get(k) for k in ("finished", "elapsed_s", "pages_per_s", "outcomes", "requests",
                                                        "robots_requests", "retries", "bytes", "duplicates", "dropped",
                                                        "queued_unfetched", "shards", "seen_shards")}
        summary["startup_s"] = run.result.get("startup_s")
        summary["output_bytes"] = _du(os.path.join(work, "out"))
        return summary
    finally:
        if not keep_output:
            shutil.rmtree(work, ignore_errors=True)


def _repo_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _du(path: str) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(dirpath, f))
            except OSError:
                pass
    return total


# ----------------------------------------------------------------------------- child


def _child_ray(cfg, timeout_s: float, ray_tmp: str) -> tuple[dict[str, Any], float]:
    import ray

    from actors.rayruntime import init_ray
    from jobs.crawl import Crawl

    t0 = time.monotonic()
    os.makedirs(ray_tmp, exist_ok=True)
    init_ray(None, temp_dir=ray_tmp)  # ours: Crawl then joins it instead of starting one
    try:
        crawl = Crawl(cfg)
        crawl.start()
        startup = time.monotonic() - t0
        common.mark("start")
        runtime = crawl.session.runtime
        original_close = runtime.close

        async def close() -> None:
            # Stats written, every shard flushed and stopped: the crawl's work is done.
            # Sample before the actors are killed (their CPU would be lost with them).
            common.mark("end", sync=True)
            await original_close()

        runtime.close = close  # type: ignore[method-assign]
        stats = crawl.wait(timeout_s=timeout_s)
    finally:
        ray.shutdown()
    return stats, startup


def _child_local(cfg, timeout_s: float, shards: int) -> tuple[dict[str, Any], float]:
    from crawler.session.inprocess import local_session

    crawl = local_session(cfg, shards=shards)

    async def run() -> dict[str, Any]:
        return await asyncio.wait_for(crawl.run(), timeout_s)

    from crawler import eventloop

    common.mark("start")
    stats = eventloop.run(run())
    common.mark("end", sync=True)
    return stats, 0.0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="measured crawl child (used by the benchmarks)")
    p.add_argument("--mode", choices=("ray", "local"), required=True)
    p.add_argument("--cfg", required=True, help="JSON crawl config")
    p.add_argument("--timeout", type=float, default=900.0)
    p.add_argument("--local-shards", type=int, default=1)
    p.add_argument("--ray-tmp", default=None)
    a = p.parse_args(argv)
    common.exit_on_sigterm()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from crawler.config.settings import from_dict

    with open(a.cfg) as f:
        cfg = from_dict(json.load(f))
    if a.mode == "ray":
        stats, startup = _child_ray(cfg, a.timeout, a.ray_tmp or tempfile.mkdtemp(prefix="rcb-ray-"))
    else:
        stats, startup = _child_local(cfg, a.timeout, a.local_shards)
    stats.pop("config", None)
    common.emit_result({"stats": stats, "startup_s": round(startup, 2)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
