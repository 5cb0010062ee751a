"""Region-aware placement against one region, same cluster, same web, same run (issue 21).

Three raylets on loopback (tests/integration/local_cluster.py): an unlabelled head for the
services, and workers labelled ``eu-west`` and ``us-east`` whose connections leave from
127.0.0.2 and 127.0.0.3. The region web (crawler.testing.regionweb) answers a host's home
region at once and the other region ``CROSS_S`` late. Two crawls, one after the other:

* ``regions``: ``runtime.regions: [eu-west, us-east]``, hosts placed by measurement;
* ``one_region``: the same cluster and config with the rule ``*.test: eu-west``: every
  host fetched from eu-west, as a crawler that does not know about regions would.

Figures from the web server's own log: pages per second, mean time to an answer per
host, and the time until the distant (us-east) hosts were finished; the share of each
host's requests sent from its home region.

    python -m benchmarks.regions --json benchmarks/results/regions.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from crawler.testing.regionweb import RegionWeb, region_report
from crawler.testing.server import WebServer
from tests.integration.cluster_client import ROOT, LocalCluster, _env

REGIONS = ["eu-west", "us-east"]
INTERVAL_S = 0.25
CROSS_S = 0.6
GOAL_SPEEDUP = 1.5
GOAL_HOME_SHARE = 0.9


def crawl(cluster: LocalCluster, tmp: Path, name: str, rules: dict[str, str], hosts: int, pages: int) -> dict:
    web = RegionWeb(tuple(REGIONS), hosts_per_region=hosts, pages_per_host=pages, cross_delay_s=CROSS_S)
    with WebServer(web) as server:
        raw = {
            "seeds": web.seeds(), "scope": "any", "politeness": {"interval_s": INTERVAL_S},
            "sitemaps": {"enabled": False},
            "fetch": {"resolve": {"*.test": server.host}, "timeout_s": 5.0, "connect_timeout_s": 5.0},
            "runtime": {"shards": 1, "seen_shards": 1, "regions": REGIONS, "driver_timeout_s": 5.0},
            "placement": {"rules": rules},
            "output": {"path": str(tmp / name), "row_flush_interval_s": 0.2},
        }
        cfgfile = tmp / f"{name}.yaml"
        cfgfile.write_text(yaml.safe_dump(raw))
        run = subprocess.run([sys.executable, "-m", "jobs.crawl", str(cfgfile), "--address", cluster.address,
                              "--no-progress"], capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=900)
        if run.returncode != 0:
            raise SystemExit(f"{name}: the crawl failed: {run.stderr[-2000:]}")
        reqs = server.requests()
        report = region_report(server)
    start = min(r.start for r in reqs)
    pages = [r for r in reqs if r.path_qs != "/robots.txt"]
    distant = [r for r in reqs if web.home_of(r.host) == "us-east"]
    lat = [h["mean_latency_s"] for h in report["hosts"].values() if h["mean_latency_s"] is not None]
    return {
        "pages": len(pages),
        "requests": len(reqs),
        "elapsed_s": round(max(r.end for r in reqs) - start, 3),
        "pages_per_s": round(len(pages) / (max(r.end for r in reqs) - start), 3),
        "mean_latency_per_host_s": round(sum(lat) / len(lat), 4),
        "distant_hosts_done_s": round(max(r.end for r in distant) - start, 3),
        "min_home_share": report["min_home_share"],
        "hosts": report["hosts"],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts-per-region", type=int, default=3)
    ap.add_argument("--pages-per-host", type=int, default=15)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    runs = {}
    with tempfile.TemporaryDirectory(prefix="regions-bench-") as tmpdir:
        tmp = Path(tmpdir)
        cluster = LocalCluster()
        try:
            cluster.add_worker(str(tmp / "eu-disk"), region="eu-west", source="127.0.0.2")
            cluster.add_worker(str(tmp / "us-disk"), region="us-east", source="127.0.0.3")
            for name, rules in (("regions", {}), ("one_region", {"*.test": "eu-west"})):
                runs[name] = crawl(cluster, tmp, name, rules, args.hosts_per_region, args.pages_per_host)
        finally:
            cluster.close()
    speedup = runs["one_region"]["distant_hosts_done_s"] / runs["regions"]["distant_hosts_done_s"]
    out = {
        "hosts_per_region": args.hosts_per_region, "pages_per_host": args.pages_per_host,
        "interval_s": INTERVAL_S, "cross_delay_s": CROSS_S,
        "goals": {"distant_speedup": GOAL_SPEEDUP, "min_home_share": GOAL_HOME_SHARE},
        "runs": runs,
        "distant_speedup": round(speedup, 3),
        "goals_met": {"distant_speedup": speedup >= GOAL_SPEEDUP,
                      "min_home_share": (runs["regions"]["min_home_share"] or 0) >= GOAL_HOME_SHARE},
    }
    text = json.dumps(out, indent=2, sort_keys=True)
    if args.json:
        Path(args.json).write_text(text + "\n")
    print(json.dumps({k: v for k, v in out.items() if k != "runs"}, sort_keys=True))
    for name, r in runs.items():
        print(name, {k: v for k, v in r.items() if k != "hosts"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
