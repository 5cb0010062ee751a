"""RAM per seen URL and per queued URL at 1M and 10M URLs (and disk bytes where on disk).

Each measurement runs in a fresh child process (so one structure's freed memory cannot
hide another's) and reports the resident-set growth (RSS after - RSS before building
the structure, divided by the URL count), the peak RSS, the structure's own
``memory_bytes()`` estimate where it has one, the bytes its files take on disk, and the
insert rate. Kinds:

* ``seen-exact-mem``  :class:`crawler.seen.SeenSet` exact, in memory (Bloom + Python set)
* ``seen-bloom``      :class:`crawler.seen.SeenSet` Bloom only (``exact=False``)
* ``seen-exact-disk`` :class:`crawler.seen.SeenSet` exact, disk-backed (``path=...``:
  SQLite store + Bloom + hot cache; what a crawl with durable state uses)
* ``frontier-mem``    :class:`crawler.frontier.frontier.Frontier`, every URL in memory
* ``frontier-spill``  :class:`crawler.frontier.store.FrontierStore` + ``Frontier(window=runtime.frontier_window)`` (default 4),
  fed the way ``ShardEngine.accept`` feeds them (store.add then push): only each
  host's first ``window`` URLs stay in memory, the rest are counted as spilled

Seen sets get distinct random 64-bit URL hashes in batches of 1000, filters sized for
the URL count at 1%. Frontiers get realistic ~60-byte URLs, 100 per host, pushed in
batches of 1000 sharing one referrer string (as links of one page do).

    python -m benchmarks.memory                      # everything at 1M and 10M
    python -m benchmarks.memory --sizes 1000000 --kinds seen-exact-disk,frontier-spill
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

KINDS = ("seen-exact-mem", "seen-bloom", "seen-exact-disk", "frontier-mem", "frontier-spill")
TARGET_SEEN_DISK_BYTES = 4.0
TARGET_QUEUED_SPILLED_BYTES = 64.0
BATCH = 1000
URLS_PER_HOST = 100


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _du(path: str) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(dirpath, f))
            except OSError:
                pass
    return total


def _measure_seen(kind: str, n: int, work: str) -> dict[str, Any]:
    import numpy as np

    from crawler.seen import SeenSet

    rng = np.random.default_rng(42)
    gc.collect()
    before = _rss()
    t0 = time.perf_counter()
    if kind == "seen-exact-mem":
        s = SeenSet(n, 0.01, exact=True)
    elif kind == "seen-bloom":
        s = SeenSet(n, 0.01, exact=False)
    else:
        s = SeenSet(n, 0.01, exact=True, path=os.path.join(work, "seen.sqlite"))
    novel = 0
    for lo in range(0, n, BATCH):
        hashes = rng.integers(0, 2**64, size=min(BATCH, n - lo), dtype=np.uint64).tolist()
        novel += sum(s.check_and_add_hashes(hashes))
    elapsed = time.perf_counter() - t0
    # A lookup phase too: repeats (all seen) as a crawl mostly sees.
    rng2 = np.random.default_rng(42)
    t1 = time.perf_counter()
    repeats = min(n, 200_000)
    for lo in range(0, repeats, BATCH):
        hashes = rng2.integers(0, 2**64, size=min(BATCH, repeats - lo), dtype=np.uint64).tolist()
        s.check_and_add_hashes(hashes)
    repeat_elapsed = time.perf_counter() - t1
    gc.collect()
    after = _rss()
    out = {
        "novel": novel,
        "insert_per_s": round(n / elapsed),
        "repeat_check_per_s": round(repeats / repeat_elapsed),
        "rss_delta_bytes": after - before,
        "estimate_bytes": s.memory_bytes(),
    }
    if hasattr(s, "close"):
        s.close()
    out["disk_bytes"] = _du(work)
    return out


def _url(h: int, i: int) -> str:
    return f"http://www.site{h}.example{h % 97}.com/section/{i % 7}/page-{i}.html"


def _measure_frontier(kind: str, n: int, work: str) -> dict[str, Any]:
    import random

    from crawler.clock import SYSTEM_CLOCK
    from crawler.frontier.frontier import Frontier, UrlItem

    class Pacer:
        def next_allowed(self, host: str) -> float:
            return 0.0

    hosts = max(1, n // URLS_PER_HOST)
    gc.collect()
    before = _rss()
    t0 = time.perf_counter()
    store = None
    if kind == "frontier-mem":
        fr = Frontier(Pacer(), SYSTEM_CLOCK, random.Random(0))
    else:
        from crawler.frontier.store import FrontierStore

        store = FrontierStore(os.path.join(work, "frontier.sqlite"))
        from crawler.config.settings import RuntimeConfig

        fr = Frontier(Pacer(), SYSTEM_CLOCK, random.Random(0), window=RuntimeConfig().frontier_window, spill=store)
    # URL i goes to host i % hosts: batches mix hosts like a page's links do.
    for lo in range(0, n, BATCH):
        ref = _url(lo % hosts, lo) + "?ref"
        items = [UrlItem(_url(i % hosts, i), 3, ref) for i in range(lo, min(n, lo + BATCH))]
        if store is not None:
            items = store.add(items)
        fr.push(items)
    elapsed = time.perf_counter() - t0
    gc.collect()
    after = _rss()
    out: dict[str, Any] = {
        "hosts": hosts,
        "queued": len(fr),
        "in_memory": fr.in_memory() if hasattr(fr, "in_memory") else len(fr),
        "insert_per_s": round(n / elapsed),
        "rss_delta_bytes": after - before,
    }
    if store is not None:
        store.close()
    out["disk_bytes"] = _du(work)
    return out


def measure_one(kind: str, n: int) -> dict[str, Any]:
    """Build one structure with ``n`` URLs in this process and report its costs."""
    work = tempfile.mkdtemp(prefix="rcb-mem-")
    try:
        if kind.startswith("seen"):
            r = _measure_seen(kind, n, work)
        else:
            r = _measure_frontier(kind, n, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    r.update({
        "kind": kind,
        "urls": n,
        "ram_bytes_per_url": round(r["rss_delta_bytes"] / n, 2),
        "disk_bytes_per_url": round(r["disk_bytes"] / n, 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    })
    if "estimate_bytes" in r:
        r["estimate_bytes_per_url"] = round(r["estimate_bytes"] / n, 2)
    return r


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="RAM per seen / queued URL")
    p.add_argument("--sizes", default="1000000,10000000")
    p.add_argument("--kinds", default=",".join(KINDS))
    p.add_argument("--timeout", type=float, default=900, help="per measurement, seconds")
    p.add_argument("--one", nargs=2, metavar=("KIND", "N"), help=argparse.SUPPRESS)
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    if a.one:
        print(json.dumps(measure_one(a.one[0], int(a.one[1]))))
        return 0
    from benchmarks import common

    common.exit_on_sigterm()
    rows: list[dict[str, Any]] = []
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for n in [int(x) for x in a.sizes.split(",")]:
        for kind in [k.strip() for k in a.kinds.split(",") if k.strip()]:
            if kind not in KINDS:
                raise SystemExit(f"unknown kind {kind!r}; one of {', '.join(KINDS)}")
            print(f"[memory] {kind} x {n:,} ...", file=sys.stderr, flush=True)
            t0 = time.monotonic()
            try:
                proc = subprocess.run([sys.executable, "-m", "benchmarks.memory", "--one", kind, str(n)],
                                      capture_output=True, text=True, timeout=a.timeout, cwd=root, check=False)
                if proc.returncode != 0:
                    rows.append({"kind": kind, "urls": n, "error": proc.stderr.strip().splitlines()[-1:]})
                    continue
                r = json.loads(proc.stdout.strip().splitlines()[-1])
            except subprocess.TimeoutExpired:
                rows.append({"kind": kind, "urls": n, "error": f"timeout after {a.timeout}s"})
                continue
            r["wall_s"] = round(time.monotonic() - t0, 1)
            rows.append(r)
            print(f"[memory] {kind} x {n:,}: {r['ram_bytes_per_url']} B/URL RAM, "
                  f"{r['disk_bytes_per_url']} B/URL disk", file=sys.stderr, flush=True)
    verdict: dict[str, Any] = {}
    for r in rows:
        if r.get("error"):
            continue
        if r["kind"] == "seen-exact-disk":
            verdict[f"seen_exact_disk_{r['urls']}"] = {
                "ram_bytes_per_url": r["ram_bytes_per_url"], "meets_4_bytes": r["ram_bytes_per_url"] <= TARGET_SEEN_DISK_BYTES}
        if r["kind"] == "frontier-spill":
            verdict[f"frontier_spill_{r['urls']}"] = {
                "ram_bytes_per_url": r["ram_bytes_per_url"],
                "meets_64_bytes": r["ram_bytes_per_url"] <= TARGET_QUEUED_SPILLED_BYTES}
    common.write_json(a.json, {"benchmark": "memory", "machine": common.machine_info(), "results": rows, "verdict": verdict})
    return 0


if __name__ == "__main__":
    sys.exit(main())
