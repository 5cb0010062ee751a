"""A store that forgot committed work is settled from the rows in OUT, cheaply when it can.

What SQLite does with a write-ahead log cut short (crawler.recovery.walcheck): the
transactions committed after the cut are dropped without an error. The rows a shard
wrote to ``OUT/pages`` are the truth of what it fetched (crawler.recovery.statefiles
``settle_local``): a URL with a row is done, whatever the store forgot, and an ordinary
resume reads only the newest part files to find out.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import sqlite3
import subprocess
import sys

from crawler.config import settings as config
from crawler.frontier.audit import StoreAudit
from crawler.frontier.store import FrontierStore
from crawler.frontier.urlitem import UrlItem
from crawler.frontier.recrawl import Schedule
from crawler.output import OutcomeRow, ResultWriter
from crawler.recovery.statefiles import settle_local
from crawler.recovery.walcheck import wal_cut

PAGE = 4096
FRAME = 24 + PAGE

_COMMITS = """
import os, sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("PRAGMA journal_mode=WAL"); db.execute("PRAGMA synchronous=NORMAL")
db.execute("CREATE TABLE t (i INTEGER PRIMARY KEY, v TEXT)")
for i in range(40):
    db.execute("BEGIN"); db.execute("INSERT INTO t VALUES (?, ?)", (i, "x" * 100)); db.execute("COMMIT")
os._exit(9)  # no close, no checkpoint: the process dies as under kill -9
"""


def _killed_after_40_commits(path: str) -> None:
    subprocess.run([sys.executable, "-c", _COMMITS, path], check=False, timeout=60)
    assert os.path.getsize(path + "-wal") > 40 * FRAME  # every commit is still in the log


def _copy(src: str, dst: str) -> str:
    for suffix in ("", "-wal"):
        shutil.copy(src + suffix, dst + suffix)
    return dst


def _rows(path: str) -> int:
    db = sqlite3.connect(path)
    try:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        return db.execute("SELECT count(*) FROM t").fetchone()[0]
    finally:
        db.close()


def test_a_log_cut_inside_a_frame_loses_later_commits_silently_and_is_seen_before_the_open(tmp_path):
    live = str(tmp_path / "live.sqlite")
    _killed_after_40_commits(live)
    assert wal_cut(live) is None
    assert _rows(_copy(live, str(tmp_path / "whole.sqlite"))) == 40  # the kill itself lost nothing

    cut = _copy(live, str(tmp_path / "cut.sqlite"))
    with open(cut + "-wal", "r+b") as f:
        f.truncate(32 + 25 * FRAME + 1000)  # a power loss, or a copy taken mid-write
    reason = wal_cut(cut)
    assert reason is not None and "into frame 26" in reason
    assert _rows(cut) < 25  # committed transactions gone, integrity "ok", no error
    assert not os.path.exists(cut + "-wal")  # checkpointed and deleted on close: no trace left

    boundary = _copy(live, str(tmp_path / "boundary.sqlite"))
    with open(boundary + "-wal", "r+b") as f:
        f.truncate(32 + 25 * FRAME)  # a cut on a frame boundary cannot be told from a shorter log
    assert wal_cut(boundary) is None and _rows(boundary) < 25

    short = _copy(live, str(tmp_path / "short.sqlite"))
    with open(short + "-wal", "r+b") as f:
        f.truncate(20)
    assert "shorter than a log header" in (wal_cut(short) or "")


def test_older_frames_after_a_restarted_log_are_not_a_cut(tmp_path):
    live = str(tmp_path / "live.sqlite")
    _killed_after_40_commits(live)
    restart = """
import os, sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("PRAGMA wal_checkpoint(RESTART)")
for i in range(100, 103):
    db.execute("BEGIN"); db.execute("INSERT INTO t VALUES (?, 'y')", (i,)); db.execute("COMMIT")
os._exit(9)
"""
    subprocess.run([sys.executable, "-c", restart, live], check=False, timeout=60)
    assert wal_cut(live) is None  # three new frames, then the previous generation's
    with open(live + "-wal", "r+b") as f:
        f.truncate(32 + 20 * FRAME + 500)  # inside the old frames: nothing current lost
    assert wal_cut(live) is None and _rows(live) == 43


# -- settling a store from the rows ------------------------------------------------------


def _cfg(out: str):
    return config.from_dict({"seeds": ["http://a.test/"], "output": {"path": out}})


def _url(i: int) -> str:
    return f"http://a.test/p{i}"


def _row(i: int, seq: int = 1, at: float = 1_700_000_000.0) -> OutcomeRow:
    return OutcomeRow(url=_url(i), host="a.test", depth=1, status=200, outcome="fetched", shard="shard-000",
                      fetch_seq=seq, fetched_at=dt.datetime.fromtimestamp(at + i, dt.timezone.utc))


def _fetched_s(row: OutcomeRow) -> float:
    assert isinstance(row.fetched_at, dt.datetime)  # as _row makes it
    return row.fetched_at.timestamp()


def _crawl(tmp_path, parts: int, acked: int):
    """A shard that accepted and fetched 10 URLs per part, wrote ``parts`` part files,
    and acked the first ``acked`` of them."""
    out = str(tmp_path / "out")
    store = FrontierStore(str(tmp_path / "shard-000.sqlite"))
    writer = ResultWriter(out, "shard-000")
    for p in range(parts):
        batch = [_row(i) for i in range(p * 10, p * 10 + 10)]
        store.add([UrlItem(r.url, 1) for r in batch])
        store.claim([r.url for r in batch])
        writer.add(batch)
        writer.flush()
        if p < acked:
            store.record([(r, Schedule(None, 100.0, _fetched_s(r) + 100.0)) for r in batch])
    return out, store


def test_an_ordinary_resume_reads_the_newest_part_files_only_and_acks_their_rows(tmp_path):
    out, store = _crawl(tmp_path, parts=6, acked=5)  # killed between the last part and its ack
    found = settle_local(_cfg(out), "shard-000", store)
    assert (found.parts_read, found.unacked_parts, found.settled, found.damaged) == (2, 1, 10, "")
    assert store.counts() == {"queued": 0, "claimed": 0, "done": 60, "dropped": 0}
    status = store.url_status(_url(55))
    assert status["fetches"] == 1 and status["status"] == "fetched" and status["next_crawl_at"] is not None
    again = settle_local(_cfg(out), "shard-000", store)
    assert (again.parts_read, again.settled) == (1, 0)  # settled once: the next resume reads one part


def test_more_than_one_unacked_part_is_damage_every_row_is_read_and_lost_urls_come_back_done(tmp_path):
    out, store = _crawl(tmp_path, parts=6, acked=2)
    with store.table.lock:  # the log also lost the admission of two fetched URLs
        store.table.db.execute("DELETE FROM urls WHERE url IN (?, ?)", (_url(41), _url(52)))
    found = settle_local(_cfg(out), "shard-000", store)
    assert found.unacked_parts >= 2 and "4 part files" in found.damaged
    assert found.settled == 40
    assert store.counts() == {"queued": 0, "claimed": 0, "done": 60, "dropped": 0}


def test_a_store_that_lost_everything_is_rebuilt_done_from_the_rows(tmp_path):
    out, store = _crawl(tmp_path, parts=3, acked=3)
    store.close()
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(str(tmp_path / "shard-000.sqlite") + suffix):
            os.remove(str(tmp_path / "shard-000.sqlite") + suffix)
    fresh = FrontierStore(str(tmp_path / "shard-000.sqlite"))
    found = settle_local(_cfg(out), "shard-000", fresh)
    assert "holds none of the URLs" in found.damaged and found.settled == 30
    assert fresh.counts()["done"] == 30 and len(fresh.add([UrlItem(_url(7), 1)])) == 0  # never admitted again


def test_a_refresh_whose_ack_was_lost_counts_as_fetched_and_moves_its_due_time_on(tmp_path):
    out, store = _crawl(tmp_path, parts=1, acked=1)
    writer = ResultWriter(out, "shard-000")
    writer.add([_row(3, seq=2, at=1_800_000_000.0)])  # the second fetch of p3: row written, ack lost
    writer.flush()
    before = store.url_status(_url(3))
    found = settle_local(_cfg(out), "shard-000", store)
    after = store.url_status(_url(3))
    assert found.settled == 1 and before["fetches"] == 1 and after["fetches"] == 2
    assert after["last_crawled_at"] == 1_800_000_003.0 and after["next_crawl_at"] == 1_800_000_003.0 + 100.0
    assert StoreAudit(store).unacked([{"url": _url(3), "fetch_seq": 2}]) == ([], 1)
