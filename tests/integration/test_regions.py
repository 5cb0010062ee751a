"""Several regions on one Ray cluster, over loopback (issue 21).

Three raylets on 127.0.0.1 (tests/integration/local_cluster.py): an unlabelled head for
the services, and two workers labelled ``region=eu-west`` and ``region=us-east`` whose
connections leave from 127.0.0.2 and 127.0.0.3 (``RAYCRAWL_SOURCE_ADDRESS``). The region
test web (crawler.testing.regionweb) answers a host's home region at once and the other
one 600 ms late. One crawl with ``runtime.regions: [eu-west, us-east]``, one shard per
region, and an operator rule that places one eu-west host in us-east:

* every other host is fetched from its home region, found by measuring (the first
  contact times robots.txt from both regions; a us-east host then moves there);
* the ruled host is fetched from us-east only (a rule is not measured);
* one request in flight per host and the interval, at the server; every page once;
* a balanced ledger, as ``crawl stats --json`` reads it.

The move of a host in the middle of its crawl, and a move a crash interrupted, are
tested on the mock clock (tests/unit/test_handover.py).
"""

from __future__ import annotations

import json
import subprocess
import sys

import yaml

from crawler import config
from crawler.testing.regionweb import RegionWeb, region_report
from crawler.testing.server import WebServer

from tests.integration import checks
from tests.integration.cluster_client import ROOT, LocalCluster, _env

REGIONS = ["eu-west", "us-east"]
INTERVAL = 0.25


def test_each_host_is_fetched_from_its_home_region_and_a_rule_overrides(tmp_path):
    web = RegionWeb(tuple(REGIONS), hosts_per_region=2, pages_per_host=6, cross_delay_s=0.6)
    ruled = web.hosts_in("eu-west")[1]
    with WebServer(web) as server:
        raw = {
            "seeds": web.seeds(), "scope": "any", "user_agent": "raycrawl-test/1.0",
            "politeness": {"interval_s": INTERVAL},
            "sitemaps": {"enabled": False},
            "fetch": {"resolve": {"*.test": server.host}, "timeout_s": 5.0, "connect_timeout_s": 5.0},
            "runtime": {"shards": 1, "seen_shards": 1, "regions": REGIONS, "driver_timeout_s": 5.0},
            "placement": {"rules": {ruled: "us-east"}},
            "output": {"path": str(tmp_path / "out"), "row_flush_interval_s": 0.2},
        }
        cfgfile = tmp_path / "c.yaml"
        cfgfile.write_text(yaml.safe_dump(raw))
        cfg = config.from_dict(raw)
        cluster = LocalCluster()
        try:
            cluster.add_worker(str(tmp_path / "eu-disk"), region="eu-west", source="127.0.0.2")
            cluster.add_worker(str(tmp_path / "us-disk"), region="us-east", source="127.0.0.3")
            run = subprocess.run(
                [sys.executable, "-m", "jobs.crawl", str(cfgfile), "--address", cluster.address, "--no-progress"],
                capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=300,
            )
            assert run.returncode == 0, run.stderr[-3000:]
        finally:
            cluster.close()
        report = region_report(server)
        checks.check_exactly_once(server, cfg)
        checks.check_never_requested(server)
        checks.check_politeness(server, cfg)

    for host, seen in report["hosts"].items():
        by_region = seen["by_region"]
        if host == ruled:
            assert set(by_region) == {"us-east"}, f"the ruled host was fetched from {by_region}"
            continue
        # Every page from home; the other region sent only its one timing probe.
        other = next(r for r in REGIONS if r != seen["home"])
        assert by_region.get(other, 0) <= 1 and set(by_region) <= set(REGIONS), (host, seen)
        assert by_region[seen["home"]] >= len(web.paths()), (host, seen)
    stats = json.loads(subprocess.run([sys.executable, "-m", "jobs.cli", "stats", str(tmp_path / "out"), "--json"],
                                      capture_output=True, text=True, cwd=ROOT, env=_env(), check=True).stdout)
    assert stats["ledger"]["balanced"], stats["ledger"]
    checks.check_ledger(json.loads((tmp_path / "out" / "stats.json").read_text()))
    regions = stats["run"]["regions"]
    assert regions["moves"] == len(web.hosts_in("us-east")) and regions["measured"] == len(web.hosts()) - 1, regions
