"""When a shard's durable state is copied whole to a remote output (crawler.recovery.copyschedule,
crawler.recovery.statelog, crawler.engine.checkpoint): only once what changed since the last
copy reaches a share of its size, so the bytes sent grow with the rate of change, not with
the store. On the mock clock, against fsspec's in-memory filesystem as the object store."""

from __future__ import annotations

import asyncio
import json
import random
import sqlite3
import threading
import uuid

from crawler.clock import MockClock
from crawler.engine.checkpoint import Checkpointer
from crawler.frontier.store import FrontierStore
from crawler.frontier.urlitem import UrlItem
from crawler.recovery.copyschedule import CopyGate, CopySchedule
from crawler.recovery.restore import restore
from crawler.recovery.statelog import RemoteDir, StateLog

RATIO = 0.5


def _items(prefix: str, n: int) -> list[UrlItem]:
    """Paths that compress as real ones do (not a counter zlib squeezes to a few bytes)."""
    rng = random.Random(prefix)
    return [UrlItem(f"http://{prefix}.test/{rng.getrandbits(96):024x}/{rng.getrandbits(32):08x}", 1, host=f"{prefix}.test")
            for _ in range(n)]


def _shard(tmp_path, schedule: CopySchedule | None):
    remote = RemoteDir(f"memory://snapsched-{uuid.uuid4().hex}", None, "shard-000")
    slog = StateLog(remote, 1, MockClock(), interval_s=0.5, schedule=schedule)
    store = FrontierStore(str(tmp_path / "shard.sqlite"), journal=slog.append)
    return remote, slog, store


def test_a_snapshot_waits_until_the_log_since_the_last_one_reaches_the_ratio_of_its_size(tmp_path):
    remote, slog, store = _shard(tmp_path, CopySchedule(RATIO, floor_bytes=0))

    async def run() -> list[tuple[int, int, bool]]:
        rounds = []
        store.add(_items("seed", 200))
        for minute in range(40):  # one ship interval per round, a constant rate of admissions
            store.add(_items(f"m{minute}", 150))
            await slog.synced()
            since, size = slog.log_since_snapshot(), slog._snap_size
            took = await slog.snapshot(lambda dest: store.backup(dest, lambda: slog.seq))
            rounds.append((since, size, took))
        return rounds

    rounds = asyncio.run(run())
    taken = [r for r in rounds if r[2]]
    assert rounds[0][2] and rounds[0][1] == 0  # the first one is due: there is none yet
    assert 2 <= len(taken) < len(rounds) // 3, rounds  # the old schedule took one every round
    for since, size, took in rounds[1:]:
        assert took == (since >= RATIO * size), (since, size, took)
    # Amortized: a snapshot of size s is followed by at least ratio x s of log before the next.
    assert sum(size for _, size, _ in taken[1:]) <= slog.bytes_written / RATIO
    assert slog.snapshots_deferred == len(rounds) - len(taken)


def test_a_restart_after_deferred_snapshots_reads_the_snapshot_and_at_most_the_ratio_of_log(tmp_path):
    remote, slog, store = _shard(tmp_path, CopySchedule(RATIO, floor_bytes=0))

    async def run() -> None:
        store.add(_items("seed", 3000))
        await slog.synced()
        assert await slog.snapshot(lambda dest: store.backup(dest, lambda: slog.seq))
        for minute in range(12):
            store.add(_items(f"m{minute}", 40))
            await slog.synced()
            await slog.snapshot(lambda dest: store.backup(dest, lambda: slog.seq))

    asyncio.run(run())
    assert slog.snapshots_written == 1 and slog.snapshots_deferred == 12
    store.close()
    found = restore(remote, str(tmp_path / "again.sqlite"), 2)
    again = FrontierStore(str(tmp_path / "again.sqlite"))
    again.replay(found.records)
    assert again.counts()["queued"] == 3000 + 12 * 40  # nothing deferred is lost: it is in the log
    assert found.segments == 12 and found.log_bytes == slog.log_since_snapshot()
    assert found.log_bytes < RATIO * found.snapshot_bytes


def test_a_small_store_is_snapshotted_whenever_it_changed_as_before(tmp_path):
    remote, slog, store = _shard(tmp_path, CopySchedule(RATIO, floor_bytes=16 * 1024 * 1024))

    async def run() -> list[bool]:
        took = []
        for minute in range(4):
            store.add(_items(f"m{minute}", 5))
            await slog.synced()
            took.append(await slog.snapshot(lambda dest: store.backup(dest, lambda: slog.seq)))
        took.append(await slog.snapshot(lambda dest: store.backup(dest, lambda: slog.seq)))  # unchanged
        return took

    assert asyncio.run(run()) == [True, True, True, True, False]
    assert slog.snapshots_skipped == 1 and slog.snapshots_deferred == 0


def test_the_stepped_backup_lets_other_calls_in_and_copies_what_they_committed_meanwhile(tmp_path):
    store = FrontierStore(str(tmp_path / "big.sqlite"), durable=False)
    store.add(_items("seed", 5_000))  # ~200 pages
    done = threading.Event()
    during: list[int] = []

    def writer() -> None:
        i = 0
        while not done.is_set():
            store.add(_items(f"w{i}", 3))
            during.append(i)
            i += 1

    marks: list[int] = []

    def mark() -> int:  # read under the lock of the last step: what the copy must hold
        marks.append(store.table.db.execute("SELECT count(*) FROM urls").fetchone()[0])
        return 42

    t = threading.Thread(target=writer)
    t.start()
    try:
        seq = store.table.backup(str(tmp_path / "copy.sqlite"), mark, step_pages=4)
        adds_while_copying = len(during)
    finally:
        done.set()
        t.join()
    copy = sqlite3.connect(str(tmp_path / "copy.sqlite"))
    assert seq == 42
    assert copy.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert copy.execute("SELECT count(*) FROM urls").fetchone()[0] == marks[0]
    assert adds_while_copying > 0  # one lock for the whole copy let none in


def test_a_seen_set_copy_waits_for_the_ratio_and_the_end_of_the_run_copies_whatever_changed():
    schedule, gate = CopySchedule(RATIO, floor_bytes=1000), CopyGate()
    assert gate.due(schedule)  # the first: OUT's copy may be older than this node's
    gate.copied(5000, 1000)  # 5,000 bytes holding 1,000 keys
    assert not gate.due(schedule)  # nothing changed
    gate.note(499)
    assert not gate.due(schedule) and gate.deferred == 1
    assert gate.due(schedule, final=True)  # the end of a run: whatever changed
    gate.note(1)  # counted after the due() of the copy in flight: kept for the next one
    gate.copied(5000, 1000)
    gate.note(499)
    assert gate.due(schedule)  # 1 + 499 >= 0.5 x 1,000
    gate.copied(900, 1500)
    gate.note(1)
    assert gate.due(schedule)  # a copy within the floor: whenever it changed

    log_gate = CopyGate()  # an append-only log: its growth is what changed
    log_gate.grown_to(4000)
    assert log_gate.due(schedule)
    log_gate.copied(4000, 4000)
    log_gate.grown_to(5999)
    assert not log_gate.due(schedule)
    log_gate.grown_to(6000)
    assert log_gate.due(schedule)


class _Log:
    """The store's log as the checkpointer asks it (crawler.engine.checkpoint.SnapshotState)."""

    def __init__(self) -> None:
        self.bytes_written = 0
        self.due = False

    def snapshot_due(self) -> bool:
        return self.due


def test_without_a_snapshot_the_checkpoint_goes_into_the_log_at_the_rate_of_change_and_at_the_end(tmp_path):
    journal: list[tuple[str, list[str]]] = []
    store = FrontierStore(str(tmp_path / "s.sqlite"), journal=lambda kind, payload: journal.append((kind, payload)) or len(journal))
    clock, state, hosts = MockClock(), _Log(), {"h": "x" * 500}
    ships: list[float] = []

    async def ship() -> None:
        ships.append(clock.now())

    cp = Checkpointer(store, {"hosts": (lambda: dict(hosts), hosts.update)}, clock, interval_s=10.0,
                      ship=ship, ship_interval_s=60.0, state=state)
    size = len(json.dumps({"hosts": hosts}))

    async def run() -> None:
        for _ in range(3):
            state.bytes_written += size // 3  # a quiet shard: less log than the checkpoint's size
            clock.advance(60.0)
            await cp.tick()
        assert [k for k, _ in journal] == []
        state.bytes_written += size  # enough log since: worth a copy of the caches
        clock.advance(60.0)
        await cp.tick()
        assert [k for k, _ in journal] == ["meta"]
        clock.advance(60.0)
        await cp.tick()  # nothing written since
        assert len(journal) == 1
        await cp.tick(final=True)  # the end of the run: always
        assert len(journal) == 2 and journal[-1][1][0] == "checkpoint"
        state.due = True  # a snapshot holds it: not journaled
        clock.advance(60.0)
        state.bytes_written += 10 * size
        await cp.tick()
        assert len(journal) == 2

    asyncio.run(run())
    assert cp.journaled == 2 and len(ships) == 7
