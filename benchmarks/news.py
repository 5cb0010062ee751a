"""News by the minute on the news web (crawler.testing.newsweb): publication-to-fetch
delay, requests to hubs, feeds and sitemaps per new article, archive fetches per page.

Three crawls of the same web (four hosts, an article per 15 s on average per host,
120 archive pages per host, 1 s politeness interval), run side by side on three copies of
it (same seed, so the same publication times), one process each:

* ``news``: only ``recrawl: {enabled: true, min_interval_s: 5}`` (feeds, news sitemaps
  and hubs found by the crawler, crawler.freshness.news defaults);
* ``hubs_only``: the same with ``news.feeds`` and ``news.news_sitemaps`` off;
* ``tuned_by_hand``: the scheduler without news sources (``news.hubs``, ``feeds``,
  ``news_sitemaps`` all off) and ``initial_interval_s: 30``, ``max_interval_s: 3600``.

    python -m benchmarks.news [--duration 300] [--out benchmarks/results/news.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import subprocess
import tempfile
from pathlib import Path

from crawler.config import settings as config
from crawler.session.inprocess import local_session
from crawler.testing.newsweb import NewsWeb, news_report
from crawler.testing.server import WebServer

HERE = Path(__file__).resolve().parent
GOALS = {"delay_median_s": 7.0, "delay_p95_s": 15.0, "source_requests_per_article": 1.2, "archive_fetches_per_page": 1.2}
#: The same setups on the scheduler before crawler.freshness.newschoice (every source read
#: at the host's pace, in turn), measured on 2026-12-01 at commit 6e9bb8a: kept beside
#: the results as they were (the old policy is not in the tree to run again).
PREVIOUS = HERE / "results" / "news_round1.json"
OFF = {"hubs": False, "feeds": False, "news_sitemaps": False}
SETUPS = {
    "news": ({"enabled": True, "min_interval_s": 5}, {}),
    "hubs_only": ({"enabled": True, "min_interval_s": 5}, {"feeds": False, "news_sitemaps": False}),
    "tuned_by_hand": ({"enabled": True, "min_interval_s": 5, "initial_interval_s": 30, "max_interval_s": 3600}, OFF),
}


def run_one(name: str, duration: float, hosts: int, seed: int, mean_interval: float, results: dict) -> None:
    recrawl, news = SETUPS[name]
    web = NewsWeb(hosts, mean_interval_s=mean_interval, seed=seed, horizon_s=duration + 120)
    server = WebServer(web)  # type: ignore[arg-type]
    server.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            cfg = config.from_dict({
                "seeds": web.seeds(),
                "fetch": {"resolve": {"*.test": "127.0.0.1"}},
                "recrawl": {**recrawl, "duration_s": duration},
                "news": news,
                "output": {"path": tmp},
            })
            stats = asyncio.run(local_session(cfg).run())
        end = web.clock()
        report = news_report(server, end, settle_s=60.0)
    finally:
        server.stop()
    delay = report["delay_s"] or {}
    figures = {
        "delay_median_s": delay.get("median"),
        "delay_p95_s": delay.get("p95"),
        "source_requests_per_article": report["source_requests_per_article"],
        "archive_fetches_per_page": report["archive_fetches_per_page"],
    }
    results[name] = {
        "config": {"recrawl": recrawl, "news": news},
        "load_average": os.getloadavg(),
        **report,
        "figures": figures,
        "goals_met": {k: v is not None and v <= GOALS[k] for k, v in figures.items()},
        "crawler_news_stats": {k: v for k, v in stats["news"].items() if k != "hosts"},
        "ledger_balanced": stats["ledger"]["balanced"],
        "politeness_interval_s": cfg.politeness.interval_s,
    }


def run(duration: float, hosts: int, seed: int, mean_interval: float, only: list[str] | None = None) -> dict:
    results: dict = {}
    names = only or list(SETUPS)
    if len(names) == 1:
        run_one(names[0], duration, hosts, seed, mean_interval, results)
    else:
        # Side by side, one process each (no shared event loop or GIL between the crawls):
        # each is four hosts at one request a second, far from any limit of the machine.
        with tempfile.TemporaryDirectory() as tmp:
            procs = []
            for n in names:
                out = f"{tmp}/{n}.json"
                cmd = [sys.executable, "-m", "benchmarks.news", "--only", n, "--out", out, "--duration", str(duration),
                       "--hosts", str(hosts), "--seed", str(seed), "--mean-interval", str(mean_interval)]
                procs.append((n, out, subprocess.Popen(cmd, stdout=subprocess.DEVNULL)))
            for n, out, proc in procs:
                if proc.wait() != 0:
                    raise SystemExit(f"benchmarks.news --only {n} failed")
                results[n] = json.loads(Path(out).read_text())["runs"][n]
    out = {
        "duration_s": duration, "hosts": hosts, "seed": seed, "mean_publication_interval_s": mean_interval,
        "settle_s": 60.0, "goals": GOALS, "runs": {n: results[n] for n in names if n in results},
    }
    if not only and PREVIOUS.exists():
        old = json.loads(PREVIOUS.read_text())
        out["previous"] = {"file": str(PREVIOUS.relative_to(HERE.parent)), "measured": "2026-12-01", "commit": "6e9bb8a",
                           "figures": {n: r["figures"] for n, r in old["runs"].items()}}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--duration", type=float, default=300.0)
    p.add_argument("--hosts", type=int, default=4)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--mean-interval", type=float, default=15.0)
    p.add_argument("--only", nargs="*", choices=list(SETUPS))
    p.add_argument("--out", default=str(HERE / "results" / "news.json"))
    a = p.parse_args(argv)
    result = run(a.duration, a.hosts, a.seed, a.mean_interval, a.only)
    Path(a.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({n: r["figures"] for n, r in result["runs"].items()}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
