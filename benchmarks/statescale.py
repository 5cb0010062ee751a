"""What a shard's durable state sends to the object store per minute, by the store's size.

One shard's store (crawler.frontier.store.FrontierStore) of N held URLs, its changes
journaled to a state log (crawler.recovery.statelog.StateLog) on the mock clock, driven at
a fixed rate: ``--rate`` admissions a second (the design's ~400 per shard) and ``--acks``
acked rows a second (per-URL state). Each simulated minute is one ship interval
(``runtime.state_ship_interval_s``), at which the shard considers a snapshot, as
crawler.engine.checkpoint does. Two schedules, on the same store in the same run:

* **before**: a snapshot every interval when anything changed (the rule until now), the
  whole copy taken under the store's lock in one step;
* **after**: the shipped defaults (crawler.recovery.copyschedule): a snapshot once the log
  since the last one reaches ``runtime.state_snapshot_log_ratio`` of its size, copied in
  steps (crawler.frontier.urltable.UrlTable.backup). It starts as a running shard does
  after a snapshot (the "before" phase's last one).

Reported per size: object-store bytes per minute (log segments and snapshots, measured
over the window), the amortized bytes per minute of the "after" schedule (the log's
measured rate plus each snapshot spread over the minutes the ratio gives it, computed
from the measured log rate and snapshot size, since at 10M URLs a snapshot comes hours
apart), the snapshot's wall time and the longest a store call waited during it (a probe
thread asking ``url_status`` throughout), bytes per held URL, and a restore (newest
snapshot plus the log after it, crawler.recovery.restore, replayed into the store) timed,
with its replay rate to bound the worst case (``ratio x`` the snapshot in log).

The "object store" is a folder on local disk reached through fsspec (crawler.recovery.statedir
.RemoteDir): the same calls an ``s3://`` output makes, without moto holding gigabytes in
RAM. Bytes are what the state log counts as written (crawler.recovery.statelog.StateLog.stats).

The big stores are built fast: rows made and inserted by one SQL statement per 200k
rows into the store's own schema (a recursive CTE, journal off while building), not one
admission call per URL. Their keys ``h`` and ``uh`` are random 64-bit integers, as the
URL hashes they stand for are (same sizes, same index shapes), not the hashes of the
URLs; the URLs the benchmark then admits and acks are real ones. ``--done-share`` of the
rows are acked, with per-URL state (times, interval, ETag, content hash, SimHash,
outcome), the rest queued. URLs are ``http://h<k>.example<j>.com/<30-80 hex characters>``
over up to 500,000 hosts.

    python -m benchmarks.statescale [--sizes 1000000,10000000] [--minutes 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import sqlite3
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from crawler.clock import MockClock
from crawler.config.sections import RuntimeConfig
from crawler.frontier.recrawl import Schedule
from crawler.frontier.store import FrontierStore
from crawler.frontier.urlitem import UrlItem
from crawler.output import OutcomeRow
from crawler.recovery.copyschedule import CopySchedule
from crawler.recovery.restore import restore
from crawler.recovery.statelog import RemoteDir, StateLog

HERE = Path(__file__).resolve().parent
CHUNK = 200_000
RATIOS = (0.05, 0.1, 0.25, 0.5)


def held_at(path: str) -> int:
    db = sqlite3.connect(path)
    try:
        return int(db.execute("SELECT count(*) FROM urls").fetchone()[0])
    finally:
        db.close()


def _url(rng: random.Random, hosts: int) -> tuple[str, str]:
    k = rng.randrange(hosts)
    host = f"h{k}.example{k % 97}.com"
    return f"http://{host}/{rng.getrandbits(rng.randint(120, 320)):x}", host


_BULK = """
WITH RECURSIVE c(i) AS (SELECT ? UNION ALL SELECT i + 1 FROM c WHERE i < ?),
r(i, k, d) AS (SELECT i, abs(random()) % ?, (abs(random()) % 1000) < ? FROM c)
INSERT OR IGNORE INTO urls(id, h, url, host, depth, referrer, boost, uh, state, last_crawled_at, next_crawl_at,
    interval_s, etag, content_sha, fingerprint, fetches, changes, last_outcome, last_status)
SELECT i, random(), 'http://h' || k || '.example' || (k % 97) || '.com/' || lower(hex(randomblob(15 + abs(random()) % 26))),
    'h' || k || '.example' || (k % 97) || '.com', 1, NULL, 0, random(),
    CASE WHEN d THEN 2 ELSE 0 END,
    CASE WHEN d THEN 1.7e9 + i END, CASE WHEN d THEN 1.7e9 + i + 86400.0 END, CASE WHEN d THEN 86400.0 END,
    CASE WHEN d THEN '"' || lower(hex(randomblob(6))) || '"' END, CASE WHEN d THEN lower(hex(randomblob(32))) END,
    CASE WHEN d THEN random() END, CASE WHEN d THEN 1 ELSE 0 END, 0,
    CASE WHEN d THEN 'fetched' END, CASE WHEN d THEN 200 END
FROM r
"""


def build(path: str, n: int, done_share: float) -> dict[str, Any]:
    """A store of ``n`` URLs at ``path``, inserted in bulk by SQL (module docstring)."""
    FrontierStore(path).close()  # the schema, as the store makes it
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=DELETE")
    db.execute("PRAGMA journal_mode=OFF")
    db.execute("PRAGMA synchronous=OFF")
    db.execute("PRAGMA cache_size=-1500000")
    hosts = max(1, min(500_000, n // 20))
    t0 = time.monotonic()
    for start in range(1, n + 1, CHUNK):
        db.execute("BEGIN")
        db.execute(_BULK, (start, min(n, start + CHUNK - 1), hosts, int(done_share * 1000)))
        db.execute("COMMIT")
    db.execute("PRAGMA journal_mode=WAL")
    held, done = db.execute("SELECT count(*), sum(state = 2) FROM urls").fetchone()
    db.close()
    return {"urls": held, "hosts": hosts, "done": done, "build_s": round(time.monotonic() - t0, 1),
            "bytes": os.path.getsize(path), "bytes_per_url": round(os.path.getsize(path) / held, 1)}


class Probe:
    """A thread asking the store for one URL's status over and over: the longest wait."""

    def __init__(self, store: FrontierStore, url: str) -> None:
        self.store, self.url = store, url
        self.worst = 0.0
        self.calls = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            self.store.url_status(self.url)
            self.worst = max(self.worst, time.monotonic() - t0)
            self.calls += 1
            time.sleep(0.002)

    def __enter__(self) -> "Probe":
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()


def _admissions(rng: random.Random, hosts: int, n: int) -> list[UrlItem]:
    out = []
    for _ in range(n):
        url, host = _url(rng, hosts)
        out.append(UrlItem(url, 2, "http://referrer.example.com/page", host=host))
    return out


def _acks(store: FrontierStore, n: int, after: int) -> tuple[list[tuple[OutcomeRow, Schedule | None]], int]:
    import datetime as dt

    rows = store.table.db.execute("SELECT id, url FROM urls WHERE id > ? AND state = 0 LIMIT ?", (after, n)).fetchall()
    when = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    acks: list[tuple[OutcomeRow, Schedule | None]] = [
        (OutcomeRow(url=u, depth=1, outcome="fetched", status=200, attempts=1, fetched_at=when,
                    content_sha256="ab" * 32, etag='"v1"', simhash=12345),
         Schedule(changed=None, interval_s=86400.0, next_crawl_at=1.8e9))
        for _, u in rows
    ]
    return acks, (rows[-1][0] if rows else after)


async def drive(store: FrontierStore, slog: StateLog, clock: MockClock, *, minutes: int, rate: int, acks: int,
                rng: random.Random, hosts: int, ack_after: int, stepped: bool,
                probe_url: str) -> dict[str, Any]:
    """``minutes`` ship intervals at ``rate`` admissions/s and ``acks`` acks/s; a snapshot considered each."""
    log0, snap0 = slog.bytes_written, slog.snapshot_bytes
    snap_walls: list[float] = []
    waits: list[float] = []
    tick = 0.5  # runtime.state_log_interval_s: one segment per tick
    for _ in range(minutes):
        for _ in range(int(60 / tick)):
            store.add(_admissions(rng, hosts, int(rate * tick)))
            batch, ack_after = _acks(store, int(acks * tick), ack_after)
            store.record(batch)
            clock.advance(tick)
            await slog.flush()

        def backup(dest: str) -> int:
            if not stepped:
                return store.table.backup(dest, lambda: slog.seq, step_pages=-1)  # one step: the old copy
            return store.table.backup(dest, lambda: slog.seq)

        t0 = time.monotonic()
        with Probe(store, probe_url) as probe:
            took = await slog.snapshot(backup)
        if took:
            snap_walls.append(time.monotonic() - t0)
            waits.append(probe.worst)
    return {
        "minutes": minutes,
        "log_bytes_per_min": round((slog.bytes_written - log0) / minutes),
        "snapshot_bytes_per_min": round((slog.snapshot_bytes - snap0) / minutes),
        "object_store_bytes_per_min": round((slog.bytes_written - log0 + slog.snapshot_bytes - snap0) / minutes),
        "snapshots": len(snap_walls),
        "snapshot_wall_s": [round(w, 2) for w in snap_walls],
        "longest_store_call_wait_during_snapshot_s": [round(w, 3) for w in waits],
        "ack_after": ack_after,
    }


def measure(n: int, minutes: int, rate: int, acks: int, done_share: float, tmp: str) -> dict[str, Any]:
    path = os.path.join(tmp, "shard.sqlite")
    built = build(path, n, done_share)
    print(f"built {n}: {built}", flush=True)
    remote = RemoteDir(os.path.join(tmp, "out"), None, "shard-000")
    clock = MockClock()
    rng = random.Random(7)
    hosts = built["hosts"]
    defaults = RuntimeConfig()
    first_queued = n // 2
    reader = sqlite3.connect(path)
    probe_url = reader.execute("SELECT url FROM urls WHERE id = ?", (n // 3,)).fetchone()[0]
    reader.close()

    # Before: a snapshot every interval, one step under the lock.
    old = StateLog(remote, 1, clock, interval_s=0.5, schedule=None)
    store = FrontierStore(path, journal=old.append)
    before = asyncio.run(drive(store, old, clock, minutes=minutes, rate=rate, acks=acks, rng=rng, hosts=hosts,
                               ack_after=first_queued, stepped=False, probe_url=probe_url))
    snap_size = old._snap_size
    store.close()

    # After: the shipped schedule, starting from the last snapshot above (generation 2).
    schedule = CopySchedule.of(defaults)
    new = StateLog(remote, 2, clock, interval_s=0.5, schedule=schedule, snapped=0, snap_bytes=snap_size)
    store = FrontierStore(path, journal=new.append)
    after = asyncio.run(drive(store, new, clock, minutes=minutes, rate=rate, acks=acks, rng=rng, hosts=hosts,
                              ack_after=before["ack_after"], stepped=True, probe_url=probe_url))
    # The amortized rate: after a snapshot of size S the next comes ratio x S / L minutes
    # later (L: the log's rate), when the store has grown by G a minute: L + (S + T x G) / T.
    log_rate = after["log_bytes_per_min"]
    growth = rate * 60 * snap_size / max(1, held_at(path))
    by_ratio = {}
    for r in RATIOS:
        period = r * snap_size / max(1, log_rate)
        by_ratio[str(r)] = {"snapshot_every_min": round(period, 1),
                            "object_store_bytes_per_min": round(log_rate + snap_size / period + growth),
                            "restore_log_bytes_at_most": round(r * snap_size)}
    period_min = schedule.ratio * snap_size / max(1, log_rate)
    amortized = log_rate + snap_size / period_min + growth
    held = store.table.db.execute("SELECT count(*) FROM urls").fetchone()[0]

    # Restore: the "before" phase's last snapshot and all the "after" phase's log (what
    # the schedule bounds), into a fresh file, replayed.
    local = os.path.join(tmp, "restored.sqlite")
    t0 = time.monotonic()
    found = restore(remote, local, 3)
    fetched_s = time.monotonic() - t0
    rstore = FrontierStore(local)
    t1 = time.monotonic()
    rstore.replay(found.records)
    replay_s = time.monotonic() - t1
    restored_urls = rstore.table.db.execute("SELECT count(*) FROM urls").fetchone()[0]
    rstore.close()
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(local + suffix):
            os.remove(local + suffix)
    replay_rate = found.log_bytes / replay_s if replay_s > 0 else 0.0
    worst_log = schedule.ratio * found.snapshot_bytes

    # One stepped snapshot taken now, forced, to time it and the waits it causes.
    forced = StateLog(remote, 3, clock, interval_s=0.5, schedule=None)
    store.journal = forced.append
    store.add(_admissions(rng, hosts, 1))
    t0 = time.monotonic()
    with Probe(store, probe_url) as probe:
        asyncio.run(forced.snapshot(lambda dest: store.table.backup(dest, lambda: forced.seq)))
    stepped = {"wall_s": round(time.monotonic() - t0, 2), "longest_store_call_wait_s": round(probe.worst, 3),
               "probe_calls": probe.calls}
    store.close()
    return {
        "held_urls": held,
        "store": built,
        "bytes_per_held_url": round(snap_size / held, 1),
        "snapshot_bytes": snap_size,
        "before": before,
        "after": after,
        "after_amortized": {
            "ratio": schedule.ratio,
            "snapshot_every_min": round(period_min, 1),
            "store_growth_bytes_per_min": round(growth),
            "object_store_bytes_per_min": round(amortized),
            "times_log_rate": round(amortized / max(1, log_rate), 1),
            "by_ratio": by_ratio,
        },
        "stepped_snapshot": stepped,
        "restore": {
            "urls": restored_urls, "urls_match": restored_urls == held,
            "snapshot_bytes": found.snapshot_bytes, "log_bytes": found.log_bytes, "records": len(found.records),
            "fetch_s": round(fetched_s, 2), "replay_s": round(replay_s, 2),
            "total_s": round(fetched_s + replay_s, 2),
            "replay_log_bytes_per_s": round(replay_rate),
            "worst_case_log_bytes": round(worst_log),
            "worst_case_s": round(fetched_s + (worst_log / replay_rate if replay_rate else 0.0), 1),
            "worst_case_s_by_ratio": {str(r): round(fetched_s + (r * found.snapshot_bytes / replay_rate if replay_rate else 0.0), 1)
                                      for r in RATIOS},
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1000000,10000000")
    ap.add_argument("--minutes", type=int, default=3)
    ap.add_argument("--rate", type=int, default=400, help="admissions per second per shard")
    ap.add_argument("--acks", type=int, default=25, help="acked rows per second per shard")
    ap.add_argument("--done-share", type=float, default=0.3)
    ap.add_argument("--dir", default=None, help="where the stores are built (default: a temp folder)")
    ap.add_argument("--out", default=str(HERE / "results" / "statescale.json"))
    args = ap.parse_args()
    results = []
    for n in [int(s) for s in args.sizes.split(",")]:
        tmp = tempfile.mkdtemp(prefix="statescale-", dir=args.dir)
        try:
            t0 = time.monotonic()
            r = measure(n, args.minutes, args.rate, args.acks, args.done_share, tmp)
            r["bench_wall_s"] = round(time.monotonic() - t0, 1)
            print(json.dumps(r), flush=True)
            results.append(r)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        _write(args, results)
    print(f"wrote {args.out}")


def _write(args: argparse.Namespace, results: list[dict[str, Any]]) -> None:
    defaults = RuntimeConfig()
    doc = {
        "what": "object-store bytes per minute per shard by held URLs, before/after the snapshot schedule "
                "(benchmarks/statescale.py docstring)",
        "built": ("one SQL statement per 200k rows into the store's schema (recursive CTE; h and uh random 64-bit keys), "
                  "not admission calls; object store: a local folder via fsspec"),
        "rate": {"admissions_per_s": args.rate, "acks_per_s": args.acks},
        "config": {"state_snapshot_log_ratio": defaults.state_snapshot_log_ratio,
                   "state_snapshot_floor_mb": defaults.state_snapshot_floor_mb,
                   "state_ship_interval_s": defaults.state_ship_interval_s,
                   "state_log_interval_s": defaults.state_log_interval_s},
        "load_average_at_end": os.getloadavg()[0],
        "sizes": results,
    }
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
