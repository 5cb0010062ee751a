"""What the URL ledger's audit of the seen marks costs at the end of a finished crawl.

crawler.session.ledgeraudit.audit_marks walks every seen set's exact store and every
shard's frontier store in key order, a page per store at a time, merged in windows: each
admitted URL is read twice (its mark, its holder), each store once by its own index. This
builds ``--urls`` bench-like URLs into 2 frontier stores and 2 seen sets (as a 2-shard
crawl leaves them), then runs the audit ``--repeat`` times in one process: CPU and wall
time per admitted URL, and the peak of Python and numpy memory during the audit
(tracemalloc; SQLite's own page caches are bounded by configuration and not counted).

    python -m benchmarks.ledgeraudit [--urls 1000000] [--json benchmarks/results/ledgeraudit.json]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import tempfile
import time
import tracemalloc
from typing import Any

from benchmarks import common

SHARDS = 2
SEEN_SHARDS = 2


def build(tmp: str, urls: list[str]) -> None:
    """The stores a finished 2-shard crawl of ``urls`` leaves: every URL marked and held."""
    from crawler.frontier.store import FrontierStore
    from crawler.frontier.urlitem import UrlItem
    from crawler.seen import SeenSet, shard_of, url_hash64

    stores = [FrontierStore(os.path.join(tmp, f"shard-{i}.sqlite"), durable=False) for i in range(SHARDS)]
    seen = [SeenSet(len(urls), path=os.path.join(tmp, f"seen-{i}.sqlite"), durable=False) for i in range(SEEN_SHARDS)]
    for start in range(0, len(urls), 6400):
        batch = urls[start : start + 6400]
        hashes = [url_hash64(u) for u in batch]
        for i, s in enumerate(seen):
            s.check_and_add_hashes([h for h in hashes if shard_of(h, SEEN_SHARDS) == i])
        for i, st in enumerate(stores):
            st.add([UrlItem(u, 1) for u in batch if int(u.split("/")[2][1:5]) % SHARDS == i])
    for st in stores:
        st.close()
    for s in seen:
        s.close()


def audit(tmp: str, n: int) -> dict[str, Any]:
    """One audit of the stores under ``tmp`` (opened as a stopping crawl has them)."""
    from crawler.frontier.store import FrontierStore
    from crawler.seen import SeenSet
    from crawler.session.ledgeraudit import audit_marks

    stores = [FrontierStore(os.path.join(tmp, f"shard-{i}.sqlite")) for i in range(SHARDS)]
    seen = [SeenSet(n, path=os.path.join(tmp, f"seen-{i}.sqlite")) for i in range(SEEN_SHARDS)]

    def page(read):
        async def fetch(after, limit):
            return read(after, limit)

        return fetch

    tracemalloc.start()
    cpu, wall = time.process_time(), time.monotonic()
    found = asyncio.run(audit_marks([page(s.key_page) for s in seen], [page(st.audit.keys) for st in stores]))
    cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    for st in stores:
        st.close()
    for s in seen:
        s.close()
    assert found.marks == found.held == n and found.lost == 0, found
    return {"cpu_s": round(cpu, 3), "wall_s": round(wall, 3), "cpu_us_per_url": round(1e6 * cpu / n, 3),
            "peak_python_mb": round(peak / 1e6, 1)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="the ledger's audit of the seen marks: cost per admitted URL")
    p.add_argument("--urls", type=int, default=1_000_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    if a.urls < 1 or a.repeat < 1:
        p.error("--urls and --repeat must be >= 1")
    rng = random.Random(1)
    urls = [f"http://h{rng.randrange(4000):04d}.bench.test:18080/p/{i}" for i in range(a.urls)]
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.monotonic()
        build(tmp, urls)
        print(f"[ledgeraudit] built {a.urls} URLs in {time.monotonic() - t0:.1f}s", file=sys.stderr, flush=True)
        runs = []
        for _ in range(a.repeat):
            runs.append(audit(tmp, a.urls))
            print(f"[ledgeraudit] {runs[-1]}", file=sys.stderr, flush=True)
    best = min(runs, key=lambda r: r["cpu_s"])
    result: dict[str, Any] = {"benchmark": "ledgeraudit", "urls": a.urls, "shards": SHARDS, "seen_shards": SEEN_SHARDS,
                              "runs": runs, "best": best, "load_average": os.getloadavg(), "machine": common.machine_info()}
    common.write_json(a.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
