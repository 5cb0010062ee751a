"""Two raylets on loopback (tests/integration/local_cluster.py): the crawl spreads its
shards over both nodes, writes the same rows as on one node, and survives losing the
second node mid-crawl: its shards restart on the first and nothing is lost, as the
synthetic web's own request log and the URL ledger show.

The drivers run as `python -m jobs.crawl CONFIG --out OUT --address ADDRESS`, the way a
job runs on a cluster. Every process of the cluster is stopped by PID at the end.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from crawler.config import settings as config
from crawler.output import read_pages
from crawler.testing.fixtures import crawl_config_for

from tests.integration import checks
from tests.integration.cluster_client import ROOT, LocalCluster, _env
from tests.integration.procs import _wait_requests, check_nothing_lost

@pytest.fixture(scope="module")
def cluster():
    c = LocalCluster()
    try:
        yield c
    finally:
        c.close()


def _crawl(cluster: LocalCluster, cfgfile: Path, out: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "jobs.crawl", str(cfgfile), "--out", str(out), "--address", cluster.address, "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=ROOT, start_new_session=True,
    )


def _finish(proc: subprocess.Popen, timeout: float = 300) -> str:
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr[-3000:]
    return stdout


def _config(web, tmp_path: Path, name: str, interval: float) -> Path:
    cfgfile = tmp_path / f"{name}.yaml"
    cfgfile.write_text(yaml.safe_dump(crawl_config_for(
        web, politeness={"interval_s": interval}, runtime={"shards": 4, "seen_shards": 2},
        output={"row_flush_interval_s": 0.2},
    )))
    return cfgfile


def _rows(out: Path) -> set[tuple]:
    return {(r["url"], r["outcome"], r["status"], r["content_sha256"], r["redirect_to"])
            for r in read_pages(str(out)).to_pylist()}


def _stats(out: Path) -> dict:
    stats = json.loads((out / "stats.json").read_text())
    assert stats["finished"] is True
    checks.check_ledger(stats)
    return stats


def test_shards_spread_over_two_nodes_and_write_what_one_node_writes(cluster, web, tmp_path):
    cfgfile = _config(web, tmp_path, "spread", interval=0.05)
    cfg = config.from_dict(yaml.safe_load(cfgfile.read_text()))

    one = tmp_path / "one-node"
    _finish(_crawl(cluster, cfgfile, one))
    _stats(one)
    checks.check_all(web, config.from_dict({**yaml.safe_load(cfgfile.read_text()), "output": {"path": str(one)}}))

    cluster.add_worker()
    before = set(cluster.shards())
    web.reset()
    two = tmp_path / "two-nodes"
    _finish(_crawl(cluster, cfgfile, two))
    _stats(two)
    checks.check_all(web, config.from_dict({**yaml.safe_load(cfgfile.read_text()), "output": {"path": str(two)}}))

    placed = {name: node for name, (node, _) in cluster.shards().items() if name not in before}
    assert len(placed) == cfg.runtime.shards, placed
    assert set(placed.values()) == {cluster.head, cluster.worker}, f"shards on one node only: {placed}"
    assert _rows(two) == _rows(one)


def test_a_crawl_survives_losing_the_second_node(cluster, web, tmp_path):
    if cluster.worker is None:
        cluster.add_worker()
    cfgfile = _config(web, tmp_path, "kill", interval=0.15)
    out = tmp_path / "out"
    cfg = config.from_dict({**yaml.safe_load(cfgfile.read_text()), "output": {"path": str(out)}})
    before = set(cluster.shards())
    proc = _crawl(cluster, cfgfile, out)
    try:
        _wait_requests(web, 60, timeout=180)
        mine = {n: node for n, (node, state) in cluster.shards().items() if n not in before and state == "ALIVE"}
        on_worker = sorted(n for n, node in mine.items() if node == cluster.worker)
        assert on_worker, f"no shard on the second node: {mine}"
        served_before = len(web.requests())
        killed = cluster.ask("kill-worker")
        kills = [time.monotonic()]
        assert killed["workers"] >= len(on_worker), killed  # its shards died with the node
        stdout = _finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert len(web.requests()) > served_before, "the crawl made no progress after the node was lost"
    after = cluster.shards()  # the crawl is over: its actors are gone, each on the node it ended on
    assert all(after[n][0] == cluster.head for n in on_worker), f"shards not restarted on the first node: {after}"
    assert "crawl finished" in stdout

    # Nothing lost: every reachable page fetched, none twice unless in flight at the kill,
    # every URL a row or a counted drop.
    _stats(out)
    check_nothing_lost(web, kills)
    rows = read_pages(str(out), dedupe=False).to_pylist()
    assert {r["url"] for r in rows} >= web.web.must_fetch()
    fetched = [(r["url"], r["content_sha256"]) for r in rows if r["outcome"] == "fetched"]
    assert len(fetched) == len(set(fetched)), "a page fetched again has two rows"
    checks.check_politeness(web, cfg)
