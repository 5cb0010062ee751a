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
* the moved host is fetched from us-east from the move on, and ``GET /hosts/{host}``
  says where it is, that a rule put it there, and that it moved once;
* one request in flight per host and the interval, at the server; every page once;
* a balanced ledger, as ``crawl stats --json`` reads it.

The move of a host in the middle of its crawl, and a move a crash interrupted, are
tested on the mock clock (tests/unit/test_handover.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import yaml

from crawler.config import settings as config
from crawler.testing.regionweb import RegionWeb, region_report
from crawler.testing.server import WebServer
from jobs.ctl import request

from tests.integration import checks
from tests.integration.cluster_client import ROOT, LocalCluster, _env

REGIONS = ["eu-west", "us-east"]
INTERVAL = 0.25


def _until(pred, what: str, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _pages_of(server: WebServer, host: str) -> int:
    return sum(1 for r in server.requests() if r.host == host and r.path_qs != "/robots.txt")


def test_each_host_is_fetched_from_its_home_region_and_a_rule_overrides(tmp_path):
    web = RegionWeb(tuple(REGIONS), hosts_per_region=2, pages_per_host=12, cross_delay_s=0.6)
    ruled, moved = web.hosts_in("eu-west")[1], web.hosts_in("eu-west")[0]
    with WebServer(web) as server:
        raw = {
            "seeds": web.seeds(), "scope": "any", "user_agent": "raycrawl-test/1.0",
            "politeness": {"interval_s": INTERVAL},
            "sitemaps": {"enabled": False},
            "fetch": {"resolve": {"*.test": server.host}, "timeout_s": 5.0, "connect_timeout_s": 5.0},
            "runtime": {"shards": 1, "seen_shards": 1, "regions": REGIONS, "driver_timeout_s": 5.0},
            "placement": {"rules": {ruled: "us-east"}},
            "output": {"path": str(tmp_path / "out"), "row_flush_interval_s": 0.2},
            "api": {"enabled": True, "port": 0},
        }
        cfgfile = tmp_path / "c.yaml"
        cfgfile.write_text(yaml.safe_dump(raw))
        cfg = config.from_dict(raw)
        cluster = LocalCluster()
        try:
            cluster.add_worker(str(tmp_path / "eu-disk"), region="eu-west", source="127.0.0.2")
            cluster.add_worker(str(tmp_path / "us-disk"), region="us-east", source="127.0.0.3")
            err_path = tmp_path / "crawl.err"
            with open(err_path, "w") as err:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "jobs.crawl", str(cfgfile), "--address", cluster.address, "--no-progress"],
                    stdout=subprocess.DEVNULL, stderr=err, text=True, env=_env(), cwd=ROOT,
                )
            try:
                api = _until(lambda: next((ln.split("control API: ", 1)[1].strip() for ln in err_path.read_text().splitlines()
                                           if ln.startswith("control API: ")), None), "the control API")
                # The operator moves a measured eu-west host to us-east once it has a few pages.
                _until(lambda: _pages_of(server, moved) >= 3, "three pages of the host to move")
                code, _ = request(api, "PUT", f"/hosts/{moved}:{server.port}/policy", {"region": "us-east"})
                assert code == 204
                moved_at = len(server.requests())
                code, info = request(api, "GET", f"/hosts/{moved}:{server.port}")
                placement = info["keys"][0]["placement"]
                assert (placement["region"], placement["how"], placement["moves"]) == ("us-east", "rule", 1), placement
                assert proc.wait(timeout=300) == 0, err_path.read_text()[-3000:]
            finally:
                if proc.poll() is None:
                    proc.kill()
        finally:
            cluster.close()
        report = region_report(server)
        checks.check_exactly_once(server, cfg)
        checks.check_never_requested(server)
        checks.check_politeness(server, cfg)

    after = [web.region_of_client(r.client) for r in server.requests()[moved_at:] if r.host == moved]
    assert after and set(after) == {"us-east"}, f"after the move {moved} was fetched from {set(after)}"
    for host, seen in report["hosts"].items():
        by_region = seen["by_region"]
        if host == moved:
            assert by_region["eu-west"] >= 3 + 1 and by_region["us-east"] >= 1, seen
            continue
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
    # The us-east hosts moved after measuring, the operator's host once.
    assert regions["moves"] == len(web.hosts_in("us-east")) + 1 and regions["measured"] == len(web.hosts()) - 1, regions
