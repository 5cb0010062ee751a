"""Full-pipeline throughput and CPU cost, with the bare loop as the yardstick, in one run.

Phases, each against the same private nginx serving the static bench web:

1. ``bare``  - :mod:`benchmarks.bare_loop` for the same number of pages;
   ``bare2`` - the same loop in 2 processes on uvloop (``--procs 2 --uvloop``): the
   *ceiling* the pipeline's pages/s is compared with;
2. ``ray``   - :class:`jobs.crawl.Crawl` on an embedded loopback Ray (shards "auto");
3. ``local`` - :class:`crawler.session.inprocess.local_session` in one process (``--local``).

The crawler runs with everything on: robots.txt, politeness (``--interval``, 0.05 s by
default: with 4000 hosts the bound is 80,000 pages/s, far from binding), URL
normalization and trap rules, the seen set, SHA-256 + SimHash duplicate detection,
Parquet rows and gzip blobs written to a temp dir (deleted afterwards).

Each phase runs as a child process whose whole process tree is sampled every 0.5 s
(:mod:`benchmarks.common`): pages/s and CPU-ms per page are taken between the child's
"start" mark (actors up, seeds in) and its "end" mark (all output flushed); peak RSS is
the largest sum of RSS over the tree. The machine may be shared, so the ratios
crawler/bare measured in the same run are the numbers to compare. Besides pages/s over
the whole crawl, each phase has a *steady-state* rate taken from nginx's access log: page
responses between the 10th and the 90th percentile of their completion times, divided by
that window (start-up ramp and the last hosts' tail left out, the same for every phase).

    python -m benchmarks.throughput --modes bare2,ray --pages 30000   # the ceiling ratio

    python -m benchmarks.throughput                    # 100,000 pages, ray + local + bare
    python -m benchmarks.throughput --pages 20000      # quick run
    python -m benchmarks.throughput --modes ray --json benchmarks/results/throughput.json
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from typing import Any

from benchmarks import common
from benchmarks.crawlrun import crawl_config, run_crawler
from benchmarks.nginx import Nginx, read_access_log
from benchmarks.staticweb import DEFAULT_HOSTS, DEFAULT_PORT, default_dir, generate

TARGET_PAGES_PER_S = 600.0
TARGET_CPU_RATIO = 2.0


def run_bare(pages: int, *, hosts: int, port: int, timeout_s: float, procs: int = 1,
             use_uvloop: bool = False) -> dict[str, Any]:
    """The bare loop as a measured child (nginx already running)."""
    argv = [sys.executable, "-m", "benchmarks.bare_loop", "--pages", str(pages), "--hosts", str(hosts),
            "--port", str(port), "--no-nginx", "--child", "--timeout", str(timeout_s), "--procs", str(procs)]
    if use_uvloop:
        argv.append("--uvloop")
    run = common.run_measured(argv, timeout_s=timeout_s + 60, cwd=_root())
    if run.result is None:
        raise RuntimeError(f"bare loop gave no result (rc={run.returncode}):\n{run.stderr_tail}")
    s = common.summarize(run, run.result["pages"])
    s["mode"] = "bare" if procs == 1 else f"bare{procs}"
    s["procs"] = procs
    s["uvloop"] = use_uvloop
    s["requests"] = run.result["requests"]
    s["self_reported_cpu_ms_per_page"] = run.result["cpu_ms_per_page"]
    return s


def _root() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def server_view(log_path: str) -> dict[str, Any]:
    """What nginx saw: requests, statuses, and URLs requested more than once."""
    entries = read_access_log(log_path)
    ends = sorted(e.end for e in entries if e.status == 200 and not e.uri.endswith("/robots.txt"))
    steady = None
    if len(ends) >= 100:
        lo, hi = ends[len(ends) // 10], ends[(9 * len(ends)) // 10]
        if hi > lo:
            steady = round((9 * len(ends) // 10 - len(ends) // 10) / (hi - lo), 1)
    per_url = Counter((e.host, e.uri) for e in entries)
    statuses = Counter(e.status for e in entries)
    repeats = {f"{h}{u}": n for (h, u), n in per_url.items() if n > 1}
    return {
        "server_requests": len(entries),
        "steady_pages_per_s": steady,
        "server_statuses": {str(k): v for k, v in sorted(statuses.items())},
        "server_urls_requested_twice_or_more": len(repeats),
        "server_repeat_examples": dict(list(repeats.items())[:5]),
    }


def _ceiling(phases: dict[str, Any]) -> dict[str, Any] | None:
    """The bare phase to compare with: the 2-process ceiling (mean of its runs when it ran
    before and after the crawler, so load that changed in between counts for both), else
    the 1-process loop."""
    for mode in ("bare2", "bare"):
        runs = [p for k, p in phases.items() if k == mode or (k.startswith(mode + "_") and k[len(mode) + 1:].isdigit())]
        if runs:
            out = dict(runs[0])
            for key in ("pages_per_s", "steady_pages_per_s", "cpu_ms_per_page"):
                vals = [r[key] for r in runs if r.get(key)]
                out[key] = round(sum(vals) / len(vals), 3) if vals else None
                out[key + "_runs"] = vals
            return out
    return None


def parse_overrides(items: list[str]) -> dict[str, dict[str, Any]]:
    """``["runtime.batch_size=4000", ...]`` -> ``{"runtime": {"batch_size": 4000}}`` (values as YAML)."""
    import yaml

    out: dict[str, dict[str, Any]] = {}
    for item in items:
        key, eq, value = item.partition("=")
        section, dot, name = key.partition(".")
        if not (eq and dot and section and name):
            raise ValueError(f"--set {item!r}: write SECTION.KEY=VALUE, e.g. runtime.batch_size=4000")
        out.setdefault(section, {})[name] = yaml.safe_load(value)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="full-pipeline throughput vs the bare loop")
    p.add_argument("--pages", type=int, default=100_000)
    p.add_argument("--modes", default="bare2,ray,bare2", help="comma list of bare, bare2, ray, local (order kept; "
                   "a repeated bare phase is averaged)")
    p.add_argument("--interval", type=float, default=0.05, help="politeness interval_s")
    p.add_argument("--hosts", type=int, default=DEFAULT_HOSTS)
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.add_argument("--shards", default="auto", help="runtime.shards for the Ray crawl")
    p.add_argument("--timeout", type=float, default=900, help="per phase, seconds")
    p.add_argument("--nginx-workers", type=int, default=2,
                   help="nginx worker processes (one worker caps the 2-process ceiling on a busy machine)")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override a crawl setting for the crawler phases (VALUE is YAML), e.g. "
                   "runtime.link_flush_interval_s=0.25; repeatable; recorded in the result")
    p.add_argument("--json", default=None, help="also save the result here")
    a = p.parse_args(argv)
    common.exit_on_sigterm()
    try:
        overrides = parse_overrides(a.set)
    except ValueError as exc:
        p.error(str(exc))
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    web = generate(default_dir(a.hosts, a.port), hosts=a.hosts, port=a.port)
    if web["pages"] < a.pages:
        print(f"warning: the web has {web['pages']} pages < --pages {a.pages}; use more --hosts", file=sys.stderr)
    out: dict[str, Any] = {"benchmark": "throughput", "pages_target": a.pages, "interval_s": a.interval,
                           "hosts": a.hosts, "web_pages": web["pages"], "mean_page_bytes": web["mean_page_bytes"],
                           "nginx_workers": a.nginx_workers, "overrides": overrides,
                           "machine": common.machine_info(), "git": common.git_state(), "phases": {}}
    t0 = time.monotonic()
    for mode in modes:
        print(f"[throughput] phase {mode}: {a.pages} pages ...", file=sys.stderr, flush=True)
        with Nginx(web["dir"], a.port, workers=a.nginx_workers) as ngx:
            if mode == "bare":
                r = run_bare(a.pages, hosts=a.hosts, port=a.port, timeout_s=a.timeout)
            elif mode == "bareuv":  # the 1-process loop on uvloop: what uvloop alone saves
                r = run_bare(a.pages, hosts=a.hosts, port=a.port, timeout_s=a.timeout, use_uvloop=True)
                r["mode"] = "bareuv"
            elif mode == "bare2":
                r = run_bare(a.pages, hosts=a.hosts, port=a.port, timeout_s=a.timeout, procs=2, use_uvloop=True)
            else:
                shards: int | str = int(a.shards) if a.shards.isdigit() else a.shards
                cfg = crawl_config(hosts=a.hosts, port=a.port, pages=a.pages, interval=a.interval, out="unused",
                                   shards=shards, extra=overrides)
                r = run_crawler(mode, cfg, timeout_s=a.timeout)
            ngx.stop()
            r.update(server_view(ngx.access_log))
        r["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
        key = mode
        n = 2
        while key in out["phases"]:  # a repeated phase (e.g. the ceiling before and after)
            key = f"{mode}_{n}"
            n += 1
        out["phases"][key] = r
        print(f"[throughput] {mode}: {r['pages']} pages, {r['pages_per_s']} pages/s, "
              f"{r['cpu_ms_per_page']} CPU-ms/page, peak RSS {r['peak_rss_mb']} MB", file=sys.stderr, flush=True)
    bare = _ceiling(out["phases"])
    if bare is not None:
        out["ceiling"] = bare
    verdict: dict[str, Any] = {}
    for mode in ("ray", "local"):
        r = out["phases"].get(mode)
        if r is None:
            continue
        v: dict[str, Any] = {
            "pages_per_s": r["pages_per_s"],
            "meets_600_pages_per_s": bool(r["pages_per_s"] and r["pages_per_s"] >= TARGET_PAGES_PER_S),
            "cores_busy": r["cpu_cores_busy"],
            # What the crawl would reach with both cores to itself, at its measured CPU cost.
            "cpu_bound_pages_per_s_on_2_cores": round(2000.0 / r["cpu_ms_per_page"], 1) if r["cpu_ms_per_page"] else None,
        }
        if bare:
            ratio = r["cpu_ms_per_page"] / bare["cpu_ms_per_page"]
            v["cpu_per_page_ratio_vs_bare"] = round(ratio, 2)
            v["meets_cpu_ratio_2x"] = ratio <= TARGET_CPU_RATIO
            v["pages_per_s_ratio_vs_bare"] = round(r["pages_per_s"] / bare["pages_per_s"], 2)
            if r.get("steady_pages_per_s") and bare.get("steady_pages_per_s"):
                steady = r["steady_pages_per_s"] / bare["steady_pages_per_s"]
                v["steady_ratio_vs_ceiling"] = round(steady, 3)
                v["meets_half_ceiling"] = steady >= 0.5
        verdict[mode] = v
    out["verdict"] = verdict
    out["total_s"] = round(time.monotonic() - t0, 1)
    out["machine"]["load_avg_1m_end"] = round(os.getloadavg()[0], 2)
    common.write_json(a.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
