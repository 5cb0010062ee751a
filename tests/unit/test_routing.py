"""LinkRouter on the mock clock: discovered links reach the shard that owns their host,
once, in one batch per owner per flush; a receiver that refuses for now is asked again
for as long as the router runs, and a stop ends the retries at once; a delivery that
fails with a bug is retried with backoff and then counted lost; a batch given up or
abandoned has its seen marks undone; a batch whose seen check failed is delivered
unfiltered; and the router counts as busy until the owner has accepted (what
termination relies on)."""

from __future__ import annotations

import asyncio

from crawler.clock import MockClock
from crawler.errors import FencedError
from crawler.frontier.urlitem import UrlItem
from crawler.engine.linkrouter import LinkRouter

from tests.unit.doubles import MemorySeen

FLUSH_S = 0.05


class Owners:
    """The shards' accept calls: records what each owner accepted, and when."""

    def __init__(self, clock: MockClock, fail: int = 0, hold: asyncio.Event | None = None,
                 down: frozenset[str] | set[str] = frozenset(), error: type[Exception] = ConnectionError) -> None:
        self.clock = clock
        self.fail = fail  # the first ``fail`` calls raise
        self.down = down  # owners whose every call raises
        self.error = error  # what they raise: a refusal (retried for ever) or a bug (bounded)
        self.hold = hold  # while set, accepting waits (a batch between shards)
        self.attempts: list[tuple[str, float]] = []
        self.accepted: dict[str, list[str]] = {}

    async def deliver(self, owner: str, items: list[UrlItem]) -> None:
        self.attempts.append((owner, self.clock.now()))
        if self.hold is not None:
            await self.hold.wait()
        if owner in self.down:
            raise self.error(f"{owner} is down")
        if self.fail:
            self.fail -= 1
            raise self.error(f"{owner} restarting")
        self.accepted.setdefault(owner, []).extend(i.url for i in items)


def owner_of(host: str) -> str:
    return "shard-b" if host.startswith("b.") else "shard-a"


def items(*urls: str) -> list[UrlItem]:
    return [UrlItem(u, 1, "http://a.test/") for u in urls]


def router(seen: MemorySeen, owners: Owners, clock: MockClock, **kw) -> LinkRouter:
    return LinkRouter(seen, owner_of, owners.deliver, clock=clock, **{"flush_interval_s": FLUSH_S, **kw})


async def test_links_are_seen_checked_together_and_each_owner_gets_its_novel_links_once() -> None:
    clock = MockClock()
    seen, owners = MemorySeen(known=("http://a.test/old",)), Owners(clock)
    r = router(seen, owners, clock)
    first = r.submit(items("http://a.test/1", "http://b.test/1", "http://a.test/old"))
    second = r.submit(items("http://b.test/2", "http://a.test/1"))  # a.test/1 again, from another page
    await clock.settle()
    assert seen.calls == [] and r.pending() == 5  # buffered until the flush timer
    await clock.run_until(lambda: first.done() and second.done())
    assert clock.now() == FLUSH_S and first.result() is True and second.result() is True
    assert len(seen.calls) == 1  # one seen call for the whole flush
    assert owners.accepted == {"shard-a": ["http://a.test/1"], "shard-b": ["http://b.test/1", "http://b.test/2"]}
    assert len(owners.attempts) == 2  # one delivery per owner
    st = r.stats()
    assert (st["links_submitted"], st["links_novel"], st["links_already_seen"], st["batches_sent"]) == (5, 3, 2, 2)
    assert r.pending() == 0 and st["links_in_transit"] == 0


async def test_a_full_buffer_flushes_at_once_without_waiting_for_the_timer() -> None:
    clock = MockClock()
    owners = Owners(clock)
    r = router(MemorySeen(), owners, clock, batch_size=3)
    done = r.submit(items("http://a.test/1", "http://a.test/2", "http://a.test/3"))
    await clock.settle()
    assert done.done() and clock.now() == 0.0
    assert owners.accepted == {"shard-a": ["http://a.test/1", "http://a.test/2", "http://a.test/3"]}


def links(n: int, host: str = "a.test") -> list[UrlItem]:
    return items(*(f"http://{host}/{i}" for i in range(n)))


async def test_light_traffic_is_flushed_early_and_heavy_traffic_waits_for_a_larger_batch() -> None:
    """The adaptive window (runtime.link_flush_early_s / link_flush_small): a few links go
    after the short wait, as many as keep arriving under load wait for the long window,
    so one flush carries them all (one seen call, one delivery per owner)."""
    clock = MockClock()
    seen, owners = MemorySeen(), Owners(clock)
    r = router(seen, owners, clock, flush_interval_s=0.25, early_flush_s=0.05, small_batch=10, batch_size=1000)
    light = r.submit(links(3))
    await clock.run_until(light.done)
    assert clock.now() == 0.05 and len(seen.calls) == 1  # light: no longer wait than before

    start = clock.now()
    heavy = [r.submit(links(6, "b.test"))]
    clock.advance(0.03)
    heavy.append(r.submit(items(*(f"http://b.test/x{i}" for i in range(6)))))  # 12 buffered >= 10
    clock.advance(0.03)  # past the early check: not flushed, still filling
    await clock.settle()
    assert len(seen.calls) == 1 and r.pending() == 12
    heavy.append(r.submit(items(*(f"http://a.test/y{i}" for i in range(5)))))
    await clock.run_until(lambda: all(f.done() for f in heavy))
    assert round(clock.now() - start, 6) == 0.25  # the whole window, counted from the first link
    assert len(seen.calls) == 2 and len(seen.calls[1]) == 17  # one seen call for all of them
    assert r.pending() == 0


async def test_a_full_buffer_does_not_wait_for_the_long_window() -> None:
    clock = MockClock()
    owners = Owners(clock)
    r = router(MemorySeen(), owners, clock, flush_interval_s=0.25, early_flush_s=0.05, small_batch=10, batch_size=20)
    first = r.submit(links(15))
    clock.advance(0.06)  # over the small batch at the early check: waits
    await clock.settle()
    assert not first.done()
    second = r.submit(links(5, "b.test"))  # the batch is full: flushed now, not at 0.25
    await clock.settle()
    assert first.done() and second.done() and clock.now() == 0.06


async def test_a_failed_delivery_is_retried_with_backoff_and_accepted_once() -> None:
    clock = MockClock()
    owners = Owners(clock, fail=2)
    r = router(MemorySeen(), owners, clock)
    done = r.submit(items("http://a.test/1"))
    await clock.run_until(done.done)
    assert done.result() is True
    # First try at the flush, then 0.05 s and 0.1 s of backoff.
    assert [t for _, t in owners.attempts] == [FLUSH_S, FLUSH_S + 0.05, FLUSH_S + 0.15]
    assert owners.accepted == {"shard-a": ["http://a.test/1"]}
    st = r.stats()
    assert (st["batches_failed"], st["links_lost"], st["links_novel"]) == (2, 0, 1)


async def test_a_delivery_that_keeps_failing_with_a_bug_is_given_up_and_its_marks_undone() -> None:
    clock = MockClock()
    seen, owners = MemorySeen(known=("http://a.test/old",)), Owners(clock, down={"shard-a"}, error=RuntimeError)
    r = router(seen, owners, clock, max_attempts=3)
    lost = r.submit(items("http://a.test/1", "http://a.test/2"))
    replayed = r.submit(items("http://a.test/old"), bypass_seen=True)
    await clock.run_until(lambda: lost.done() and replayed.done())
    assert lost.result() is False and replayed.result() is False
    assert [t for _, t in owners.attempts] == [FLUSH_S, FLUSH_S + 0.05, FLUSH_S + 0.15]  # max_attempts, then no more
    st = r.stats()
    assert (st["links_lost"], st["links_novel"], st["batches_failed"]) == (3, 0, 3)
    assert r.pending() == 0  # given up: no longer in transit (the pages are not acked: tests/unit/test_delivery.py)
    assert owners.accepted == {}
    # The marks this flush made are undone, so another page's link admits them again; a
    # mark it did not make (a replayed link already seen) stays.
    assert sorted(seen.forgotten) == ["http://a.test/1", "http://a.test/2"]
    assert seen.seen == {"http://a.test/old"} and st["links_seen_marks_undone"] == 2


async def test_a_receiver_that_refuses_for_now_is_asked_again_until_it_takes_the_batch() -> None:
    """A fenced receiver (its driver silent) is "not now", never "lost": 30 s of
    refusals, far past max_attempts, and the batch is delivered once it is taken."""
    clock = MockClock()
    seen, owners = MemorySeen(), Owners(clock, down={"shard-a"}, error=FencedError)
    r = router(seen, owners, clock, max_attempts=3)
    done = r.submit(items("http://a.test/1", "http://b.test/1"))
    await clock.run_until(lambda: clock.now() >= 30.0)
    assert not done.done() and r.pending() == 2  # busy the whole time: the crawl cannot end
    assert len(owners.attempts) > 10
    gaps = [b - a for (o1, a), (o2, b) in zip(owners.attempts, owners.attempts[1:]) if o1 == o2 == "shard-a"]
    assert max(gaps) == 2.0  # backoff doubles up to its cap, on the clock
    owners.down = set()
    await clock.run_until(done.done)
    assert done.result() is True
    assert owners.accepted == {"shard-b": ["http://b.test/1"], "shard-a": ["http://a.test/1"]}
    st = r.stats()
    assert st["links_lost"] == 0 and st["batches_refused"] == len(owners.attempts) - 2 and seen.forgotten == []


async def test_a_stop_ends_the_retries_at_once_and_undoes_the_marks() -> None:
    clock = MockClock()
    seen, owners = MemorySeen(), Owners(clock, down={"shard-a"}, error=FencedError)
    r = router(seen, owners, clock)
    waiting = r.submit(items("http://a.test/1"))
    await clock.run_until(lambda: len(owners.attempts) == 3)
    r.submit(items("http://a.test/2"))  # buffered, not yet seen-checked
    r.stop()
    closing = asyncio.ensure_future(r.close())
    await clock.settle()
    # No clock time passed: the stop did not wait for the backoff, nor for the timer.
    assert closing.done() and waiting.done() and waiting.result() is False
    assert clock.next_deadline() is None and r.pending() == 0
    assert len(owners.attempts) == 3 and owners.accepted == {}
    assert seen.forgotten == ["http://a.test/1"]  # the buffered link was never marked
    assert r.stats()["links_unsent"] == 2
    late = r.submit(items("http://a.test/3"))  # a page finishing after the stop
    assert late.done() and late.result() is False and seen.calls == [["http://a.test/1"]]


async def test_marks_that_cannot_be_undone_are_counted() -> None:
    clock = MockClock()
    seen, owners = MemorySeen(forget_fails=True), Owners(clock, down={"shard-a"}, error=RuntimeError)
    r = router(seen, owners, clock, max_attempts=1)
    lost = r.submit(items("http://a.test/1"))
    await clock.run_until(lost.done)
    assert lost.result() is False
    st = r.stats()
    assert (st["links_lost"], st["links_seen_marks_undone"], st["links_seen_marks_kept"]) == (1, 0, 1)


async def test_a_lost_delivery_costs_only_that_owners_links() -> None:
    clock = MockClock()
    owners = Owners(clock, down={"shard-a"}, error=RuntimeError)
    r = router(MemorySeen(), owners, clock, max_attempts=2)
    done = r.submit(items("http://a.test/1", "http://b.test/1", "http://b.test/2"))
    await clock.run_until(done.done)
    # The page's links did not all arrive, so the page is not acked as routed...
    assert done.result() is False
    # ...but the healthy owner got its batch, on the first try.
    assert owners.accepted == {"shard-b": ["http://b.test/1", "http://b.test/2"]}
    assert [a for a in owners.attempts if a[0] == "shard-b"] == [("shard-b", FLUSH_S)]
    st = r.stats()
    assert (st["links_lost"], st["links_novel"]) == (1, 2)


async def test_a_batch_whose_seen_check_failed_is_delivered_unfiltered() -> None:
    clock = MockClock()
    seen, owners = MemorySeen(known=("http://a.test/old",), fail=1), Owners(clock)
    r = router(seen, owners, clock)
    done = r.submit(items("http://a.test/old", "http://a.test/new"))
    await clock.run_until(done.done)
    # The failed call may have marked part of the batch: asking again would drop those
    # URLs as "seen". Every link goes to its owner, whose store de-duplicates.
    assert done.result() is True and len(seen.calls) == 1
    assert owners.accepted == {"shard-a": ["http://a.test/old", "http://a.test/new"]}
    st = r.stats()
    assert (st["links_seen_bypassed"], st["batches_failed"], st["links_already_seen"]) == (2, 1, 0)


async def test_links_of_a_replayed_page_bypass_the_seen_filter() -> None:
    clock = MockClock()
    seen, owners = MemorySeen(known=("http://a.test/1", "http://a.test/2")), Owners(clock)
    r = router(seen, owners, clock)
    replay = r.submit(items("http://a.test/1"), bypass_seen=True)
    normal = r.submit(items("http://a.test/2"))
    await clock.run_until(lambda: replay.done() and normal.done())
    assert owners.accepted == {"shard-a": ["http://a.test/1"]}  # the replayed one only
    assert r.stats()["links_already_seen"] == 1


async def test_links_count_as_in_transit_until_the_owner_has_accepted_them() -> None:
    clock = MockClock()
    hold = asyncio.Event()
    owners = Owners(clock, hold=hold)
    r = router(MemorySeen(), owners, clock)
    done = r.submit(items("http://a.test/1", "http://b.test/1"))
    await clock.run_until(lambda: len(owners.attempts) == 2)
    # Out of the buffer, seen-checked, handed to the owners, not yet accepted: still busy.
    for _ in range(3):
        clock.advance(10.0)
        await clock.settle()
        assert r.pending() == 2 and r.stats()["links_in_transit"] == 2 and not done.done()
    hold.set()
    await clock.run_until(done.done)
    assert r.pending() == 0 and done.result() is True


async def test_flush_waits_until_everything_submitted_is_delivered() -> None:
    clock = MockClock()
    owners = Owners(clock, fail=1)
    r = router(MemorySeen(), owners, clock, flush_interval_s=3600.0)
    r.submit(items("http://a.test/1"))
    flushing = asyncio.ensure_future(r.flush())
    await clock.run_until(flushing.done)
    assert clock.now() == 0.05  # no wait for the timer: one retry's backoff only
    assert owners.accepted == {"shard-a": ["http://a.test/1"]} and r.pending() == 0


async def test_an_empty_submit_is_done_at_once_and_starts_no_timer() -> None:
    clock = MockClock()
    r = router(MemorySeen(), Owners(clock), clock)
    fut = r.submit([])
    assert fut.done() and fut.result() is True and clock.next_deadline() is None and r.pending() == 0
