"""Bounded memory (docs/invariants.md #8): the frontier spills to disk.

A web where every page links to 5,000 new URLs; the crawl fetches 200 pages and so ends
with ~1M URLs queued. The crawl runs in a child process that samples the frontier's own
counts at every progress poll (and once more after the run): how many URLs it has
queued, and how many of those it holds in memory (``Frontier.in_memory``). A spilling
frontier keeps at most ``frontier_window`` URLs per host in memory, plus the one URL a
host may have out (put back after its robots.txt fetch, or when the page budget runs
out): 10 hosts x (4 + 1) = 50 here, against ~1M for a frontier that stopped spilling.
The queued URLs must be in the durable store instead (the URL ledger counts them there).

Process RSS is not the measure: an all-in-memory frontier costs ~464 bytes per queued
URL (benchmarks/memory.py), ~440 MB here, while the spilled crawl's peak RSS was
measured between 220 and 460 MB depending on machine load (allocator high-water marks,
not queued URLs), so no RSS budget tells the two apart.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from crawler.testing.server import WebServer
from crawler.testing.webtypes import Reply, SmallWeb

from tests.integration import checks

LINKS = 5000
PAGES = 200
HOSTS = 10
WINDOW = 4
# Per host: the spill window, plus the one URL a host can have handed out and put back.
IN_MEMORY_BUDGET = HOSTS * (WINDOW + 1)


class WideWeb(SmallWeb):
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
    import asyncio, json, sys
    from crawler.config import settings as config
    from crawler.session.inprocess import local_session
    cfg = config.from_dict(json.loads(sys.argv[1]))
    crawl = local_session(cfg, shards=1)
    peak = {"in_memory": 0, "queued": 0, "samples": 0, "stores": 0}

    def sample(_status=None):
        shards = crawl.runtime.shards.values()
        for shard in shards:
            peak["in_memory"] = max(peak["in_memory"], shard.parts.frontier.in_memory())
            peak["queued"] = max(peak["queued"], len(shard.parts.frontier))
        peak["stores"] = sum(s.parts.store is not None for s in shards)
        peak["samples"] += 1

    crawl.on_progress = sample
    stats = asyncio.run(crawl.run())
    sample()  # the frontier as the run left it (closing does not drain it)
    print(json.dumps({
        "queued": stats["queued_unfetched"],
        "ledger": stats["ledger"],
        "fetched": stats["outcomes"]["fetched"],
        "frontier": peak,
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
            "runtime": {"frontier_window": WINDOW},
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
    queued = 0.9 * PAGES * LINKS
    frontier = result["frontier"]
    assert frontier["stores"] == 1 and frontier["samples"] > 1, frontier
    assert result["queued"] >= queued and frontier["queued"] >= queued, result
    # The queued URLs are in the shard's durable store ...
    assert result["ledger"]["queued"] >= queued, result["ledger"]
    # ... and never more than the window per host was in memory, at any sample.
    assert frontier["in_memory"] <= IN_MEMORY_BUDGET, (
        f"the frontier held {frontier['in_memory']} URLs in memory (budget {IN_MEMORY_BUDGET}) "
        f"with {frontier['queued']} queued: it did not spill"
    )
