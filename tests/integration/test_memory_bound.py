"""Bounded memory (DESIGN.md invariant 8): the frontier spills to disk.

A web where every page links to 5,000 new URLs; the crawl fetches 200 pages and so ends
with ~1M URLs queued. It runs in a child process whose peak RSS must stay under a budget
below what holding them in memory takes: an all-in-memory frontier costs ~464 bytes per
queued URL (benchmarks/memory.py), ~440 MB here on top of a ~130 MB process, while the
spilled one keeps 4 URLs per host in memory (measured peak 220-350 MB, up to 460 MB on a
machine loaded 7x over its cores: allocator high-water marks, not queued URLs).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from crawler.testing.server import WebServer
from crawler.testing.web import Reply

from tests.integration import checks

LINKS = 5000
PAGES = 200
HOSTS = 10
BUDGET_MB = 560


class WideWeb:
    def __init__(self) -> None:
        self.port = 0

    def bind(self, port: int) -> None:
        self.port = port

    def reply(self, host: str, path_qs: str, *, attempt: int = 1, accept_gzip: bool = False) -> Reply:
        if path_qs == "/robots.txt":
            return Reply(404, (("Content-Type", "text/plain"),), b"")
        key = f"{host}{path_qs}".encode().hex()[-12:]
        links = "".join(
            f'<a href="http://w{j % HOSTS}.wide.test:{self.port}/q/{key}/{j}">x</a>' for j in range(LINKS)
        )
        return Reply(200, (("Content-Type", "text/html"),), f"<html><body>{links}</body></html>".encode())


CHILD = textwrap.dedent(
    """
    import asyncio, json, resource, sys
    from crawler import config
    from crawler.local import local_session
    cfg = config.from_dict(json.loads(sys.argv[1]))
    stats = asyncio.run(local_session(cfg, shards=1).run())
    print(json.dumps({
        "queued": stats["queued_unfetched"],
        "ledger": stats["ledger"],
        "fetched": stats["outcomes"]["fetched"],
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }))
    """
)


def test_a_million_queued_urls_stay_on_disk(tmp_path):
    server = WebServer(WideWeb())  # type: ignore[arg-type]
    server.start()
    try:
        cfg = {
            "seeds": [f"http://w{i}.wide.test:{server.port}/" for i in range(HOSTS)],
            "scope": "any",
            "limits": {"max_pages": PAGES, "max_pages_per_host": 10_000_000},
            "politeness": {"interval_s": 0.0, "respect_robots": True},
            "fetch": {"resolve": {"*.wide.test": "127.0.0.1"}},
            "dedup": {"seen_capacity": 2_000_000},
            "runtime": {"frontier_window": 4},
            "output": {"path": str(tmp_path / "out")},
        }
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, json.dumps(cfg)], capture_output=True, text=True, timeout=600
        )
    finally:
        server.stop()
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["fetched"] == PAGES
    checks.check_ledger(result)
    assert result["queued"] >= 0.9 * PAGES * LINKS
    print(result)
    assert result["peak_rss_mb"] < BUDGET_MB, result
