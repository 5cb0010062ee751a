"""Kill -9 and restart at once, and traps as the last work: measured at the server.

Two scenarios from issue "Never wrong under pressure", run against any checkout of this
project (``--repo``, default: this one) so a before/after pair is measured in the same run:

* ``kill``: a crawl of the synthetic web (``demo`` profile, Ray, 2 shards) is SIGKILLed
  (its whole process group, not its Ray workers) once it has made ``--kill-at`` requests,
  and the same command starts again at once on the same output. Reported: pages
  requested twice (retries of failing URLs aside), how many of them were first fetched
  outside the kill's durability window, and whether the two runs overlapped.
* ``traps``: a small site and a session-id trap (crawler.testing.trapweb) crawled once
  (``--local``) with ``max_pages_per_host`` 1,000, so the trap is the last work;
  reported: seconds from the last request to the normal site to the end of the crawl,
  and requests to the trap.

    python -m benchmarks.restart [--repo PATH] [--out benchmarks/results/restart.json]

Results are appended to the JSON file under the label ``--label``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import yaml

from crawler.testing.fixtures import crawl_config_for, running_web
from tests.integration.procs import processes

HERE = Path(__file__).resolve().parent
TRAP_BUDGET = 1000  # limits.max_pages_per_host in the traps scenario


def _spawn(repo: str, cfgfile: Path, ray_tmp: str, *extra: str) -> subprocess.Popen:
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", RAY_TMPDIR=ray_tmp, PYTHONPATH=repo)
    return subprocess.Popen(
        [sys.executable, "-m", "jobs.cli", "run", str(cfgfile), "--no-progress", *extra],
        cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True,
    )


def _kill_tree(marker: str) -> None:
    """SIGKILL every process whose environment names ``marker`` (the run's Ray temp dir)."""
    for pid, _, env in processes():
        if marker.encode() in env:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue  # it exited meanwhile


def _shard_workers(marker: str) -> list[int]:
    """PIDs of the HostShard actor processes of the Ray whose temp dir is ``marker``."""
    return [pid for pid, cmd, env in processes() if cmd.startswith(b"ray::HostShard") and marker.encode() in env]


def kill_restart(repo: str, kill_at: int) -> dict:
    """Kill the job's process group (Ray's workers may outlive it), restart at once.

    Pages requested twice are split by when their first request was made: in the
    durability window of the kill (from ``output.row_flush_interval_s`` before it to the
    moment the old run's shard processes were gone: fetched, row not yet durable), or
    outside it (work that was durable and got redone: none may be). ``runs_overlap_s`` is
    how long the old run's shard processes lived on after the new run's had started (a
    run crawling beside its successor when > 0).
    """
    with running_web(seed=0, profile="demo") as server, tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        cfgfile = tmp_path / "c.yaml"
        cfg = crawl_config_for(server, runtime={"shards": 2, "seen_shards": 1}, output={"path": str(tmp_path / "out")})
        cfg["politeness"]["interval_s"] = 0.05
        cfgfile.write_text(yaml.safe_dump(cfg))
        flush_s = float(cfg.get("output", {}).get("row_flush_interval_s", 1.0))
        old_tmp, new_tmp = tempfile.mkdtemp(prefix="rayb-"), tempfile.mkdtemp(prefix="rayb-")
        old = _spawn(repo, cfgfile, old_tmp)
        old_gone = new_up = None
        try:
            while len(server.requests()) < kill_at:
                if old.poll() is not None:
                    raise RuntimeError(old.stderr.read()[-2000:])
                time.sleep(0.02)
            os.killpg(old.pid, signal.SIGKILL)
            killed = time.monotonic()
            new = _spawn(repo, cfgfile, new_tmp)
            while new.poll() is None:
                if old_gone is None and not _shard_workers(old_tmp):
                    old_gone = time.monotonic()
                if new_up is None and _shard_workers(new_tmp):
                    new_up = time.monotonic()
                time.sleep(0.05)
            _, err = new.communicate(timeout=600)
        finally:
            _kill_tree(old_tmp)
            _kill_tree(new_tmp)
        old_gone = old_gone if old_gone is not None else time.monotonic()
        log = sorted(server.requests(), key=lambda r: r.start)
        pages = [r for r in log if not r.path_qs.endswith("robots.txt")]
        first: dict[str, tuple[float, float]] = {}
        counts: Counter = Counter()
        for r in pages:
            u = server.web.url(r.host, r.path_qs)
            counts[u] += 1
            first.setdefault(u, (r.start, r.end))
        failing = set(server.web.failure_urls())
        twice = sorted(u for u, n in counts.items() if n > 1 and u not in failing)
        outside = [u for u in twice if not (first[u][1] >= killed - flush_s - 0.5 and first[u][0] <= old_gone)]
        return {
            "requests": len(pages),
            "pages": len(counts),
            "requested_twice": len(twice),
            "requested_twice_outside_durability_window": len(outside),
            "old_shards_gone_after_kill_s": round(old_gone - killed, 2),
            "new_shards_up_after_kill_s": round(new_up - killed, 2) if new_up is not None else None,
            "runs_overlap_s": round(max(0.0, old_gone - new_up), 2) if new_up is not None else None,
            "row_flush_interval_s": flush_s,
            "new_run_exit": new.returncode,
            "new_run_error": err.strip().splitlines()[-1] if new.returncode else None,
        }


def traps_last(repo: str) -> dict:
    """The trap web of tests/integration/test_traps_last.py, with the default trap rules
    and a per-host budget of 1,000: how long the crawl runs after the normal site is done."""
    from crawler.testing.server import WebServer
    from crawler.testing.trapweb import TrapWeb

    server = WebServer(TrapWeb())  # type: ignore[arg-type]
    server.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            tmp_path = Path(tmp)
            web = server.web
            cfgfile = tmp_path / "c.yaml"
            cfgfile.write_text(yaml.safe_dump({
                "seeds": [web.url("normal.test"), web.url("trap.test", "/list?sid=1")], "scope": "host",
                "politeness": {"interval_s": 0.05}, "limits": {"max_pages_per_host": TRAP_BUDGET},
                "fetch": {"resolve": {"*.test": "127.0.0.1"}}, "output": {"path": str(tmp_path / "out")},
            }))
            t0 = time.monotonic()
            proc = _spawn(repo, cfgfile, tempfile.mkdtemp(prefix="rayb-"), "--local")
            _, err = proc.communicate(timeout=1800)
            end = time.monotonic()
            if proc.returncode != 0:
                raise RuntimeError(f"the crawl failed: {err[-2000:]}")
        log = sorted(server.requests(), key=lambda r: r.start)
    finally:
        server.stop()
    normal_end = max(r.end for r in log if r.host.startswith("normal."))
    return {
        "crawl_s": round(end - t0, 1),
        "after_last_normal_host_s": round(end - normal_end, 1),
        "trap_requests": sum(1 for r in log if r.host.startswith("trap.")),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--repo", default=str(HERE.parent), help="checkout whose crawler is measured")
    p.add_argument("--label", default="this checkout")
    p.add_argument("--kill-at", type=int, default=800, help="requests before the kill")
    p.add_argument("--only", choices=("kill", "traps"))
    p.add_argument("--out", default=str(HERE / "results" / "restart.json"))
    a = p.parse_args(argv)
    result: dict = {"label": a.label, "repo_commit": subprocess.run(
        ["git", "-C", a.repo, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()}
    if a.only in (None, "kill"):
        result["kill_restart"] = kill_restart(a.repo, a.kill_at)
    if a.only in (None, "traps"):
        result["traps_last"] = traps_last(a.repo)
    path = Path(a.out)
    runs = json.loads(path.read_text()) if path.exists() else []
    runs.append(result)
    path.write_text(json.dumps(runs, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
