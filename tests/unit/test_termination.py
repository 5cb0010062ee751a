"""TerminationDetector: "done" only from two identical rounds in which every shard was idle
and held no paused work (docs/invariants.md #4). A table of poll sequences, each row a
story of the crawl's last moments, with the round at which "done" may first be said."""

from __future__ import annotations

import pytest

from crawler.shardstatus import ShardStatus
from crawler.termination import TerminationDetector


def shard(name="shard-000", *, idle=True, inc="a", sent=0, received=0, requests=0, queued=0, paused=0):
    return ShardStatus(
        shard=name, incarnation=inc, idle=idle, batches_sent=sent, batches_received=received,
        counters={"requests": requests}, queued=queued, paused_urls=paused,
    )


A, B = "shard-000", "shard-001"
QUIET = [shard(A, received=3), shard(B, sent=3)]

ROWS = {
    # Two identical idle rounds: done at the second.
    "quiet twice": ([QUIET, QUIET], 1),
    # One idle round is never enough: a batch may be in flight between polls.
    "quiet once": ([QUIET], None),
    # B received a batch between the rounds: its vector changed, wait another round.
    "late batch": ([QUIET, [shard(A, received=3), shard(B, sent=3, received=1)], [shard(A, received=3), shard(B, sent=3, received=1)]], 2),
    # A busy shard resets the run of quiet rounds.
    "busy in between": ([QUIET, [shard(A, idle=False, received=3), shard(B, sent=3)], QUIET, QUIET], 3),
    # A restarted shard starts its counters afresh: the new incarnation is not the old quiet.
    "restart": ([QUIET, [shard(A, inc="b"), shard(B, sent=3)], [shard(A, inc="b"), shard(B, sent=3)]], 2),
    # Paused work is not done: the crawl waits for an unpause or a stop.
    "paused": ([[shard(A, paused=4, queued=4), shard(B)]] * 5, None),
    # Another request went out (and finished) between two idle polls.
    "request between": ([QUIET, [shard(A, received=3, requests=1), shard(B, sent=3)]], None),
    # Sent and received need not balance: a retried delivery is received twice.
    "unbalanced totals": ([[shard(A, received=5), shard(B, sent=3)]] * 2, 1),
    # Shards answer in any order: the vector is by shard name.
    "order": ([QUIET, list(reversed(QUIET))], 1),
}


@pytest.mark.parametrize("rounds, first_done", ROWS.values(), ids=ROWS.keys())
def test_done_is_said_exactly_from_the_round_the_proof_allows(rounds, first_done) -> None:
    d = TerminationDetector()
    said = [d.observe(r) for r in rounds]
    expected = [first_done is not None and i >= first_done for i in range(len(rounds))]
    assert said == expected


def test_a_reset_or_a_driver_batch_needs_two_more_quiet_rounds() -> None:
    for interrupt in ("reset", "driver"):
        d = TerminationDetector()
        assert d.observe(QUIET) is False
        if interrupt == "reset":
            d.reset()  # a shard did not answer: no consistent view this round
        else:
            d.note_driver_batches(2)  # seeds delivered by the driver between the polls
        assert d.observe(QUIET) is False
        assert d.observe(QUIET) is True
    assert d.driver_batches_sent == 2 and d.polls == 3
