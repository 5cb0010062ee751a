"""SeenGroup: a batch split over seen shards by hash, one call per shard, verdicts in order.

The shards here are plain async fakes (some backed by real SeenSets): no Ray.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence

import pytest

from crawler.errors import ConfigError
from crawler.seen import SeenGroup, SeenSet, shard_of, url_hash64
from tests.unit.seen_kit import make_urls


class FakeShard:
    """A shard that records each call and answers from its own in-memory SeenSet."""

    def __init__(self, log: list[str] | None = None, name: str = "") -> None:
        self.set = SeenSet(100_000)
        self.calls: list[list[int]] = []
        self.log = log if log is not None else []
        self.name = name

    async def __call__(self, hashes: list[int]) -> list[bool]:
        self.calls.append(list(hashes))
        self.log.append(f"start {self.name}")
        await asyncio.sleep(0)  # yield once: concurrent shards all start before any ends
        self.log.append(f"end {self.name}")
        return self.set.check_and_add_hashes(hashes)


def _group(n: int) -> tuple[SeenGroup, list[FakeShard], list[str]]:
    log: list[str] = []
    shards = [FakeShard(log, str(i)) for i in range(n)]
    return SeenGroup(shards), shards, log


async def test_verdicts_equal_one_unsharded_set_in_input_order() -> None:
    group, _, _ = _group(4)
    single = SeenSet(100_000)
    rng = random.Random(3)
    urls = make_urls(3000)
    for _ in range(5):
        # Repeats within a batch and across batches: only first sightings are novel.
        batch = [rng.choice(urls) for _ in range(700)]
        assert await group.check_and_add(batch) == single.check_and_add(batch)
    assert await group.check_and_add(urls) == single.check_and_add(urls)


async def test_each_owning_shard_is_called_once_with_its_hashes_in_input_order() -> None:
    group, shards, _ = _group(5)
    urls = make_urls(40)
    await group.check_and_add(urls)
    for s, shard in enumerate(shards):
        mine = [url_hash64(u) for u in urls if shard_of(url_hash64(u), 5) == s]
        assert shard.calls == ([mine] if mine else [])
    assert sum(len(sh.calls) for sh in shards) == len({shard_of(url_hash64(u), 5) for u in urls})


async def test_a_shard_owning_nothing_in_the_batch_is_not_called() -> None:
    group, shards, _ = _group(8)
    url = "https://one.example/"
    assert await group.check_and_add([url, url]) == [True, False]
    called = [s for s, sh in enumerate(shards) if sh.calls]
    assert called == [shard_of(url_hash64(url), 8)]


async def test_shards_are_asked_concurrently() -> None:
    group, shards, log = _group(3)
    await group.check_and_add(make_urls(60))
    assert all(sh.calls for sh in shards)
    # Every call started before the first one finished (one after another would alternate).
    assert [e.split()[0] for e in log] == ["start"] * 3 + ["end"] * 3


async def test_empty_batch_calls_no_shard() -> None:
    group, shards, _ = _group(3)
    assert await group.check_and_add([]) == []
    assert not any(sh.calls for sh in shards)


async def test_a_single_shard_gets_the_whole_batch() -> None:
    group, (shard,), _ = _group(1)
    urls = ["https://a.example/", "https://b.example/", "https://a.example/"]
    assert await group.check_and_add(urls) == [True, True, False]
    assert shard.calls == [[url_hash64(u) for u in urls]]


async def test_a_failing_shard_fails_the_whole_call() -> None:
    class Down(Exception):
        pass

    async def down(hashes: list[int]) -> list[bool]:
        raise Down("seen shard restarting")

    healthy = FakeShard()
    group = SeenGroup([healthy, down])
    urls = make_urls(50)
    assert {shard_of(url_hash64(u), 2) for u in urls} == {0, 1}
    with pytest.raises(Down):
        await group.check_and_add(urls)


async def test_a_shard_answering_too_few_verdicts_fails_instead_of_dropping_urls() -> None:
    async def short(hashes: list[int]) -> list[bool]:
        return [True] * (len(hashes) - 1)

    with pytest.raises(ValueError, match="verdicts"):
        await SeenGroup([short]).check_and_add(["https://a.example/", "https://b.example/"])


async def test_a_shard_may_return_any_awaitable_like_a_ray_object_ref() -> None:
    # A Ray actor call returns an ObjectRef (awaitable, not a coroutine): a resolved
    # future stands in for it.
    def as_future(hashes: list[int]) -> asyncio.Future[Sequence[bool]]:
        fut: asyncio.Future[Sequence[bool]] = asyncio.get_running_loop().create_future()
        fut.set_result([h % 2 == 0 for h in hashes])
        return fut

    urls = make_urls(20)
    assert await SeenGroup([as_future, as_future]).check_and_add(urls) == [url_hash64(u) % 2 == 0 for u in urls]


def test_a_group_needs_a_shard() -> None:
    with pytest.raises(ConfigError, match="at least one shard"):
        SeenGroup([])


class _FakeActorMethod:
    def __init__(self, shard: FakeShard) -> None:
        self.shard = shard

    def remote(self, hashes: list[int]):  # what Ray's ActorMethod.remote looks like
        return self.shard(hashes)


class _FakeActor:
    def __init__(self, shard: FakeShard) -> None:
        self.check_and_add_hashes = _FakeActorMethod(shard)


async def test_the_ray_client_sends_each_actor_its_own_part() -> None:
    from actors.serviceactors import SeenGroupClient  # imports ray, starts nothing

    shards = [FakeShard() for _ in range(3)]
    client = SeenGroupClient([_FakeActor(sh) for sh in shards])
    urls = make_urls(90)
    assert await client.check_and_add(urls + urls[:10]) == [True] * 90 + [False] * 10
    for s, shard in enumerate(shards):
        # Each actor got exactly the hashes it owns (not all of them the last actor's).
        assert {h for call in shard.calls for h in call} == {
            url_hash64(u) for u in urls if shard_of(url_hash64(u), 3) == s
        }
