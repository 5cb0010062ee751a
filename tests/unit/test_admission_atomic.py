"""Admission is atomic per URL: nothing stays marked seen that no shard holds.

A seed batch that its owning shard refuses (a bug, a restarting actor) used to stay
marked seen: re-seeding answered ``already_seen``, the URL never got a row, and the ledger
stayed off by one for good (issue "hostile and careless operators", item 1). Now the
session undoes the marks of a failed delivery (``SeenSet.forget_hashes``).
"""

from __future__ import annotations

import gc
from typing import Any

import pytest

from crawler.config import settings as config
from crawler.clock import MockClock
from crawler.errors import ConfigError
from crawler.seen import SeenGroup, SeenSet
from crawler.seen.hashing import url_hash64
from crawler.session.crawlsession import CrawlSession
from crawler.config.settings import CrawlConfig
from crawler.frontier.urlitem import UrlItem

from tests.unit.doubles import IdleRuntime
from tests.unit.seen_kit import numbers

URLS = [f"https://a{i}.example/p" for i in range(40)]


def _hashes(urls):
    return [url_hash64(u) for u in urls]


@pytest.mark.parametrize("on_disk", [False, True])
def test_a_forgotten_url_is_new_again_and_no_longer_counted(tmp_path, on_disk) -> None:
    kw: dict[str, Any] = {"path": str(tmp_path / "seen.sqlite")} if on_disk else {}
    s = SeenSet(1000, **kw)
    assert s.check_and_add(URLS) == [True] * len(URLS)
    assert s.forget_hashes(_hashes(URLS[:10])) == 10
    assert s.forget_hashes(_hashes(URLS[:10])) == 0  # nothing left to undo
    assert (len(s), s.stats()["novel"], s.stats()["forgotten"]) == (30, 30, 10)
    # The Bloom bits stay set; the exact store clears them: new again, once.
    assert s.check_and_add(URLS[:10] + URLS[30:]) == [True] * 10 + [False] * 10
    assert s.stats()["novel"] == 40
    if on_disk:
        s.forget_hashes(_hashes(URLS[:5]))
        s.close()
        again = SeenSet(1000, **kw)  # the older Bloom snapshot is not trusted after a forget
        assert again.stats()["novel"] == 35 and again.stats()["forgotten"] == 15
        assert again.check_and_add(URLS[:6]) == [True] * 5 + [False]
        again.close()


def test_a_forget_after_the_last_snapshot_makes_the_next_open_rebuild(tmp_path) -> None:
    path = str(tmp_path / "seen.sqlite")
    s = SeenSet(1000, path=path)
    s.check_and_add(URLS[:20])
    s.snapshot_bloom()  # names 20 rows
    s.forget_hashes(_hashes(URLS[:2]))
    s.check_and_add(URLS[20:22])  # 20 rows again, but not the snapshot's 20
    del s  # a crash: no close, no new snapshot
    gc.collect()  # sqlite3.Connection sits in a reference cycle: collect it to free the lock
    again = SeenSet(1000, path=path)
    assert again.bloom_source == "rebuilt"
    assert again.check_and_add(URLS[20:22]) == [False, False]  # not admitted twice
    again.close()


def test_bloom_only_mode_cannot_undo_but_stops_counting_the_mark() -> None:
    s = SeenSet(1000, exact=False)
    s.check_and_add(URLS[:4])
    assert s.forget_hashes(_hashes(URLS[:4])) == 4
    assert s.stats()["novel"] == 0  # the ledger counts what a shard holds
    assert s.check_and_add(URLS[:1]) == [False]  # lossy by choice: the bits remain


class FlakyRuntime(IdleRuntime):
    """A runtime whose seen group is real and whose shard refuses deliveries while ``broken``."""

    def __init__(self) -> None:
        self.sets = [SeenSet(1000), SeenSet(1000)]
        self.group = SeenGroup(
            [self._call(s.check_and_add_hashes) for s in self.sets],
            [self._call(s.forget_hashes) for s in self.sets],
        )
        self.broken = True
        self.held: list[str] = []

    @staticmethod
    def _call(fn):
        async def call(hashes):
            return fn(hashes)

        return call

    def default_shards(self, cfg: CrawlConfig) -> tuple[int, int]:
        return 1, 2

    async def seen_check(self, urls: list[str]) -> list[bool]:
        return await self.group.check_and_add(urls)

    async def seen_forget(self, urls: list[str]) -> int:
        return await self.group.forget(urls)

    async def deliver(self, shard_id: str, items: list[UrlItem]) -> None:
        if self.broken:
            raise OverflowError("Python int too large to convert to SQLite INTEGER")
        self.held.extend(i.url for i in items)


async def test_a_failed_delivery_leaves_nothing_marked_and_adding_again_works(tmp_path) -> None:
    cfg = config.from_dict({"seeds": ["https://seed.example/"], "output": {"path": str(tmp_path / "out")}})
    rt = FlakyRuntime()
    session = CrawlSession(cfg, rt, durable=False, clock=MockClock())
    with pytest.raises(Exception, match="could not be queued"):
        await session.start()  # the run's own seed: the start fails, nothing half-applied
    assert sum(numbers(s)["novel"] for s in rt.sets) == 0

    answer = await session.steering.add_seeds(URLS[:3], strict=False)
    assert (answer["accepted"], answer["already_seen"], answer["refused"]) == (0, 0, 3)
    assert all(e["reason"].startswith("not queued: OverflowError") for e in answer["urls"])
    assert sum(numbers(s)["novel"] for s in rt.sets) == 0

    rt.broken = False
    answer = await session.steering.add_seeds(URLS[:3], strict=False)
    assert answer["accepted"] == 3 and sorted(rt.held) == sorted(URLS[:3])
    # Admitted (seen.novel) == held by a shard: the ledger's equation.
    assert sum(numbers(s)["novel"] for s in rt.sets) == len(rt.held) == 3


@pytest.mark.parametrize("bad", [2**63, -(2**63) - 1, 1001, -1001, 1.5, True, "3"])
async def test_a_priority_out_of_range_is_refused_before_anything_is_marked(tmp_path, bad) -> None:
    cfg = config.from_dict({"seeds": ["https://seed.example/"], "output": {"path": str(tmp_path / "out")}})
    rt = FlakyRuntime()
    rt.broken = False
    session = CrawlSession(cfg, rt, durable=False, clock=MockClock())
    await session.start()
    before = sum(numbers(s)["checks"] for s in rt.sets)
    with pytest.raises(ConfigError, match="priority: expected a whole number from -1000 to 1000"):
        await session.steering.add_seeds(URLS[:2], priority=bad)
    assert sum(numbers(s)["checks"] for s in rt.sets) == before
