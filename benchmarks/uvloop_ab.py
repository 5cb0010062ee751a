"""What uvloop saves: the bare fetch + parse loop on asyncio's loop and on uvloop, A/B.

One process runs :func:`benchmarks.bare_loop.crawl` (the same seeds, the same page count)
alternately on a fresh asyncio loop and a fresh uvloop loop, ``--rounds`` times each, and
takes the process's own CPU time (user + system) per page of every run: interleaving
the two in one process cancels most of the drift a shared machine adds, and the medians
and ranges are reported. nginx serves the bench web as for the other benchmarks.

    python -m benchmarks.uvloop_ab --pages 3000 --rounds 6 --json benchmarks/results/uvloop.json
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import sys
import time
from typing import Any

import uvloop

from benchmarks import common
from benchmarks.bare_loop import crawl
from benchmarks.nginx import Nginx
from benchmarks.staticweb import DEFAULT_HOSTS, DEFAULT_PORT, default_dir, generate, seeds


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def one(loop_factory: Any, urls: list[str], pages: int) -> dict[str, float]:
    """One crawl on a fresh loop from ``loop_factory``: pages, CPU-ms per page, wall s."""
    c0, t0 = _cpu(), time.monotonic()
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        c = runner.run(crawl(urls, pages))
    cpu, wall = _cpu() - c0, time.monotonic() - t0
    return {"pages": c["pages"], "cpu_ms_per_page": 1000 * cpu / max(1, c["pages"]), "wall_s": wall}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="bare loop on asyncio vs uvloop, alternating in one process")
    p.add_argument("--pages", type=int, default=3000)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--hosts", type=int, default=DEFAULT_HOSTS)
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    web = generate(default_dir(a.hosts, a.port), hosts=a.hosts, port=a.port)
    urls = seeds(a.hosts, a.port)
    runs: dict[str, list[dict[str, float]]] = {"asyncio": [], "uvloop": []}
    with Nginx(web["dir"], a.port, access_log=False, workers=2):
        for _ in range(a.rounds):
            runs["asyncio"].append(one(asyncio.new_event_loop, urls, a.pages))
            runs["uvloop"].append(one(uvloop.new_event_loop, urls, a.pages))
    summary = {}
    for name, rs in runs.items():
        vals = [r["cpu_ms_per_page"] for r in rs]
        summary[name] = {"median_cpu_ms_per_page": round(statistics.median(vals), 4),
                         "min": round(min(vals), 4), "max": round(max(vals), 4)}
    saving = 1 - summary["uvloop"]["median_cpu_ms_per_page"] / summary["asyncio"]["median_cpu_ms_per_page"]
    out = {"benchmark": "uvloop_ab", "pages": a.pages, "rounds": a.rounds, "runs": runs, "summary": summary,
           "uvloop_saving": round(saving, 4), "machine": common.machine_info()}
    out["machine"]["load_avg_1m_end"] = round(__import__("os").getloadavg()[0], 2)
    common.write_json(a.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
