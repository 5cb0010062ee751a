"""A session keeps its output lease while its runtime starts: actors that take longer than
``lease_ttl_s`` to come up (a cold or busy cluster) must not find the lease expired and
fence themselves off before the crawl begins. And the API says 503 until then."""

from __future__ import annotations

import asyncio

from crawler.config import settings as config
from crawler.clock import MockClock
from crawler.recovery.lease import Lease
from crawler.session.crawlsession import CrawlSession
from crawler.session.runtime import Plan

from tests.unit.doubles import IdleRuntime, inline

TTL = 4.0
START_S = 30.0  # how long the runtime takes to start, on the session's clock


class SlowRuntime(IdleRuntime):
    """Starts in START_S of the clock; otherwise does nothing."""

    def __init__(self, clock: MockClock) -> None:
        self.clock = clock
        self.started_at: float | None = None

    async def start(self, plan: Plan) -> None:
        await self.clock.sleep(START_S)
        self.started_at = self.clock.now()


async def test_the_lease_is_renewed_while_the_runtime_starts(tmp_path, monkeypatch):
    renewals: list[float] = []
    clock = MockClock()
    real_renew = Lease.renew

    def renew(self):
        renewals.append(clock.now())
        return real_renew(self)

    monkeypatch.setattr(Lease, "renew", renew)
    cfg = config.from_dict({"seeds": ["http://a.test/"], "output": {"path": str(tmp_path / "out")},
                            "runtime": {"lease_ttl_s": TTL}})
    runtime = SlowRuntime(clock)
    session = CrawlSession(cfg, runtime, clock=clock, run_blocking=inline)  # the lease's file I/O, inline: no threads
    assert not session.ready
    task = asyncio.ensure_future(session.start())
    await clock.run_until(task.done, max_time=START_S + 10)
    assert task.result() == "new" and session.ready and runtime.started_at == START_S
    # Never longer than a quarter of the TTL (plus one heartbeat tick) without a renewal
    # while starting: the lease never came near expiring.
    beat = cfg.runtime.driver_timeout_s / 5
    during = [0.0] + [t for t in renewals if t <= START_S]
    assert len(during) > START_S / TTL and all(b - a <= TTL / 4 + beat + 1e-9 for a, b in zip(during, during[1:]))
    session._heartbeat_task.cancel()
    session.lease.release()


def test_a_damaged_crawl_record_is_one_line_naming_the_fix_and_force_starts_over(tmp_path):
    from crawler.errors import StorageError
    from crawler.recovery.crawlrecord import prepare

    cfg = config.from_dict({"seeds": ["https://seed.example/"], "output": {"path": str(tmp_path / "out")}})
    (tmp_path / "out" / "state").mkdir(parents=True)
    for damage in (b"{not json", b"\xff\xfe", b"[1, 2]"):
        (tmp_path / "out" / "state" / "crawl.json").write_bytes(damage)
        try:
            prepare(cfg, 2, 2)
        except StorageError as exc:
            assert "crawl record is damaged" in str(exc) and "--force" in str(exc) and "\n" not in str(exc)
        else:
            raise AssertionError("a damaged record was read as a crawl")
    rec, mode = prepare(cfg, 2, 2, force=True)
    assert mode == "new" and rec.fingerprint == cfg.fingerprint()
