"""A crawl of an ``s3://`` output killed on one machine resumes on another whose local state
folder is empty, from what is in OUT alone (crawler.recovery.statefiles), against moto on loopback.

Judged from the synthetic web's log: every reachable page is fetched, and none twice
beyond what was in flight (requested, or answered but not yet durable) at the kill.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid

import yaml

from crawler.testing.fixtures import crawl_config_for

from tests.integration.procs import REMOTE_UNACKED_WINDOW_S, _wait_requests, check_nothing_lost


def test_killed_s3_crawl_resumes_on_a_machine_with_empty_state(web, tmp_path, s3_server):
    endpoint, aws_env = s3_server
    out = f"s3://crawl-test/{uuid.uuid4().hex}"
    opts = {"key": "testing", "secret": "testing", "client_kwargs": {"endpoint_url": endpoint}}
    cfgfile = tmp_path / "c.yaml"
    cfgfile.write_text(yaml.safe_dump(crawl_config_for(
        web, politeness={"interval_s": 0.05},
        runtime={"shards": 2, "seen_shards": 2, "state_ship_interval_s": 0.5, "checkpoint_interval_s": 0.5},
        output={"path": out, "storage_options": opts, "row_flush_interval_s": 0.2},
    )))

    def run(machine: str) -> subprocess.Popen:
        env = dict(os.environ, **aws_env, XDG_CACHE_HOME=str(tmp_path / machine), PYTHONUNBUFFERED="1")
        return subprocess.Popen(
            [sys.executable, "-m", "jobs.cli", "run", str(cfgfile), "--local", "--no-progress"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True,
        )

    first = run("machine-a")
    try:
        _wait_requests(web, 80, timeout=180)
        os.killpg(first.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    assert list((tmp_path / "machine-a").rglob("shard-000.sqlite")), "machine A kept its state locally"
    assert not (tmp_path / "machine-b").exists()

    second = run("machine-b")  # another machine: nothing of the first one's state is here
    try:
        stdout, stderr = second.communicate(timeout=300)
    finally:
        if second.poll() is None:
            os.killpg(second.pid, signal.SIGKILL)
    assert second.returncode == 0, stderr[-3000:]
    assert "resuming the unfinished crawl" in stderr

    check_nothing_lost(web, [killed_at], window_s=REMOTE_UNACKED_WINDOW_S)

    # crawl stats reads an s3:// output (and rechecks the ledger against its rows).
    env = dict(os.environ, **aws_env)
    stats = subprocess.run([sys.executable, "-m", "jobs.cli", "stats", out, "--json"], capture_output=True, text=True, env=env, timeout=120)
    assert stats.returncode == 0, stats.stderr[-2000:]
    summary = json.loads(stats.stdout)
    assert summary["run"]["finished"] is True and summary["ledger"]["balanced"], summary.get("ledger")
    assert summary["urls"] >= len(web.web.must_fetch())
