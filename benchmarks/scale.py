"""Scale: one shard's stores driven the way the engine drives them, window by window.

Issue 33, item 4. Each structure runs in its own child process (so ``/proc/self/io``
``write_bytes`` and RSS are its own) over the same synthetic crawl: URLs on 500,000
hosts with 30-80 character paths, pages of ``--links`` (40) checked links of which
~40% were already seen. Per window of ``--window`` URLs *held* (distinct URLs admitted)
each child reports CPU and wall microseconds per URL, disk bytes written per URL (from
``write_bytes``), RSS and structure-specific figures:

* ``bloom``: the seen set's Bloom stage alone (crawler.seen.scalable.ScalableBloom,
  rbloom, ``--error-rate`` 1%, initial capacity ``--initial`` = the default
  ``dedup.seen_capacity`` 1M split over 16 seen shards), per checked link
  (``url_hash64`` + ``check_and_add``); at each window end the false-positive rate
  *measured* on ``--probes`` known-new URLs (``contains``, nothing added) against the
  configured rate and the chain's own estimate, its stages and bytes per URL.
* ``seen``: the whole seen set in exact disk mode (crawler.seen.set.SeenSet with a path:
  Bloom chain, hot cache, SQLite exact store; durable as shipped), one
  ``check_and_add_hashes`` call per page's links.
* ``frontier``: crawler.frontier.store.FrontierStore as the engine uses it: ``add`` of a
  page's new links, ``claim`` of them, ``record`` of their outcome rows (ack), per
  admitted URL.
* ``content``: the content index (crawler.services.contentindex.ContentIndexService, one
  shard, with its log) checking and adding each fetched page (sha256, simhash), in
  batches of 16 pages; reports the index's array bytes and candidates per lookup.

``--cold`` (the SQLite structures): at each window end the database files are fsynced and
dropped from the page cache (``posix_fadvise(DONTNEED)``), and the next ``--cold-urls``
URLs are timed apart: ``cold_over_warm`` is their cost per URL over the window's.

Not driven: the state log (its bytes depend on the object-store segment encoding, not
this shard's stores). Sizes are arguments: the Bloom stage is cheap enough for 50M URLs
on the project machine; the SQLite structures cost ~100x more per URL and are run as far
as a run allows (the results say how far).

    python -m benchmarks.scale --bloom-urls 50000000 --store-urls 2000000 --json benchmarks/results/scale.json
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

HOSTS = 500_000
SEEN_SHARE = 0.4  # of checked links, already seen
_PAD = "".join(random.Random(33).choice("abcdefghijklmnopqrstuvwxyz0123456789-_/") for _ in range(256))

# The design's per-shard budget (README): 16 shards at 400 pages/s x 40 links.
CHECKS_PER_S = 1_000
ADMISSIONS_PER_S = 400


def url(i: int) -> str:
    """The i-th distinct URL of the crawl: one of 500,000 hosts, a 30-80 character path."""
    host = (i * 2_654_435_761) % HOSTS
    n = 30 + (i * 7_919) % 51
    head = f"/{i:x}/"
    off = (i * 131) % 160
    return f"https://h{host}.example{host % 97}.com{head}{_PAD[off : off + n - len(head)]}"


def pages(held_target: int, links: int, rng: random.Random, start_held: int = 0) -> Iterator[tuple[list[int], int]]:
    """Pages of checked links as URL indices: ~60% new (the next indices), ~40% earlier
    ones (uniform over what is held). Yields (indices, held after the page)."""
    held = start_held
    while held < held_target:
        out = []
        for _ in range(links):
            if held and rng.random() < SEEN_SHARE:
                out.append(rng.randrange(held))
            else:
                out.append(held)
                held += 1
        yield out, held


class Meter:
    """CPU, wall and disk bytes written over a span of calls."""

    def __init__(self) -> None:
        self.cpu = 0.0
        self.wall = 0.0

    def __enter__(self) -> Meter:
        self._c, self._w = time.process_time(), time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cpu += time.process_time() - self._c
        self.wall += time.perf_counter() - self._w


def write_bytes() -> int:
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("write_bytes:"):
                return int(line.split()[1])
    return 0


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def evict(paths: list[str]) -> None:
    """Write back and drop files from the page cache (a store larger than RAM)."""
    for p in paths:
        try:
            fd = os.open(p, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


# --- one structure per child ------------------------------------------------------------


def run_bloom(a: argparse.Namespace) -> list[dict[str, Any]]:
    from crawler.seen.hashing import url_hash64
    from crawler.seen.scalable import ScalableBloom

    chain = ScalableBloom("rbloom", a.initial, a.error_rate)
    probes = [url_hash64(f"https://probe.example/{j}") for j in range(a.probes)]
    rows: list[dict[str, Any]] = []
    m, checks, next_edge, w0 = Meter(), 0, a.window, write_bytes()
    for idx, held in pages(a.urls, a.links, random.Random(1)):
        with m:
            for i in idx:
                chain.check_and_add(url_hash64(url(i)))
        checks += len(idx)
        if held >= next_edge or held >= a.urls:
            measured = sum(chain.contains(h) for h in probes) / len(probes)
            rows.append(_row(held, a.window, checks, m, w0, {
                "fp_measured": measured, "fp_configured": a.error_rate,
                "fp_estimated": round(chain.false_positive_rate(), 6),
                "stages": len(chain.stages), "bloom_bytes": chain.memory_bytes(),
                "bloom_bytes_per_url": round(chain.memory_bytes() / held, 3),
            }))
            m, checks, next_edge, w0 = Meter(), 0, next_edge + a.window, write_bytes()
    return rows


def run_seen(a: argparse.Namespace, work: str) -> list[dict[str, Any]]:
    from crawler.seen.hashing import url_hash64
    from crawler.seen.set import SeenSet

    path = os.path.join(work, "seen.sqlite")
    s = SeenSet(a.initial, a.error_rate, path=path)

    def step(idx: list[int]) -> None:
        s.check_and_add_hashes([url_hash64(url(i)) for i in idx])

    return _drive(a, step, [path, path + "-wal"], lambda: {
        "db_lookups": s.db_lookups, "false_positives": s.false_positives, "disk_bytes": s.disk_bytes()})


def run_frontier(a: argparse.Namespace, work: str) -> list[dict[str, Any]]:
    from crawler.frontier.store import FrontierStore
    from crawler.frontier.urlitem import UrlItem
    from crawler.output.schema import OutcomeRow

    path = os.path.join(work, "frontier.sqlite")
    store = FrontierStore(path)
    admitted = 0

    def step(idx: list[int]) -> None:
        nonlocal admitted
        fresh = sorted({i for i in idx if i >= admitted})  # what the seen set let through
        if not fresh:
            return
        admitted = max(fresh) + 1
        urls = [url(i) for i in fresh]
        store.add([UrlItem(u, 2, "https://ref.example/", host=u.split("/")[2]) for u in urls])
        store.claim(urls)
        now = time.time()
        store.record([(OutcomeRow(url=u, outcome="fetched", status=200, fetched_at=now,
                                  content_sha256=hashlib.sha256(u.encode()).hexdigest()), None) for u in urls])

    return _drive(a, step, [path, path + "-wal"], lambda: {"disk_bytes": _size(path) + _size(path + "-wal")},
                  per="admitted")


def run_content(a: argparse.Namespace, work: str) -> list[dict[str, Any]]:
    from crawler.clock import MockClock
    from crawler.services.contentindex import ContentIndexService, shard_log

    prefix = os.path.join(work, "content")
    svc = ContentIndexService(3, 4, MockClock(), path=prefix, shards=1)
    loop = asyncio.new_event_loop()  # one loop, as the service's actor has (asyncio.run per call costs ~50 us)
    rng = random.Random(5)
    admitted = 0
    buf: list[tuple[str, str, int | None]] = []

    def step(idx: list[int]) -> None:
        nonlocal admitted
        for i in idx:
            if i >= admitted:
                admitted = i + 1
                u = url(i)
                # ~5% exact duplicates of an earlier page (mirrors, print views).
                src = rng.randrange(i) if i and rng.random() < 0.05 else i
                buf.append((u, hashlib.sha256(src.to_bytes(8, "little")).hexdigest(), rng.getrandbits(64)))
        if len(buf) >= 16:
            loop.run_until_complete(svc.check_and_add(buf))
            buf.clear()

    def extra() -> dict[str, Any]:
        st = loop.run_until_complete(svc.stats())
        loop.run_until_complete(svc.save())
        return {"index_bytes": st["bytes"], "candidates_per_lookup": st.get("candidates_checked_mean"),
                "disk_bytes": _size(shard_log(prefix, 0))}

    return _drive(a, step, [], extra, per="admitted")


def _size(p: str) -> int:
    try:
        return os.path.getsize(p)
    except OSError:
        return 0


def _row(held: int, window: int, n: int, m: Meter, w0: int, extra: dict[str, Any]) -> dict[str, Any]:
    wb = write_bytes() - w0
    return {
        "held": held, "ops": n,
        "cpu_us_per_op": round(1e6 * m.cpu / max(1, n), 2), "wall_us_per_op": round(1e6 * m.wall / max(1, n), 2),
        "written_bytes_per_op": round(wb / max(1, n), 1), "rss_mb": round(rss() / 2**20, 1),
        "cpu_share_of_budget": None, **extra,
    }


def _drive(a: argparse.Namespace, step: Callable[[list[int]], None], files: list[str],
           extra: Callable[[], dict[str, Any]], per: str = "checked") -> list[dict[str, Any]]:
    """Feed pages to ``step`` window by window; ``per``: what an op is (a checked link or
    an admitted URL)."""
    rows: list[dict[str, Any]] = []
    m, ops, next_edge, w0 = Meter(), 0, a.window, write_bytes()
    cold_left, cold, cold_ops = 0, Meter(), 0
    last_row: dict[str, Any] | None = None
    prev_held = 0
    for idx, held in pages(a.urls, a.links, random.Random(1)):
        n = len(idx) if per == "checked" else held - prev_held
        prev_held = held
        if cold_left > 0:
            with cold:
                step(idx)
            cold_ops += n
            cold_left -= n
            if cold_left <= 0 and last_row is not None:
                last_row["cold_cpu_us_per_op"] = round(1e6 * cold.cpu / cold_ops, 2)
                last_row["cold_wall_us_per_op"] = round(1e6 * cold.wall / cold_ops, 2)
                last_row["cold_over_warm_cpu"] = round(last_row["cold_cpu_us_per_op"] / last_row["cpu_us_per_op"], 2)
                last_row["cold_over_warm_wall"] = round(last_row["cold_wall_us_per_op"] / last_row["wall_us_per_op"], 2)
            continue
        with m:
            step(idx)
        ops += n
        if held >= next_edge or held >= a.urls:
            last_row = _row(held, a.window, ops, m, w0, extra())
            rows.append(last_row)
            _progress(last_row)
            m, ops, next_edge = Meter(), 0, next_edge + a.window
            if a.cold and files:
                evict(files)
                cold_left, cold, cold_ops = a.cold_urls, Meter(), 0
            w0 = write_bytes()
    return rows


def _progress(row: dict[str, Any]) -> None:
    print(json.dumps(row), file=sys.stderr, flush=True)


def child(a: argparse.Namespace) -> dict[str, Any]:
    work = tempfile.mkdtemp(prefix="rcb-scale-", dir=a.tmp)
    t0 = time.perf_counter()
    try:
        if a.structure == "bloom":
            rows = run_bloom(a)
        else:
            rows = {"seen": run_seen, "frontier": run_frontier, "content": run_content}[a.structure](a, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    budget = {"bloom": CHECKS_PER_S, "seen": CHECKS_PER_S, "frontier": ADMISSIONS_PER_S, "content": ADMISSIONS_PER_S}
    for r in rows:
        r["cpu_share_of_budget"] = round(r["cpu_us_per_op"] * budget[a.structure] / 1e6, 4)
    return {"structure": a.structure, "urls": a.urls, "window": a.window, "seconds": round(time.perf_counter() - t0, 1),
            "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "ops_per_s_budget": budget[a.structure], "windows": rows}


def memory_plan(error_rate: float) -> list[dict[str, Any]]:
    """Bytes per URL of the Bloom chain from its parameter math (crawler.seen.scalable.chain_plan):
    at 10M and 100M URLs held, per initial capacity, now and at worst (just after a stage
    was added: its whole capacity is still empty). A fixed filter sized exactly would
    take ``ln(1/p) / ln^2 2`` bits (1.2 bytes at 1%)."""
    from crawler.seen.scalable import chain_plan

    rows = []
    for initial in (62_500, 1_000_000):
        for held in (10_000_000, 100_000_000):
            plan = chain_plan(initial, error_rate, held)
            total = sum(bits for _, _, bits in plan) / 8
            before = sum(bits for _, _, bits in plan[:-1]) / 8
            held_before = sum(cap for cap, _, _ in plan[:-1])
            rows.append({"initial_capacity": initial, "held": held, "stages": len(plan), "bytes": round(total),
                         "bytes_per_url": round(total / held, 3),
                         "bytes_per_url_worst": round(total / (held_before + 1), 3),
                         "bytes_per_url_best": round(before / max(1, held_before), 3) if held_before else None})
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="one shard's stores at scale, window by window (issue 33)")
    p.add_argument("--structures", default="bloom,seen,frontier,content")
    p.add_argument("--bloom-urls", type=int, default=50_000_000, help="URLs held, Bloom stage")
    p.add_argument("--store-urls", type=int, default=2_000_000, help="URLs held, SQLite structures and content index")
    p.add_argument("--bloom-window", type=int, default=1_000_000)
    p.add_argument("--store-window", type=int, default=250_000)
    p.add_argument("--links", type=int, default=40, help="checked links per page (one seen call)")
    p.add_argument("--initial", type=int, default=62_500, help="initial Bloom capacity (1M / 16 seen shards)")
    p.add_argument("--error-rate", type=float, default=0.01)
    p.add_argument("--probes", type=int, default=100_000, help="known-new URLs for the measured FP rate")
    p.add_argument("--cold", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--cold-urls", type=int, default=20_000)
    p.add_argument("--tmp", default=None, help="where the stores live (default: the system temp dir)")
    p.add_argument("--json", default=None)
    p.add_argument("--merge", action="store_true", help="keep the other structures already in --json")
    p.add_argument("--structure", help=argparse.SUPPRESS)
    p.add_argument("--urls", type=int, help=argparse.SUPPRESS)
    p.add_argument("--window", type=int, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.structure:
        print("@@RESULT " + json.dumps(child(a)), flush=True)
        return 0
    out: dict[str, Any] = {"benchmark": "scale", "links_per_page": a.links, "seen_share": SEEN_SHARE, "hosts": HOSTS,
                           "machine": {"cpus": os.cpu_count(), "loadavg_at_start": os.getloadavg()},
                           "bloom_memory_plan": memory_plan(a.error_rate), "runs": {}, "structures": {}}
    if a.merge and a.json and os.path.exists(a.json):
        with open(a.json) as f:
            old = json.load(f)
        out["structures"], out["runs"] = old.get("structures", {}), old.get("runs", {})
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for s in a.structures.split(","):
        big = s == "bloom"
        args = [sys.executable, "-m", "benchmarks.scale", "--structure", s,
                "--urls", str(a.bloom_urls if big else a.store_urls), "--window", str(a.bloom_window if big else a.store_window),
                "--links", str(a.links), "--initial", str(a.initial), "--error-rate", str(a.error_rate),
                "--probes", str(a.probes), "--cold-urls", str(a.cold_urls), "--cold" if a.cold else "--no-cold"]
        if a.tmp:
            args += ["--tmp", a.tmp]
        proc = subprocess.run(args, cwd=root, stdout=subprocess.PIPE, text=True, check=True)
        line = [ln for ln in proc.stdout.splitlines() if ln.startswith("@@RESULT ")][-1]
        out["structures"][s] = json.loads(line[len("@@RESULT "):])
        out["runs"][s] = {"argv": sys.argv[1:], "loadavg_at_end": os.getloadavg()}
        if a.json:
            with open(a.json, "w") as f:
                json.dump(out, f, indent=1)
    if not a.json:
        print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
