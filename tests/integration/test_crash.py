"""Nothing acked is lost (docs/invariants.md #6): crashed actors and a killed job resume.

Asserted from the synthetic web's own log: every reachable allowed page is fetched, a
page is fetched again only if it was in flight (fetched but not yet acked) at the
crash, politeness holds across the restart, and the output is whole and de-duplicated.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager

import pyarrow.parquet as pq
import yaml

from crawler.config import settings as config
from crawler.output import BlobStore, read_pages
from crawler.testing.fixtures import crawl_config_for
from jobs.crawl import Crawl

from tests.integration import checks
from tests.integration.procs import _kill_leftovers, _spawn, _wait_requests, check_nothing_lost

#: Seed of the point where the whole job is killed (set CRASH_SEED to replay or explore others).
CRASH_SEED = int(os.environ.get("CRASH_SEED", "20240105"))


def _check_output_whole(out):
    for f in (out / "pages").glob("*.parquet"):
        pq.read_table(f)  # every file readable
    # The files themselves (not just a de-duplicating reader) hold each fetched page once.
    rows = read_pages(str(out), dedupe=False).to_pylist()
    fetched = [(r["url"], r["content_sha256"]) for r in rows if r["outcome"] == "fetched"]
    assert len(fetched) == len(set(fetched)), "duplicate (url, content_sha256) fetched rows"
    blobs = BlobStore(str(out))
    for r in rows:
        if r["blob_key"]:
            blobs.get(r["blob_key"])  # every referenced body exists, is whole and matches its hash
    return rows


def test_killed_shard_and_seen_actor_are_restarted_and_lose_nothing(ray_cluster, web, tmp_path):
    out = tmp_path / "out"
    cfg = config.from_dict(
        crawl_config_for(
            web,
            politeness={"interval_s": 0.05},
            runtime={"shards": 3, "seen_shards": 2},
            output={"path": str(out), "row_flush_interval_s": 0.2},
        )
    )
    crawl = Crawl(cfg, poll_interval_s=0.05).start()
    import ray

    _wait_requests(web, 40)
    kills = [time.monotonic()]
    ray.kill(crawl.session.runtime.shards["shard-001"], no_restart=False)
    _wait_requests(web, 90)
    ray.kill(crawl.session.runtime.seen_actors[0], no_restart=False)
    stats = crawl.wait(timeout_s=240)
    assert stats["finished"] is True
    checks.check_ledger(stats)

    check_nothing_lost(web, kills)
    checks.check_politeness(web, cfg)
    rows = _check_output_whole(out)
    assert {r["url"] for r in rows} >= web.web.must_fetch()


@contextmanager
def _noted(note):
    """Prefix ``note`` to any assertion failing inside (the crash seed, so it can be replayed)."""
    try:
        yield
    except AssertionError as exc:
        raise AssertionError(f"{note}: {exc}") from exc


def test_sigkill_of_the_whole_job_then_resume(web, tmp_path):
    out = tmp_path / "out"
    cfgfile = tmp_path / "c.yaml"
    cfgfile.write_text(yaml.safe_dump(crawl_config_for(
        web, politeness={"interval_s": 0.1}, runtime={"shards": 2, "seen_shards": 1},
        output={"path": str(out), "row_flush_interval_s": 0.2},
    )))
    # A random point in the crawl, once it is well under way; seeded so a failure can be
    # replayed (CRASH_SEED=<seed>), and named in every assertion below.
    crash_after = random.Random(CRASH_SEED).randint(40, 120)
    where = f"crash seed {CRASH_SEED} (job killed after {crash_after} requests)"
    with _noted(where):
        ray_tmp = tempfile.mkdtemp(prefix="rayk-", dir="/tmp")
        proc = _spawn(cfgfile, ray_tmp)
        try:
            _wait_requests(web, crash_after, timeout=180)
            # The whole job at once: the driver's process group, then every process of its
            # Ray (workers run in their own sessions). The crash is complete when they are gone.
            os.killpg(proc.pid, signal.SIGKILL)
            _kill_leftovers(ray_tmp)
            kills = [time.monotonic()]
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
            _kill_leftovers(ray_tmp)
        time.sleep(0.5)
        before = len(web.requests())
        rec = json.loads((out / "state" / "crawl.json").read_text())
        assert rec["finished"] is False

        ray_tmp2 = tempfile.mkdtemp(prefix="rayk-", dir="/tmp")
        proc = _spawn(cfgfile, ray_tmp2)
        try:
            stdout, stderr = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            _kill_leftovers(ray_tmp2)
        assert proc.returncode == 0, stderr[-3000:]
        assert "resuming the unfinished crawl" in stderr
        assert len(web.requests()) > before

        check_nothing_lost(web, kills)
        rows = _check_output_whole(out)
        assert {r["url"] for r in rows} >= web.web.must_fetch()
        assert json.loads((out / "state" / "crawl.json").read_text())["finished"] is True
        checks.check_ledger(json.loads((out / "stats.json").read_text()))

        # Run again on the finished crawl: it says so and exits 0 without a request.
        n = len(web.requests())
        done = subprocess.run(
            [sys.executable, "-m", "jobs.cli", "run", str(cfgfile), "--no-progress"],
            capture_output=True, text=True, timeout=120,
            env=dict(os.environ, RAY_USAGE_STATS_ENABLED="0", RAY_TMPDIR=tempfile.mkdtemp(prefix="rayk-", dir="/tmp")),
        )
        assert done.returncode == 0 and "already finished" in done.stderr
        assert len(web.requests()) == n


def test_a_different_config_on_an_existing_output_is_refused(web, tmp_path):
    from jobs import cli

    out = tmp_path / "out"
    a = tmp_path / "a.yaml"
    a.write_text(yaml.safe_dump(crawl_config_for(web, output={"path": str(out)})))
    assert cli.main(["run", str(a), "--local", "--no-progress"]) == 0
    b = tmp_path / "b.yaml"
    b.write_text(yaml.safe_dump(crawl_config_for(web, output={"path": str(out)}, limits={"max_pages": 7})))
    assert cli.main(["run", str(b), "--local", "--no-progress"]) == 2
    assert cli.main(["run", str(b), "--local", "--no-progress", "--force"]) == 0
