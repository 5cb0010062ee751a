"""One crawl per output (docs/invariants.md #9), judged from the server's log.

A job killed with SIGKILL leaves its shard actors running for a moment (they live in
Ray's worker processes, outside the killed process group). Restarted at once on the same
output, the new run must not crawl beside them: no page is requested twice beyond what
was in flight at the kill, and no request of the old run starts after the new run's
first request. A second run on an output whose lease is live is refused outright.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import yaml

from crawler.config import settings as config
from crawler.testing.fixtures import crawl_config_for

from tests.integration import checks
from tests.integration.procs import _kill_leftovers, _spawn, _wait_requests, check_nothing_lost, processes


def _shard_workers(marker: str) -> list[int]:
    """PIDs of HostShard actor processes of the Ray whose temp dir is ``marker``."""
    return [pid for pid, cmd, env in processes() if cmd.startswith(b"ray::HostShard") and marker.encode() in env]


def _epoch(out) -> int:
    try:
        return json.loads((out / "state" / "lease.json").read_text())["epoch"]
    except (OSError, ValueError):
        return 0


def test_sigkill_then_immediate_restart_never_crawls_beside_the_old_run(web, tmp_path):
    out = tmp_path / "out"
    cfgfile = tmp_path / "c.yaml"
    cfgfile.write_text(yaml.safe_dump(crawl_config_for(
        web, politeness={"interval_s": 0.05}, runtime={"shards": 2, "seen_shards": 1},
        output={"path": str(out), "row_flush_interval_s": 0.2},
    )))
    old_tmp = tempfile.mkdtemp(prefix="rayl-", dir="/tmp")
    new_tmp = tempfile.mkdtemp(prefix="rayl-", dir="/tmp")
    old = _spawn(cfgfile, old_tmp)
    new = None
    try:
        _wait_requests(web, 60, timeout=180)
        assert _shard_workers(old_tmp), "the old run's shard actors were not found"
        # Only the job's process group: its actors run on, as after a real driver crash.
        os.killpg(old.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        new = _spawn(cfgfile, new_tmp)  # at once, on the same output
        old_gone_at = epoch2_at = None
        while new.poll() is None:
            now = time.monotonic()
            if old_gone_at is None and not _shard_workers(old_tmp):
                old_gone_at = now
            if epoch2_at is None and _epoch(out) >= 2:
                epoch2_at = now
            time.sleep(0.05)
        stdout, stderr = new.communicate()
    finally:
        for p in (old, new):
            if p is not None and p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
        _kill_leftovers(old_tmp)
        _kill_leftovers(new_tmp)
    assert new.returncode == 0, stderr[-3000:]
    assert epoch2_at is not None, "the new run never took the lease"
    log = sorted(web.requests(), key=lambda r: r.start)
    new_first = min(r.start for r in log if r.start > epoch2_at)
    # The old run's shards were gone before the new run's first request: no request of the
    # old run can start after it.
    assert old_gone_at is not None and old_gone_at <= new_first, (old_gone_at, new_first)
    # No page requested twice beyond those in flight (requested, not yet acked) at the kill.
    # The old run's shards outlive its driver until their watchdog closes the gate
    # (runtime.driver_timeout_s without a beat) or Ray reaps them, whichever is first; what
    # they fetch meanwhile may not become durable, so it counts as in flight at the kill.
    check_nothing_lost(web, [killed_at], after_s=config.load(cfgfile).runtime.driver_timeout_s + 0.5)
    checks.check_ledger(json.loads((out / "stats.json").read_text()))


def test_a_second_run_on_a_leased_output_is_refused_with_exit_2(web, tmp_path):
    out = tmp_path / "out"
    cfgfile = tmp_path / "c.yaml"
    cfgfile.write_text(yaml.safe_dump(crawl_config_for(
        web, politeness={"interval_s": 0.5, "max_interval_s": 2.0}, output={"path": str(out)},
    )))
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    cmd = [sys.executable, "-m", "jobs.cli", "run", str(cfgfile), "--local", "--no-progress"]
    first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        _wait_requests(web, 5, timeout=60)
        n = len(web.requests())
        second = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
        assert second.returncode == 2, second.stderr
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1 and "in use by crawl run" in lines[0] and f"pid {first.pid}" in lines[0], lines
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 130
    assert len(web.requests()) >= n  # the first run went on; the second sent nothing of its own
    # A clean stop releases the lease: the next run starts at once and resumes.
    third = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env)
    assert third.returncode == 0, third.stderr[-2000:]
    assert "resuming the unfinished crawl" in third.stderr
