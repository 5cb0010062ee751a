"""TerminationDetector: "done" only from two identical rounds in which every shard was idle
and held no paused work (docs/invariants.md #4). A table of poll sequences, each row a
story of the crawl's last moments: rounds of shard statuses, and between them the
driver's resets (a shard did not answer) and its own seed batches. Then the same proof
against a real LinkRouter whose batch is between two shards."""

from __future__ import annotations

import asyncio

import pytest

from crawler.clock import MockClock
from crawler.frontier.urlitem import UrlItem
from crawler.engine.linkrouter import LinkRouter
from crawler.engine.status import ShardStatus
from crawler.session.termination import TerminationDetector
from crawler.counters import ShardCounters

from tests.unit.doubles import MemorySeen


def shard(name="shard-000", *, idle=True, inc="a", sent=0, received=0, requests=0, queued=0, paused=0):
    return ShardStatus(
        shard=name, incarnation=inc, idle=idle, batches_sent=sent, batches_received=received,
        counters=ShardCounters(requests=requests), queued=queued, paused_urls=paused,
    )


A, B = "shard-000", "shard-001"
QUIET = [shard(A, received=3), shard(B, sent=3)]
RESET = "reset"  # a shard did not answer this poll: no consistent view
SEEDS = "seeds"  # the driver delivered a seed batch between two polls

# Each row: the steps, and what each observe() says ("-" not done, "D" done).
ROWS = {
    # Two identical idle rounds: done at the second.
    "quiet twice": ([QUIET, QUIET], "-D"),
    # One idle round is never enough: a batch may be in flight between polls.
    "quiet once": ([QUIET], "-"),
    # Once proven, it stays proven while nothing moves.
    "quiet thrice": ([QUIET, QUIET, QUIET], "-DD"),
    # B received a batch between the rounds: its vector changed, wait another round.
    "late batch": ([QUIET, [shard(A, received=3), shard(B, sent=3, received=1)],
                    [shard(A, received=3), shard(B, sent=3, received=1)]], "--D"),
    # A sender is busy until the receiver accepted: a batch between shards is never quiet.
    "batch between shards": ([[shard(A, received=3), shard(B, idle=False, sent=4)]] * 4, "----"),
    # A busy shard resets the run of quiet rounds.
    "busy in between": ([QUIET, [shard(A, idle=False, received=3), shard(B, sent=3)], QUIET, QUIET], "---D"),
    # Another request went out (and finished) between two idle polls.
    "request between": ([QUIET, [shard(A, received=3, requests=1), shard(B, sent=3)]], "--"),
    # Sent and received need not balance: a retried delivery is received twice.
    "unbalanced totals": ([[shard(A, received=5), shard(B, sent=3)]] * 2, "-D"),
    # Shards answer in any order: the vector is by shard name.
    "order": ([QUIET, list(reversed(QUIET))], "-D"),
    # -- resets: an unanswered poll breaks the run; two fresh quiet rounds are needed.
    "reset between quiet rounds": ([QUIET, RESET, QUIET, QUIET], "--D"),
    "reset after done": ([QUIET, QUIET, RESET, QUIET, QUIET], "-D-D"),
    "reset every other poll": ([QUIET, RESET, QUIET, RESET, QUIET, RESET, QUIET], "----"),
    "seeds between quiet rounds": ([QUIET, SEEDS, QUIET, QUIET], "--D"),
    # -- restarted incarnations: a restart starts its counters afresh, so its vector is new.
    "restart": ([QUIET, [shard(A, inc="b"), shard(B, sent=3)], [shard(A, inc="b"), shard(B, sent=3)]], "--D"),
    # Even with the very same counts, a new incarnation is not the old quiet.
    "restart, same counts": ([QUIET, [shard(A, inc="b", received=3), shard(B, sent=3)],
                              [shard(A, inc="b", received=3), shard(B, sent=3)]], "--D"),
    # Restarted again before its second quiet round.
    "restart twice": ([QUIET, [shard(A, inc="b", received=3), shard(B, sent=3)], [shard(A, inc="c", received=3), shard(B, sent=3)],
                       [shard(A, inc="c", received=3), shard(B, sent=3)]], "---D"),
    # A shard that reports no incarnation (the in-process runtime) is compared by its counts.
    "no incarnation": ([[s.but(incarnation="") for s in QUIET]] * 2, "-D"),
    # -- paused URLs: paused is not done; the crawl waits for an unpause or a stop.
    "paused": ([[shard(A, paused=4, queued=4), shard(B)]] * 5, "-----"),
    "paused on one shard after a quiet round": (
        [QUIET, [shard(A, received=3, paused=1, queued=1), shard(B, sent=3)], QUIET, QUIET], "---D"),
    # Unpaused: the URLs are fetched (requests move), then two quiet rounds.
    "unpaused and drained": ([[shard(A, paused=2, queued=2), shard(B)], [shard(A, idle=False, queued=1, requests=1), shard(B)],
                              [shard(A, requests=2), shard(B)], [shard(A, requests=2), shard(B)]], "---D"),
    # Paused work on a shard that then restarts: still paused, still not done.
    "paused across a restart": ([[shard(A, paused=2, queued=2), shard(B)], [shard(A, inc="b", paused=2, queued=2), shard(B)],
                                 [shard(A, inc="b", paused=2, queued=2), shard(B)]], "---"),
}


@pytest.mark.parametrize("steps, said", ROWS.values(), ids=ROWS.keys())
def test_done_is_said_exactly_from_the_round_the_proof_allows(steps, said) -> None:
    d = TerminationDetector()
    out = []
    for step in steps:
        if step == RESET:
            d.reset()
        elif step == SEEDS:
            d.note_driver_batches(1)
        else:
            out.append("D" if d.observe(step) else "-")
    assert "".join(out) == said
    assert d.polls == len(said)


def test_the_driver_counts_its_own_seed_batches() -> None:
    d = TerminationDetector()
    d.note_driver_batches(2)
    d.note_driver_batches(3)
    assert d.driver_batches_sent == 5


async def test_not_done_while_a_routers_batch_is_between_shards() -> None:
    """Shard A routes a link to shard B through a real LinkRouter; B's accept is held.
    The driver polls once per second of the mock clock, B before A. The worst moment
    comes last: B is polled (nothing received), then the batch lands and A becomes
    idle before its own poll, so that round looks all idle. Done may only follow two
    more rounds, once B's count of received batches has been seen to move and settle."""
    clock = MockClock()
    hold = asyncio.Event()
    received = {"batches": 0, "requests": 0}

    async def deliver(owner: str, items: list[UrlItem]) -> None:
        await hold.wait()
        received["batches"] += 1
        received["requests"] += len(items)  # B fetches them at once (and finds nothing new)

    router = LinkRouter(MemorySeen(), lambda host: B, deliver, flush_interval_s=0.05, clock=clock)

    def status_a():
        st = router.stats()
        return shard(A, idle=router.pending() == 0, sent=st["batches_sent"], requests=1)

    def status_b():
        return shard(B, received=received["batches"], requests=received["requests"])

    d = TerminationDetector()
    said = []
    router.submit([UrlItem("http://b.test/1", 1, "http://a.test/")])
    for _ in range(5):  # buffered, then out for delivery: A is busy throughout
        said.append(d.observe([status_a(), status_b()]))
        clock.advance(1.0)
        await clock.settle()
    assert router.stats()["batches_sent"] == 1 and router.pending() == 1
    b_before = status_b()
    hold.set()
    await clock.settle()
    said.append(d.observe([status_a(), b_before]))  # all idle, but B's view is stale
    said.append(d.observe([status_a(), status_b()]))  # B received a batch: vector moved
    said.append(d.observe([status_a(), status_b()]))  # nothing moved: done
    assert said == [False] * 7 + [True]
