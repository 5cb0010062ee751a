"""What checking a local output's state costs at a resume (crawler.session.preflight), measured.

One shard's store of ``--urls`` URLs, every one fetched: its rows in part files of
``output.rows_per_file`` (5,000) rows, every part acked but the newest (a crash between
the last part and its ack). Timed, on the shard's files:

* ``ordinary``: what every resume now pays (crawler.recovery.statefiles.settle_local): the
  write-ahead log looked at (crawler.recovery.walcheck), the part files listed, the newest
  ones read back to the first the store acked, their rows acked;
* ``damaged``: what a resume pays once after damage is found (a cut log): every row of the
  shard read and checked against the store; the same as reading every row at every resume
  would cost each time (what the ordinary path avoids);
* ``wal_check``: the log check alone, on a log of ``--wal-frames`` frames (the store's
  checkpoint size, 4,000 pages, is the most a log holds between checkpoints).

And what a cut log costs a crawl (``cut_log``): the 160-page web of
crawler.testing.chainweb crawled in process, the output copied at page fetch N (the crash
image), the shard store's log cut at a fraction of its size, the crawl resumed on the
image; per case, the URLs that had a row at the crash and were fetched again, the pages
that never got a row, and the run's verdict and ledger. ``--scenario-only`` runs just
that part, with nothing but what older versions also have (how the "before" figures were
taken: the same script on the commit before this one).

    python -m benchmarks.damaged_resume [--urls 1000000] [--out benchmarks/results/damaged_resume.json]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sqlite3
import tempfile
import time
from pathlib import Path

import asyncio
import logging

from crawler.config import settings as config
from crawler.frontier.store import FrontierStore
from crawler.frontier.urlitem import UrlItem
from crawler.frontier.recrawl import Schedule
from crawler.output import OutcomeRow, ResultWriter, read_pages
from crawler.session.inprocess import local_session
from crawler.testing.chainweb import PAGES, SEED, SiteFetcher, copy_output

HERE = Path(__file__).resolve().parent
ROWS_PER_FILE = 5000


def _build(tmp: str, urls: int) -> tuple[str, str]:
    out, path = os.path.join(tmp, "out"), os.path.join(tmp, "shard-000.sqlite")
    store = FrontierStore(path)
    writer = ResultWriter(out, "shard-000", rows_per_file=ROWS_PER_FILE)
    t0 = 1_700_000_000.0
    for start in range(0, urls, ROWS_PER_FILE):
        ids = range(start, min(urls, start + ROWS_PER_FILE))
        rows = [OutcomeRow(url=f"http://h{i % 997}.test/p/{i}", host=f"h{i % 997}.test", depth=1, status=200,
                           outcome="fetched", shard="shard-000", fetch_seq=1,
                           fetched_at=dt.datetime.fromtimestamp(t0 + i / 100, dt.timezone.utc)) for i in ids]
        store.add([UrlItem(r.url, 1) for r in rows])
        store.claim([r.url for r in rows])
        writer.add(rows)
        writer.flush()
        if start + ROWS_PER_FILE < urls:  # the newest part's ack is lost
            store.record([(r, Schedule(None, 86400.0, r.fetched_at.timestamp() + 86400.0)) for r in rows])
    store.close()
    return out, path


def _timed(fn):
    """(result, wall seconds, CPU seconds of this process): the machine may be shared, so
    both are kept; CPU time is what the work costs, wall time what a resume waits."""
    started, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return result, time.perf_counter() - started, time.process_time() - cpu


def _wal_frames(tmp: str, frames: int) -> tuple[float, float]:
    from crawler.recovery.walcheck import wal_cut

    path = os.path.join(tmp, "wal.sqlite")
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA wal_autocheckpoint=0")
    db.execute("CREATE TABLE t (i INTEGER PRIMARY KEY, v BLOB)")
    for i in range(frames):
        db.execute("INSERT INTO t VALUES (?, randomblob(3000))", (i,))
    assert os.path.getsize(path + "-wal") > frames * 4096
    _, wall, cpu = _timed(lambda: wal_cut(path))
    db.close()
    return wall, cpu


CUT_CASES = ((40, 0.3), (80, 0.5), (120, 0.8), (80, 0.95))


def _crawl_cfg(out: str) -> config.CrawlConfig:
    return config.from_dict({
        "seeds": [SEED], "scope": "any", "politeness": {"interval_s": 0.0},
        "output": {"path": out, "row_flush_interval_s": 0.05, "outbox_interval_s": 0.02},
        "runtime": {"shards": 1, "link_flush_interval_s": 0.01, "link_flush_early_s": 0.01},
    })


def cut_log(fetches: int, keep: float) -> dict:
    """One case of the cut-log scenario (module docstring)."""
    with tempfile.TemporaryDirectory() as tmp:
        out, image = os.path.join(tmp, "out"), os.path.join(tmp, "image")
        first = SiteFetcher(lambda n: copy_output(out, image) if n == fetches else None)
        asyncio.run(local_session(_crawl_cfg(out), fetcher_factory=lambda: first).run())
        wal = os.path.join(image, "state", "shard-000.sqlite-wal")
        with open(wal, "r+b") as f:
            f.truncate(int(os.path.getsize(wal) * keep) + 100)
        had = {r["url"] for r in read_pages(image, columns=["url"]).to_pylist()}
        again = SiteFetcher()
        stats = asyncio.run(local_session(_crawl_cfg(image), fetcher_factory=lambda: again).run())
        rows = {r["url"] for r in read_pages(image, columns=["url"]).to_pylist()}
        ledger = stats.get("ledger") or {}
        return {"fetches_at_crash": fetches, "log_kept": keep, "rows_at_crash": len(had), "pages": len(PAGES),
                "fetched_again": len(set(again.fetched) & had), "never_fetched": len(set(PAGES) - rows),
                "finished": stats["finished"], "ledger_balanced": ledger.get("balanced")}


def measure(urls: int, wal_frames: int) -> dict:
    from crawler.recovery.statefiles import settle_local

    with tempfile.TemporaryDirectory() as tmp:
        out, path = _build(tmp, urls)
        cfg = config.from_dict({"seeds": ["http://h0.test/"], "output": {"path": out}})
        results: dict = {"urls": urls, "rows_per_file": ROWS_PER_FILE, "part_files": -(-urls // ROWS_PER_FILE)}
        from crawler.recovery.walcheck import wal_cut

        store = FrontierStore(path)
        found, wall, cpu = _timed(lambda: (wal_cut(path), settle_local(cfg, "shard-000", store))[1])
        results["ordinary"] = {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "parts_read": found.parts_read,
                               "settled": found.settled}
        found, wall, cpu = _timed(lambda: settle_local(cfg, "shard-000", store, cut="measured"))
        results["damaged"] = {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "rows_read": urls,
                              "settled": found.settled}
        store.close()
        wall, cpu = _wal_frames(tmp, wal_frames)
        results["wal_check"] = {"frames": wal_frames, "wall_s": round(wall, 4), "cpu_s": round(cpu, 4)}
        results["load_average"] = round(os.getloadavg()[0], 1)
    return results


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--urls", type=int, default=1_000_000)
    p.add_argument("--wal-frames", type=int, default=4000)
    p.add_argument("--out", default=str(HERE / "results" / "damaged_resume.json"))
    p.add_argument("--scenario-only", action="store_true", help="only the cut-log scenario (runs on older versions)")
    args = p.parse_args()
    logging.basicConfig(level=logging.ERROR)
    results = {} if args.scenario_only else measure(args.urls, args.wal_frames)
    results["cut_log"] = [cut_log(n, keep) for n, keep in CUT_CASES]
    print(json.dumps(results, indent=2))
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
