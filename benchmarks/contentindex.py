"""Scale of the duplicate-content index: bytes per indexed page and lookups per second.

Fills a :class:`crawler.services.ContentIndexService` (in process, ``--shards`` shards:
the same code the Ray content actors run) with N distinct pages through its real
``check_and_add`` path (batches of ``--batch``), then times lookups of new pages (each a
check against every table, then an insert if original), a quarter of them near-duplicates
of indexed pages (1-3 bits flipped) so hits are exercised too. Reported per size:

* ``ram_bytes_per_page``: growth of the process's RSS over the fill, per page;
* ``array_bytes_per_page``: the index's own arrays (the stated 25 B + 16 B x tables);
* ``disk_bytes_per_page``: the shards' logs (written as entries are added, fsynced by a save);
* ``lookups_per_s`` and ``candidates_per_lookup`` (fingerprints compared per page, all
  tables together);

and, at the first size, the same for several table counts (k = 3: at least 4 tables).

    python -m benchmarks.contentindex --sizes 1000000,10000000 --json benchmarks/results/content_index.json
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
import time
from typing import Any

from crawler.clock import MockClock
from crawler.services.contentindex import ContentIndexService, shard_log


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _items(start: int, n: int, rng: random.Random) -> list[tuple[str, str, int | None]]:
    out = []
    for i in range(start, start + n):
        url = f"https://h{i % 100_000}.example.org/p/{i}"
        out.append((url, hashlib.sha256(i.to_bytes(8, "little")).hexdigest(), rng.getrandbits(64)))
    return out


def measure(pages: int, *, tables: int, shards: int, batch: int, probes: int, seed: int = 1) -> dict[str, Any]:
    """Fill an index with ``pages`` pages and time ``probes`` lookups (see the module docstring)."""
    work = tempfile.mkdtemp(prefix="rcb-cix-")
    try:
        rng = random.Random(seed)
        gc.collect()
        rss0 = _rss()
        svc = ContentIndexService(3, tables, MockClock(), path=os.path.join(work, "content"), shards=shards)
        t0 = time.perf_counter()
        kept: list[int] = []  # some indexed fingerprints to make near-duplicate probes from
        for start in range(0, pages, batch):
            items = _items(start, min(batch, pages - start), rng)
            if len(kept) < 10_000:
                kept.extend(fp for _, _, fp in items[:4] if fp is not None)
            asyncio.run(svc.check_and_add(items))
        fill_s = time.perf_counter() - t0
        st = asyncio.run(svc.stats())
        gc.collect()
        rss1 = _rss()
        before = svc.group.stats([sh.shard.stats() for sh in svc.handles])
        probe_items = []
        for j in range(probes):
            url = f"https://probe{j % 1000}.example.net/q/{j}"
            sha = hashlib.sha256(b"probe" + j.to_bytes(8, "little")).hexdigest()
            if j % 4 == 0:
                fp = kept[rng.randrange(len(kept))]
                for b in rng.sample(range(64), rng.randrange(1, 4)):
                    fp ^= 1 << b
            else:
                fp = rng.getrandbits(64)
            probe_items.append((url, sha, fp))
        t1 = time.perf_counter()
        for s in range(0, probes, batch):
            asyncio.run(svc.check_and_add(probe_items[s : s + batch]))
        look_s = time.perf_counter() - t1
        after = asyncio.run(svc.stats())
        probes_done = after["table_probes"] - before["table_probes"]
        cands = sum(sh.shard.candidates for sh in svc.handles)
        cands_before = before["candidates_checked_mean"] * before["table_probes"] / tables
        t2 = time.perf_counter()
        asyncio.run(svc.save())
        save_s = time.perf_counter() - t2
        disk = sum(os.path.getsize(shard_log(os.path.join(work, "content"), i)) for i in range(shards))
        return {
            "pages": pages,
            "tables": tables,
            "shards": shards,
            "originals": st["originals"],
            "fill_s": round(fill_s, 1),
            "inserts_per_s": round(pages / fill_s),
            "ram_bytes_per_page": round((rss1 - rss0) / pages, 1),
            "array_bytes_per_page": round(st["bytes"] / pages, 1),
            "disk_bytes_per_page": round(disk / pages, 1),
            "lookups_per_s": round(probes / look_s),
            "candidates_per_lookup": round((cands - cands_before) / (probes_done / tables), 2) if probes_done else None,
            "near_hits": after["near_dups"] - before["near_dups"],
            "probes": probes,
            "save_s": round(save_s, 2),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _child(args: list[str]) -> dict[str, Any]:
    """Run one measurement in a fresh interpreter (RSS growth must start from nothing)."""
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-m", "benchmarks.contentindex", "--one", *args], capture_output=True,
                         text=True, cwd=root, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="content index: bytes per page and lookups/s at scale")
    p.add_argument("--sizes", default="1000000,10000000")
    p.add_argument("--tables", type=int, default=4)
    p.add_argument("--sweep", default="4,5,6,8", help="table counts measured at the first size")
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--probes", type=int, default=50_000)
    p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    sizes = [int(x) for x in a.sizes.split(",") if x]
    if a.one:
        print(json.dumps(measure(sizes[0], tables=a.tables, shards=a.shards, batch=a.batch, probes=a.probes)))
        return 0
    common = ["--shards", str(a.shards), "--batch", str(a.batch), "--probes", str(a.probes)]
    t0 = time.monotonic()
    out: dict[str, Any] = {"benchmark": "content_index", "tables": a.tables, "shards": a.shards, "batch": a.batch,
                           "k": 3, "sizes": [], "tables_sweep": []}
    for n in sizes:
        r = _child(["--sizes", str(n), "--tables", str(a.tables), *common])
        print(json.dumps(r), file=sys.stderr, flush=True)
        out["sizes"].append(r)
    for t in [int(x) for x in a.sweep.split(",") if x]:
        if t == a.tables:
            continue
        r = _child(["--sizes", str(sizes[0]), "--tables", str(t), *common])
        print(json.dumps(r), file=sys.stderr, flush=True)
        out["tables_sweep"].append(r)
    out["elapsed_s"] = round(time.monotonic() - t0, 1)
    from benchmarks import common as bcommon

    bcommon.write_json(a.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
