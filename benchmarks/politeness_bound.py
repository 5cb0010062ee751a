"""When the per-host interval is the bottleneck: how close to the bound, and zero violations.

A web of ``--hosts`` (300) hosts with ``--pages-per-host`` (64) pages each, crawled at
``--interval`` (1.0 s): the bound on throughput is hosts / interval = 300 pages/s, and
each host needs ~64 s, so the crawl runs about a minute. Everything else is the full
pipeline (robots.txt first, Parquet + blobs), on embedded Ray by default.

Measured from nginx's access log (request start = ``$msec - $request_time``, 1 ms
resolution), not from the crawler's own counters:

* violations: consecutive request starts to one host closer than the interval (minus
  2 ms for the log's resolution). Must be 0. The smallest gap seen is reported too.
* efficiency, three ways:
  - ``whole_crawl``: pages/s over the whole crawl / bound (includes discovery ramp-up,
    robots.txt requests and the tail where the last hosts finish alone);
  - ``steady_state``: requests in the window when every host is active (from the
    last host's first request to the first host's last request) / (hosts x window /
    interval): how well the scheduler packs requests when every host has work;
  - ``per_host``: sum over hosts of (requests - 1) x interval / (last start - first
    start): the same, per host, over each host's whole active span.

    python -m benchmarks.politeness_bound
    python -m benchmarks.politeness_bound --hosts 100 --pages-per-host 30   # quick
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
from collections import defaultdict
from typing import Any

from benchmarks import common
from benchmarks.crawlrun import crawl_config, run_crawler
from benchmarks.nginx import Access, Nginx, read_access_log
from benchmarks.staticweb import default_dir, generate

TARGET_EFFICIENCY = 0.95
LOG_RESOLUTION_S = 0.002  # $msec and $request_time are both rounded to 1 ms


def analyse(entries: list[Access], hosts: int, interval: float) -> dict[str, Any]:
    """Violations and efficiency from the server's view (see the module docstring)."""
    by_host: dict[str, list[float]] = defaultdict(list)
    for e in entries:
        by_host[e.host].append(e.start)
    violations = 0
    strict_below = 0
    min_gap = float("inf")
    gaps_all: list[float] = []
    examples: list[dict[str, Any]] = []
    firsts: list[float] = []
    lasts: list[float] = []
    span_sum = 0.0
    slots_used = 0
    for host, starts in by_host.items():
        starts.sort()
        firsts.append(starts[0])
        lasts.append(starts[-1])
        for a, b in itertools.pairwise(starts):
            g = b - a
            gaps_all.append(g)
            min_gap = min(min_gap, g)
            if g < interval:
                strict_below += 1
            if g < interval - LOG_RESOLUTION_S:
                violations += 1
                if len(examples) < 5:
                    examples.append({"host": host, "gap_s": round(g, 4), "at": a})
        if len(starts) > 1:
            span_sum += starts[-1] - starts[0]
            slots_used += len(starts) - 1
    gaps_all.sort()

    def pct(q: float) -> float | None:
        return round(gaps_all[int(q * (len(gaps_all) - 1))], 4) if gaps_all else None

    t_all_active = max(firsts) if firsts else 0.0
    t_first_done = min(lasts) if lasts else 0.0
    window = t_first_done - t_all_active
    in_window = sum(1 for e in entries if t_all_active <= e.start < t_first_done)
    steady = in_window / (len(by_host) * window / interval) if window > 0 else None
    return {
        "server_requests": len(entries),
        "hosts_seen_by_server": len(by_host),
        "violations": violations,
        "gaps_below_interval_strict": strict_below,
        "min_gap_s": round(min_gap, 4) if gaps_all else None,
        "gap_p1_s": pct(0.01),
        "gap_p50_s": pct(0.5),
        "gap_p99_s": pct(0.99),
        "violation_examples": examples,
        "steady_window_s": round(window, 2),
        "steady_state_efficiency": round(steady, 4) if steady is not None else None,
        "per_host_efficiency": round(slots_used * interval / span_sum, 4) if span_sum > 0 else None,
        "server_span_s": round(max(lasts) - min(firsts), 2) if firsts else None,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="politeness-bound crawl: efficiency and violations")
    p.add_argument("--hosts", type=int, default=300)
    p.add_argument("--pages-per-host", type=int, default=64)
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--port", type=int, default=18081)
    p.add_argument("--mode", choices=("ray", "local"), default="ray")
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    common.exit_on_sigterm()
    web = generate(default_dir(a.hosts, a.port, 0, a.pages_per_host), hosts=a.hosts, port=a.port,
                   pages_per_host=a.pages_per_host)
    bound = a.hosts / a.interval
    out: dict[str, Any] = {"benchmark": "politeness_bound", "hosts": a.hosts, "pages_per_host": a.pages_per_host,
                           "web_pages": web["pages"], "interval_s": a.interval, "bound_pages_per_s": bound,
                           "mode": a.mode, "machine": common.machine_info()}
    cfg = crawl_config(hosts=a.hosts, port=a.port, pages=None, interval=a.interval, out="unused")
    with Nginx(web["dir"], a.port) as ngx:
        r = run_crawler(a.mode, cfg, timeout_s=a.timeout)
        ngx.stop()
        server = analyse(read_access_log(ngx.access_log), a.hosts, a.interval)
    out["crawl"] = r
    out["server"] = server
    whole = r["pages_per_s"] / bound
    out["verdict"] = {
        "pages_per_s": r["pages_per_s"],
        "bound_pages_per_s": bound,
        "whole_crawl_efficiency": round(whole, 4),
        "steady_state_efficiency": server["steady_state_efficiency"],
        "per_host_efficiency": server["per_host_efficiency"],
        "meets_95pct_steady": bool(server["steady_state_efficiency"] and server["steady_state_efficiency"] >= TARGET_EFFICIENCY),
        "meets_95pct_whole": whole >= TARGET_EFFICIENCY,
        "violations": server["violations"],
        "zero_violations": server["violations"] == 0,
        "cpu_ms_per_page": r["cpu_ms_per_page"],
    }
    out["machine"]["load_avg_1m_end"] = round(os.getloadavg()[0], 2)
    common.write_json(a.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
