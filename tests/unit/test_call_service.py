"""actors.serviceactors.call_service, without a cluster: which errors from an actor are
waited out and which are raised at once.

Ray hands an exception raised in an actor's method to the caller as ``RayTaskError``
(made an instance of the cause's class too); a restarting actor as ``RayActorError``.
Both are built here by hand, so nothing starts Ray.
"""

from __future__ import annotations

import asyncio

import pytest
import ray.exceptions as rex

from actors.serviceactors import call_service
from crawler.errors import FencedError, ServiceUnavailableError, StorageError, retry_later


def raised_in_actor(cause: Exception) -> Exception:
    err = rex.RayTaskError("HostShard.accept", "Traceback (most recent call last): ...", cause,
                           proctitle="ray::HostShard", pid=1, ip="127.0.0.1")
    return err.as_instanceof_cause()  # what awaiting the ObjectRef raises


class Actor:
    """An actor method that raises each of ``errors`` in turn, then answers ``reply``."""

    def __init__(self, *errors: Exception, reply: int = 7) -> None:
        self.errors = list(errors)
        self.reply = reply
        self.calls = 0

    async def __call__(self) -> int:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return self.reply


@pytest.fixture
def waits(monkeypatch) -> list[float]:
    """The backoff waits call_service asked for (none is slept)."""
    asked: list[float] = []

    async def no_sleep(seconds: float) -> None:
        asked.append(seconds)

    monkeypatch.setattr(asyncio, "sleep", no_sleep)  # the module actors.serviceactors sleeps through
    return asked


async def test_a_shard_that_refuses_for_now_is_asked_again(waits) -> None:
    actor = Actor(raised_in_actor(FencedError("shard-001 is not accepting work")),
                  raised_in_actor(StorageError("PUT failed: 503")))
    assert await call_service(actor, "shard shard-001") == 7
    assert actor.calls == 3 and waits == [0.05, 0.1]


async def test_a_restarting_actor_is_waited_for(waits) -> None:
    actor = Actor(rex.RayActorError(), rex.ActorUnavailableError("restarting", None))
    assert await call_service(actor, "content index") == 7
    assert actor.calls == 3


async def test_past_its_allowance_a_refusal_is_still_a_refusal(waits) -> None:
    """``give_up_s=0`` (HostShard._deliver): one call, and "not now" for the link router
    to wait out (crawler.engine.linkrouter), never an error that ends the delivery."""
    actor = Actor(raised_in_actor(FencedError("fenced")))
    with pytest.raises(ServiceUnavailableError) as info:
        await call_service(actor, "shard shard-001", give_up_s=0.0)
    assert retry_later(info.value) and actor.calls == 1 and waits == []


async def test_a_bug_in_the_actor_is_raised_at_once_as_its_own_class(waits) -> None:
    actor = Actor(raised_in_actor(KeyError("a bug")))
    with pytest.raises(KeyError):
        await call_service(actor, "shard shard-001")
    assert actor.calls == 1 and waits == []
