"""Recrawl on the freshness web (crawler.testing.freshweb): fetches per page per kind, the
share of 304s among refetches, and how soon a page that changes every 3 s is picked up.

    python -m benchmarks.freshness [--duration 60] [--out benchmarks/results/freshness.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path

from crawler.config import settings as config
from crawler.session.inprocess import local_session
from crawler.testing.freshweb import FreshWeb, freshness_report
from crawler.testing.server import WebServer

HERE = Path(__file__).resolve().parent
RECRAWL = {"enabled": True, "min_interval_s": 0.5, "initial_interval_s": 1.0, "max_interval_s": 4.0,
           "grow_factor": 2.0, "shrink_factor": 0.5, "refresh_share": 0.5}


def run(duration: float, period: float) -> dict:
    server = WebServer(FreshWeb(period_s=period))  # type: ignore[arg-type]
    server.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            cfg = config.from_dict({
                "seeds": server.web.seeds(), "scope": "host", "politeness": {"interval_s": 0.05},
                "fetch": {"resolve": {"*.test": "127.0.0.1"}},
                "recrawl": {**RECRAWL, "duration_s": duration}, "output": {"path": tmp},
            })
            stats = asyncio.run(local_session(cfg).run())
        report = freshness_report(server)
    finally:
        server.stop()
    return {
        "duration_s": duration, "change_period_s": period, "recrawl": RECRAWL, **report,
        "refresh": stats["refresh"], "ledger_balanced": stats["ledger"]["balanced"],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--duration", type=float, default=60.0)
    p.add_argument("--period", type=float, default=3.0)
    p.add_argument("--out", default=str(HERE / "results" / "freshness.json"))
    a = p.parse_args(argv)
    result = run(a.duration, a.period)
    Path(a.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
