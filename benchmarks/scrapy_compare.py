"""The crawler against Scrapy on the same static web, same politeness, same page count.

Scrapy (``pip install scrapy``; a benchmark-only tool, not a project dependency) runs
``benchmarks/scrapy_spider.py`` with ``scrapy runspider`` in a child process:
ROBOTSTXT_OBEY, CONCURRENT_REQUESTS_PER_DOMAIN=1, DOWNLOAD_DELAY = our interval (not
randomized), CONCURRENT_REQUESTS high, breadth-first queues, AutoThrottle and the HTTP
cache off, cookies off, LOG_LEVEL WARNING. The crawler then crawls the same web with
the same interval and page count (full pipeline: it also stores Parquet rows and gzip
bodies, which Scrapy does not). Both are measured the same way (process-tree CPU and
RSS, pages/s between start and end marks; :mod:`benchmarks.common`).

    python -m benchmarks.scrapy_compare --pages 20000
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from typing import Any

from benchmarks import common
from benchmarks.crawlrun import USER_AGENT, crawl_config, run_crawler
from benchmarks.nginx import Nginx
from benchmarks.staticweb import (
    DEFAULT_HOSTS,
    DEFAULT_PORT,
    default_dir,
    generate,
    seeds,
)

TARGET_SPEEDUP = 10.0


def scrapy_settings(interval: float, concurrency: int) -> dict[str, Any]:
    return {
        "ROBOTSTXT_OBEY": True,
        "CONCURRENT_REQUESTS": concurrency,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 1,
        "DOWNLOAD_DELAY": interval,
        "DOWNLOAD_DELAY_JITTER": 0,
        "AUTOTHROTTLE_ENABLED": False,
        "HTTPCACHE_ENABLED": False,
        "COOKIES_ENABLED": False,
        "TELNETCONSOLE_ENABLED": False,
        "LOG_LEVEL": "WARNING",
        "USER_AGENT": USER_AGENT,
        "TWISTED_DNS_RESOLVER": "benchmarks.scrapy_spider.LoopbackResolver",
        # Breadth-first, as the Scrapy FAQ recommends for broad crawls.
        "DEPTH_PRIORITY": 1,
        "SCHEDULER_DISK_QUEUE": "scrapy.squeues.PickleFifoDiskQueue",
        "SCHEDULER_MEMORY_QUEUE": "scrapy.squeues.FifoMemoryQueue",
        "DOWNLOAD_TIMEOUT": 10,
        "RETRY_TIMES": 2,
    }


def run_scrapy(pages: int, *, hosts: int, port: int, interval: float, concurrency: int,
               timeout_s: float) -> dict[str, Any]:
    exe = shutil.which("scrapy")
    if exe is None:
        raise SystemExit("scrapy is not installed: pip install scrapy (benchmark-only dependency)")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    argv = [exe, "runspider", os.path.join(root, "benchmarks", "scrapy_spider.py"),
            "-a", "seeds=" + ",".join(seeds(hosts, port)), "-a", f"pages={pages}", "-a", "child=1"]
    for k, v in scrapy_settings(interval, concurrency).items():
        argv += ["-s", f"{k}={v}"]
    env = {"PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    run = common.run_measured(argv, timeout_s=timeout_s, env=env, cwd=root)
    if run.result is None:
        raise RuntimeError(f"scrapy did not reach {pages} pages (rc={run.returncode}):\n{run.stderr_tail}")
    s = common.summarize(run, run.result["pages"])
    s["mode"] = "scrapy"
    return s


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="crawler vs Scrapy, same web, interval and page count")
    p.add_argument("--pages", type=int, default=20000)
    p.add_argument("--interval", type=float, default=0.05)
    p.add_argument("--hosts", type=int, default=DEFAULT_HOSTS)
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.add_argument("--concurrency", type=int, default=256, help="Scrapy CONCURRENT_REQUESTS (crawler: max_in_flight 256 per shard)")
    p.add_argument("--crawler-mode", choices=("ray", "local"), default="ray")
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    common.exit_on_sigterm()
    web = generate(default_dir(a.hosts, a.port), hosts=a.hosts, port=a.port)
    out: dict[str, Any] = {"benchmark": "scrapy_compare", "pages": a.pages, "interval_s": a.interval,
                           "hosts": a.hosts, "machine": common.machine_info()}
    with Nginx(web["dir"], a.port, access_log=False):
        print("[scrapy_compare] scrapy ...", file=sys.stderr, flush=True)
        out["scrapy"] = run_scrapy(a.pages, hosts=a.hosts, port=a.port, interval=a.interval,
                                   concurrency=a.concurrency, timeout_s=a.timeout)
        print(f"[scrapy_compare] scrapy: {out['scrapy']['pages_per_s']} pages/s", file=sys.stderr, flush=True)
        print(f"[scrapy_compare] crawler ({a.crawler_mode}) ...", file=sys.stderr, flush=True)
        cfg = crawl_config(hosts=a.hosts, port=a.port, pages=a.pages, interval=a.interval, out="unused")
        out["crawler"] = run_crawler(a.crawler_mode, cfg, timeout_s=a.timeout)
        print(f"[scrapy_compare] crawler: {out['crawler']['pages_per_s']} pages/s", file=sys.stderr, flush=True)
    s, c = out["scrapy"], out["crawler"]
    speedup = c["pages_per_s"] / s["pages_per_s"]
    out["verdict"] = {
        "crawler_pages_per_s": c["pages_per_s"],
        "scrapy_pages_per_s": s["pages_per_s"],
        "speedup": round(speedup, 2),
        "meets_10x": speedup >= TARGET_SPEEDUP,
        "crawler_cpu_ms_per_page": c["cpu_ms_per_page"],
        "scrapy_cpu_ms_per_page": s["cpu_ms_per_page"],
        "cpu_per_page_ratio_crawler_over_scrapy": round(c["cpu_ms_per_page"] / s["cpu_ms_per_page"], 2),
        "crawler_peak_rss_mb": c["peak_rss_mb"],
        "scrapy_peak_rss_mb": s["peak_rss_mb"],
    }
    out["machine"]["load_avg_1m_end"] = round(os.getloadavg()[0], 2)
    common.write_json(a.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
