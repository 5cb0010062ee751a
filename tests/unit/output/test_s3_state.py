"""Incarnations of a shard on S3 (s3fs against moto on loopback, see conftest.py): the
generation is claimed with a conditional PUT (``If-None-Match: *``) and fenced by reads,
as DESIGN invariant 15 needs (crawler.recovery.incarnation)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from crawler.clock import MockClock
from crawler.errors import FencedError
from crawler.output import open_fs
from crawler.output.fs import atomic_create, create_new
from crawler.recovery.incarnation import claim, read_claim
from crawler.recovery.statelog import RemoteDir

from tests.unit.statekit import SHARD, cfg_for, items, open_on, queued, snapshot


def race(n: int, work) -> list:
    """Run ``work(i)`` on ``n`` threads released together; their results in order."""
    gate = threading.Barrier(n)
    results: list = [None] * n

    def run(i: int) -> None:
        gate.wait()
        results[i] = work(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_s3_conditional_create_has_one_winner_and_knows_its_own_object(s3_out):
    out, opts = s3_out
    fs, root = open_fs(out, opts)
    assert atomic_create(fs)
    path = f"{root}/state/x/gen-00000001.json"
    won = race(6, lambda i: create_new(fs, path, f"token-{i}".encode()))
    assert won.count(True) == 1
    assert fs.cat_file(path) == f"token-{won.index(True)}".encode()
    # A retry of the winner's request (its reply was lost) is told apart from a rival's.
    assert create_new(fs, path, f"token-{won.index(True)}".encode()) is True
    assert create_new(fs, path, b"someone else") is False


def test_s3_incarnations_that_race_for_a_generation_get_one_each(s3_out):
    out, opts = s3_out
    incs = race(5, lambda i: claim(RemoteDir(out, opts, SHARD), MockClock(), listed=[]))
    assert sorted(inc.gen for inc in incs) == [1, 2, 3, 4, 5]
    remote = RemoteDir(out, opts, SHARD)
    assert {read_claim(remote, inc.gen).token for inc in incs} == {inc.token for inc in incs}
    for inc in incs:
        if inc.gen < 5:
            with pytest.raises(FencedError):
                inc.check(fresh=True)


def test_s3_a_zombie_writing_after_its_successor_started_loses_nothing_acked(s3_out, tmp_path, monkeypatch):
    out, opts = s3_out
    cfg = cfg_for(out, opts)

    async def run():
        zombie = open_on(cfg, str(tmp_path / "a"), monkeypatch)
        zombie.store.add(items("acked", 2))
        await zombie.log.synced()
        successor = open_on(cfg, str(tmp_path / "b"), monkeypatch)
        zombie.store.add(items("late", 1))
        with pytest.raises(FencedError):
            await zombie.log.synced()  # its segment landed; the check after it refused the ack
        successor.store.add(items("next", 1))
        await successor.log.synced()
        with pytest.raises(FencedError):
            await snapshot(zombie)
        assert await snapshot(successor)
        zombie.store.close()
        successor.store.close()

    asyncio.run(run())
    third = open_on(cfg, str(tmp_path / "c"), monkeypatch)
    assert queued(third.store) == {"http://acked.test/p/0", "http://acked.test/p/1", "http://next.test/p/0"}
    assert third.log.gen == 3 and third.restored.snapshot is not None
