"""RayRuntime.heartbeat beats every shard without waiting for a slow one.

The session renews the output's lease right after each heartbeat round, and shards stop
fetching after ``runtime.driver_timeout_s`` without a beat. A shard that does not answer
(restarting after its node died, or its loop busy) must not hold up either.
"""

from __future__ import annotations

import asyncio
import concurrent.futures

from actors.rayruntime import RayRuntime


class _Method:
    def __init__(self, future: concurrent.futures.Future) -> None:
        self.future_ = future
        self.calls = 0

    def remote(self) -> "_Method":
        self.calls += 1
        return self

    def future(self) -> concurrent.futures.Future:
        return self.future_


class _Shard:
    def __init__(self, answer: bool, error: Exception | None = None) -> None:
        fut: concurrent.futures.Future = concurrent.futures.Future()
        if error is not None:
            fut.set_exception(error)
        elif answer:
            fut.set_result(None)
        self.heartbeat = _Method(fut)


def test_a_shard_that_never_answers_does_not_hold_up_the_beat():
    rt = RayRuntime()
    rt.shards = {"shard-000": _Shard(True), "shard-001": _Shard(False), "shard-002": _Shard(True, RuntimeError("dead"))}

    async def main() -> None:
        # A heartbeat that waited for every answer would never return here.
        await asyncio.wait_for(rt.heartbeat(), timeout=10)
        await asyncio.wait_for(rt.heartbeat(), timeout=10)

    asyncio.run(main())
    assert [s.heartbeat.calls for s in rt.shards.values()] == [2, 2, 2]


def test_no_shards_yet_is_a_no_op():
    rt = RayRuntime()
    assert asyncio.run(asyncio.wait_for(rt.heartbeat(), timeout=10)) is None
    assert rt.shards == {}
