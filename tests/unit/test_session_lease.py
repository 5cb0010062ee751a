"""The session renews the output's lease while its runtime starts.

Starting the shards can take longer than ``runtime.lease_ttl_s`` (actors on a loaded
machine took 6-16 s here); shards check the lease before their first fetch and fence
themselves off for good if it expired. So the heartbeat, which renews the lease, must run
from the moment the lease is taken, not from the moment the runtime is up.
"""

from __future__ import annotations

import asyncio

from crawler.config import settings as config
from crawler.clock import MockClock
from crawler.recovery.lease import Lease
from crawler.session.runtime import Plan
from crawler.session.crawlsession import CrawlSession

from tests.unit.doubles import IdleRuntime, inline


class SlowStartRuntime(IdleRuntime):
    """A runtime whose start takes ``start_s`` of the clock; records heartbeats."""

    def __init__(self, clock: MockClock, start_s: float) -> None:
        self.clock, self.start_s = clock, start_s
        self.beats: list[float] = []
        self.started = False

    async def start(self, plan: Plan) -> None:
        await self.clock.sleep(self.start_s)
        self.started = True

    async def heartbeat(self) -> None:
        self.beats.append(self.clock.now())


def test_the_lease_is_renewed_while_the_runtime_starts(tmp_path, monkeypatch):
    cfg = config.from_dict({"seeds": ["http://a.test/"], "output": {"path": str(tmp_path / "out")},
                            "runtime": {"lease_ttl_s": 6.0, "driver_timeout_s": 1.5}})
    clock = MockClock()
    renewals: list[float] = []
    real_renew = Lease.renew

    def renew(self: Lease) -> bool:
        renewals.append(clock.now())
        return real_renew(self)

    monkeypatch.setattr(Lease, "renew", renew)

    runtime = SlowStartRuntime(clock, start_s=20.0)  # more than three lease lifetimes
    session = CrawlSession(cfg, runtime, clock=clock, run_blocking=inline)

    async def main() -> None:
        task = asyncio.ensure_future(session.start())
        await clock.run_until(lambda: task.done(), max_time=60)
        await task
        session._heartbeat_task.cancel()
        session.lease.release()

    asyncio.run(main())
    assert runtime.started
    during = [t for t in renewals if t <= 20.0]
    # Renewed every lease_ttl_s / 4 from the start, so never near expiry before the shards run.
    assert during and during[0] <= 1.5 + 0.3 and all(b - a <= 1.5 + 0.3 for a, b in zip(during, during[1:]))
    assert any(t < 20.0 for t in runtime.beats)
