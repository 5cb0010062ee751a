"""What the two durable exact stores cost per URL, and what batching buys them.

Every URL a crawl admits goes into two SQLite stores on the shard's disk: the seen set's
exact store (crawler.seen.store.DiskStore, one 8-byte key per URL) and the owning shard's
frontier store (crawler.frontier.store.FrontierStore: the row, a unique index on its
64-bit hash, an index on its public url_hash and one on (host, state, id)). Both keys
are hashes, so consecutive inserts land on unrelated B-tree pages, and a commit in WAL
mode writes every page it dirtied. The cost per URL therefore depends on how many URLs
share a commit (a batch): this measures it, CPU time, in one process, no network:

* ``frontier``: FrontierStore.add of ``--urls`` bench-like URLs in batches of each
  ``--batches`` size, followed by claiming a quarter of each batch (what fetching does),
  µs per URL in all and in COMMIT alone;
* ``seen``: SeenSet.check_and_add_hashes on calls of 500 hashes (30% new, the rest
  repeats of earlier ones), the in-memory exact store vs the SQLite one, µs per check.

    python -m benchmarks.durablestores [--urls 200000] [--json benchmarks/results/durablestores.json]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from typing import Any

from benchmarks import common


def frontier_cost(urls: list[str], batch: int) -> dict[str, float]:
    """µs per URL of FrontierStore.add (+ claims) at one batch size, and of its commits."""
    from crawler.frontier.store import FrontierStore
    from crawler.frontier.urlitem import UrlItem

    items = [UrlItem(u, 1, None, host=u.split("/")[2]) for u in urls]
    with tempfile.TemporaryDirectory() as tmp:
        store = FrontierStore(os.path.join(tmp, "frontier.sqlite"))
        table = store._t  # noqa: SLF001 - the benchmark times COMMIT alone
        end, spent = table.end, [0.0]

        def timed_end() -> None:
            t = time.process_time()
            end()
            spent[0] += time.process_time() - t

        table.end = timed_end  # type: ignore[method-assign]
        t0 = time.process_time()
        for i in range(0, len(items), batch):
            store.add(items[i : i + batch])
            store.claim([it.url for it in items[i : i + batch : 4]])
        total = time.process_time() - t0
        store.close()
    n = len(items)
    return {"batch": batch, "us_per_url": round(1e6 * total / n, 1), "commit_us_per_url": round(1e6 * spent[0] / n, 1),
            "commits": -(-n // batch) * 2}


def seen_cost(n_keys: int, seed: int = 2) -> dict[str, float]:
    """µs per check of the seen set with the in-memory and the SQLite exact store."""
    from crawler.seen import SeenSet

    rng = random.Random(seed)
    universe = [rng.getrandbits(64) for _ in range(n_keys)]
    calls, pos = [], 0
    while pos < len(universe):
        batch = []
        for _ in range(500):
            if pos < len(universe) and (pos < 500 or rng.random() < 0.3):
                batch.append(universe[pos])
                pos += 1
            else:
                batch.append(universe[rng.randrange(pos)])
        calls.append(batch)
    out: dict[str, float] = {}
    checks = sum(map(len, calls))
    for name in ("memory", "sqlite"):
        with tempfile.TemporaryDirectory() as tmp:
            kw = {"path": os.path.join(tmp, "seen.sqlite")} if name == "sqlite" else {}
            s = SeenSet(10_000_000, 0.01, **kw)
            t0 = time.process_time()
            for b in calls:
                s.check_and_add_hashes(b)
            out[f"{name}_us_per_check"] = round(1e6 * (time.process_time() - t0) / checks, 2)
            s.close()
    out["checks"] = checks
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="durable exact stores: CPU per URL by batch size")
    p.add_argument("--urls", type=int, default=200_000)
    p.add_argument("--batches", default="100,400,1600,6400")
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    try:
        batches = [int(x) for x in a.batches.split(",")]
    except ValueError:
        p.error(f"--batches {a.batches!r}: write batch sizes as integers, e.g. 100,400,1600")
    if a.urls < 1 or any(b < 1 for b in batches):
        p.error("--urls and every --batches size must be >= 1")
    rng = random.Random(1)
    urls = [f"http://h{rng.randrange(4000):04d}.bench.test:18080/p/{i}" for i in range(a.urls)]
    frontier = []
    for b in batches:
        frontier.append(frontier_cost(urls, b))
        print(f"[durablestores] frontier batch {b}: {frontier[-1]}", file=sys.stderr, flush=True)
    seen = seen_cost(a.urls)
    print(f"[durablestores] seen: {seen}", file=sys.stderr, flush=True)
    result: dict[str, Any] = {"benchmark": "durablestores", "urls": a.urls, "frontier": frontier, "seen": seen,
                              "machine": common.machine_info()}
    common.write_json(a.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
