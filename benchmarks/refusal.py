"""Receivers that refuse for a while: pages lost to "internal error" rows, before and after issue 31.

The finding of issue 31: while a shard's driver is silent (a paused driver, a dead head
node, a lease read that fails), every shard's gate is shut and every ``accept`` raises
``FencedError``. A link router that gave up after ~9 s turned that refusal into ``failed``
rows ("internal error: DeliveryError") whose links stayed marked seen, so nothing admitted
them again, and the crawl still said "finished" (docs/invariants.md #13). Two scenarios, on
the synthetic test web (234 pages), 2 shards, local output, link flush window 1 s:

* ``local``: in one process (crawler.session.inprocess), every shard's gate shut from
  ``--closed-at`` s after the start for ``--closed-for`` s;
* ``ray``: ``crawl run`` on embedded Ray, its driver process stopped (SIGSTOP) once the
  server has answered ``--pause-at`` requests, and continued ``--pause-for`` s later
  (``runtime.lease_ttl_s`` raised to 60 s, so that the lease outlives the pause).

Reported from the web server's own log and the output: pages that must be fetched and
were not, pages fetched more than once, rows that say "internal error", whether the run
said it finished (and its exit code), and its URL ledger. ``--repo`` measures another
checkout the same way (its crawler is imported or run; this file needs nothing else of it).

    python -m benchmarks.refusal [--repo PATH] [--label L] [--only local|ray] [--out benchmarks/results/refusal.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
LEASE_TTL_S = 60.0  # ray scenario: runtime.lease_ttl_s, longer than any pause measured


class ShutFor:
    """A shard gate (crawler.engine.dispatcher.Gate) shut from ``at`` to ``at + seconds``
    after the first time it is asked (the crawl's start)."""

    def __init__(self, at: float, seconds: float) -> None:
        self.at, self.seconds = at, seconds
        self.t0: float | None = None
        self.looks = 0

    def __call__(self) -> bool:
        now = time.monotonic()
        if self.t0 is None:
            self.t0 = now
        self.looks += 1
        return not self.at <= now - self.t0 < self.at + self.seconds


def _config(server: Any, out: Path, flush_s: float) -> dict[str, Any]:
    from crawler.testing.fixtures import crawl_config_for

    raw = crawl_config_for(server, runtime={"shards": 2, "link_flush_interval_s": flush_s})
    raw["output"] = {**raw.get("output", {}), "path": str(out)}
    return raw


def _report(server: Any, out: str, stats: dict[str, Any] | None) -> dict[str, Any]:
    from crawler.output import read_pages

    counts = Counter(server.request_counts())
    must = server.web.must_fetch()
    rows = read_pages(out).to_pylist()
    ledger = (stats or {}).get("ledger") or {}
    return {
        "pages_to_fetch": len(must),
        "never_fetched": sum(1 for u in must if counts.get(u, 0) == 0),
        "fetched_twice": sum(1 for u in must if counts.get(u, 0) > 1),
        "internal_error_rows": sum(1 for r in rows if "internal error" in (r.get("error") or "")),
        "internal_errors": (stats or {}).get("internal_errors"),
        "finished": (stats or {}).get("finished"),
        "ledger_balanced": ledger.get("balanced"),
        "ledger_problems": ledger.get("problems"),
    }


def local(closed_at: float, closed_for: float, flush_s: float) -> dict[str, Any]:
    """The in-process scenario, with the crawler this interpreter imports."""
    from crawler.config import settings as config
    from crawler.session.crawlsession import CrawlSession
    from crawler.session.inprocess import LocalRuntime
    from crawler.testing.fixtures import running_web

    gate = ShutFor(closed_at, closed_for)

    class GatedRuntime(LocalRuntime):
        async def start(self, plan):  # every shard behind the same gate (one silent driver)
            await super().start(plan)
            for shard in self.shards.values():
                shard.gate = gate

    with running_web(seed=0, profile="test") as server, tempfile.TemporaryDirectory() as tmp:
        cfg = config.from_dict(_config(server, Path(tmp) / "out", flush_s))
        started = time.monotonic()
        stats = asyncio.run(CrawlSession(cfg, GatedRuntime(), shards=2).run())
        seconds = time.monotonic() - started
        result = _report(server, cfg.output.path, stats)
    return {"closed_at_s": closed_at, "closed_for_s": closed_for, "link_flush_interval_s": flush_s, **result,
            "gate_looks": gate.looks, "seconds": round(seconds, 1)}


def ray(repo: str, pause_at: int, pause_for: float, flush_s: float) -> dict[str, Any]:
    """The Ray scenario: ``crawl run`` of ``repo``, its driver stopped for ``pause_for`` s."""
    import yaml

    from crawler.testing.fixtures import running_web
    from tests.integration.procs import processes

    with running_web(seed=0, profile="test") as server, tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        cfgfile = Path(tmp) / "c.yaml"
        raw = _config(server, out, flush_s)
        # A lease that outlives the pause: the driver's silence alone shuts the shards'
        # gates (runtime.driver_timeout_s), not an expired lease (another path).
        raw["runtime"]["lease_ttl_s"] = LEASE_TTL_S
        cfgfile.write_text(yaml.safe_dump(raw))
        ray_tmp = tempfile.mkdtemp(prefix="rayr-")
        env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", RAY_TMPDIR=ray_tmp, PYTHONPATH=repo)
        cmd = [sys.executable, "-m", "jobs.cli", "run", str(cfgfile), "--no-progress"]
        log_path = Path(tmp) / "driver.log"
        with open(log_path, "w") as log:  # a file, not a pipe: a full pipe would stall the driver itself
            proc = subprocess.Popen(cmd, cwd=repo, stdout=log, stderr=subprocess.STDOUT, text=True, env=env,
                                    start_new_session=True)
            started = time.monotonic()
            try:
                while len(server.requests()) < pause_at:
                    if proc.poll() is not None:
                        raise RuntimeError(log_path.read_text()[-2000:])
                    time.sleep(0.02)
                os.kill(proc.pid, signal.SIGSTOP)  # the driver only: its shards hear nothing from it
                time.sleep(pause_for)
                os.kill(proc.pid, signal.SIGCONT)
                proc.wait(timeout=900)
            finally:
                for pid, _, penv in processes():  # this run's Ray only (its temp dir is in their environment)
                    if ray_tmp.encode() in penv:
                        try:
                            os.kill(pid, signal.SIGKILL)
                        except ProcessLookupError:
                            continue
        lines = log_path.read_text().strip().splitlines()
        shutil.rmtree(ray_tmp, ignore_errors=True)
        seconds = time.monotonic() - started
        stats_file = out / "stats.json"
        stats = json.loads(stats_file.read_text()) if stats_file.exists() else None
        result = _report(server, str(out), stats)
    return {"pause_at_requests": pause_at, "pause_for_s": pause_for, "link_flush_interval_s": flush_s, **result,
            "exit": proc.returncode, "error": lines[-1] if proc.returncode and lines else None,
            "seconds": round(seconds, 1)}


def _local_in(repo: str, a: argparse.Namespace) -> dict[str, Any]:
    """:func:`local` with ``repo``'s crawler, in a fresh interpreter."""
    env = dict(os.environ, PYTHONPATH=repo)
    args = [sys.executable, str(Path(__file__).resolve()), "--inner-local", "--closed-at", str(a.closed_at),
            "--closed-for", str(a.closed_for), "--flush", str(a.flush)]
    done = subprocess.run(args, cwd=repo, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", default=str(HERE.parent), help="checkout whose crawler is measured")
    ap.add_argument("--label", default="this checkout")
    ap.add_argument("--only", choices=("local", "ray"))
    ap.add_argument("--closed-at", type=float, default=0.7, help="local: seconds after the start when the gate shuts")
    ap.add_argument("--closed-for", type=float, default=16.0, help="local: seconds the gate stays shut")
    ap.add_argument("--pause-at", type=int, default=60, help="ray: requests answered before the driver is stopped")
    ap.add_argument("--pause-for", type=float, default=16.0, help="ray: seconds the driver stays stopped")
    ap.add_argument("--flush", type=float, default=1.0, help="runtime.link_flush_interval_s")
    ap.add_argument("--inner-local", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", help="append the result to this JSON file")
    a = ap.parse_args(argv)
    if a.inner_local:
        print(json.dumps(local(a.closed_at, a.closed_for, a.flush)))
        return 0
    repo = str(Path(a.repo).resolve())
    result: dict[str, Any] = {"label": a.label, "repo_commit": subprocess.run(
        ["git", "-C", repo, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()}
    if a.only in (None, "local"):
        result["local"] = _local_in(repo, a)
    if a.only in (None, "ray"):
        result["ray"] = ray(repo, a.pause_at, a.pause_for, a.flush)
    print(json.dumps(result, indent=2))
    if a.out:
        path = Path(a.out)
        runs = json.loads(path.read_text()) if path.exists() else []
        runs.append(result)
        path.write_text(json.dumps(runs, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
