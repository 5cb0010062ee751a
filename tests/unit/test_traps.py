"""Tests for crawler.policy.hostbudget: per-link trap rules and the per-host budget."""

from __future__ import annotations

import json
from collections import deque

import pytest

from crawler.errors import ConfigError, StorageError
from crawler.policy.hostbudget import HostBudget
from crawler.policy.traprules import TrapRules

# --- TrapRules --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "depth", "expected"),
    [
        ("http://a.test/x", 3, None),
        ("http://a.test/x", 4, "depth"),
        ("http://a.test/" + "x" * 86, 0, None),  # exactly 100 characters
        ("http://a.test/" + "x" * 87, 0, "url_length"),
        ("http://a.test/?a=1&b=2", 0, None),
        ("http://a.test/?a=1&b=2&c=3", 0, "query_params"),
        ("http://a.test/?", 0, None),
        ("http://a.test/a/b/a/b", 0, None),  # each segment twice: allowed
        ("http://a.test/a/b/a/b/a/b", 0, "path_repeats"),
        ("http://a.test/cal/2024/cal/2025/cal/2026/", 0, "path_repeats"),
        ("http://a.test/a//b///c////d/", 0, None),  # empty segments do not count
        ("http://a.test/x/y/z?p=/a/a/a/a", 0, None),  # the query is not the path
        ("http://a.test/a/a/a?x=1", 0, "path_repeats"),
        # the first failing rule in the documented order is named
        ("http://a.test/" + "a/" * 50 + "?a&b&c", 9, "depth"),
        ("http://a.test/" + "a/" * 50 + "?a&b&c", 0, "url_length"),
        ("http://a.test/a/a/a?a&b&c", 0, "query_params"),
    ],
)
def test_trap_rules_each_rule(url: str, depth: int, expected: str | None) -> None:
    rules = TrapRules(max_depth=3, max_url_length=100, max_query_params=2, max_path_repeats=2)
    assert rules.check(url, depth) == expected


def test_trap_rules_none_disables_each_rule() -> None:
    url = "http://a.test/" + "a/" * 200 + "?" + "&".join(f"p{i}=1" for i in range(100))
    assert TrapRules(None, None, None, None).check(url, 10_000) is None
    assert TrapRules(0, None, None, None).check(url, 1) == "depth"
    assert TrapRules(None, 100, None, None).check(url, 1) == "url_length"
    assert TrapRules(None, None, 99, None).check(url, 1) == "query_params"
    assert TrapRules(None, None, None, 199).check(url, 1) == "path_repeats"
    assert TrapRules(None, None, 100, 200).check(url, 1) is None


def test_trap_rules_relative_link_loop_is_cut() -> None:
    """A page at /a/b/ linking to "a/b/" produces /a/b/a/b/a/b/...: stopped early."""
    rules = TrapRules(None, None, None, 3)
    url, depth = "http://a.test/a/b/", 0
    while rules.check(url, depth) is None:
        url, depth = url + "a/b/", depth + 1
        assert depth < 10
    assert depth == 3  # /a/b repeated 4 times is the first rejected URL


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"max_depth": -1}, "max_depth"),
        ({"max_url_length": 0}, "max_url_length"),
        ({"max_query_params": -2}, "max_query_params"),
        ({"max_path_repeats": 0}, "max_path_repeats"),
        ({"max_depth": "5"}, "max_depth"),
        ({"max_depth": True}, "max_depth"),
        ({"max_url_length": 10.5}, "max_url_length"),
    ],
)
def test_trap_rules_bad_config(kwargs: dict, name: str) -> None:
    args = {"max_depth": None, "max_url_length": None, "max_query_params": None, "max_path_repeats": None}
    args.update(kwargs)
    with pytest.raises(ConfigError, match=name):
        TrapRules(**args)


# --- HostBudget: budget -------------------------------------------------------------------


def test_budget_admits_up_to_the_limit_per_host() -> None:
    budget = HostBudget(3)
    assert [budget.admit("a.test") for _ in range(5)] == [True, True, True, False, False]
    assert budget.remaining("a.test") == 0
    assert budget.admit("b.test")  # hosts are independent
    assert budget.remaining("b.test") == 2
    assert budget.remaining("never.seen") == 3
    stats = budget.stats()
    assert stats["admitted"] == 4 and stats["rejected"] == 2
    assert stats["hosts"] == 2 and stats["exhausted_hosts"] == 1


def test_budget_none_is_unlimited_while_pages_are_novel() -> None:
    budget = HostBudget(None)
    for i in range(1000):
        assert budget.admit("a.test")
        budget.record_fetch("a.test", duplicate=(i % 3 == 0))  # novelty 2/3 > 0.5
    assert budget.remaining("a.test") is None
    assert budget.penalty("a.test") == 1.0
    assert budget.stats()["cuts"] == 0


def test_zero_budget_admits_nothing() -> None:
    budget = HostBudget(0)
    assert not budget.admit("a.test")


# --- HostBudget: novelty, cut, penalty ---------------------------------------------------


def test_novelty_is_one_until_min_samples_then_share_of_new_pages() -> None:
    budget = HostBudget(100, novelty_window=10, novelty_min_samples=4)
    assert budget.novelty("a.test") == 1.0
    for _ in range(3):
        budget.record_fetch("a.test", duplicate=True)
    assert budget.novelty("a.test") == 1.0  # 3 samples < 4
    budget.record_fetch("a.test", duplicate=False)
    assert budget.novelty("a.test") == pytest.approx(0.25)
    for _ in range(10):
        budget.record_fetch("a.test", duplicate=False)
    assert budget.novelty("a.test") == 1.0  # only the last 10 fetches count
    for _ in range(7):
        budget.record_fetch("a.test", duplicate=True)
    assert budget.novelty("a.test") == pytest.approx(0.3)


def test_a_full_window_of_duplicates_cuts_the_remaining_budget() -> None:
    budget = HostBudget(1000, novelty_window=10, novelty_min_samples=5, cut_factor=0.5)
    for _ in range(100):
        budget.admit("a.test")
    for _ in range(9):
        budget.record_fetch("a.test", duplicate=True)
    assert budget.remaining("a.test") == 900  # window not complete yet
    budget.record_fetch("a.test", duplicate=True)
    assert budget.remaining("a.test") == 450
    for _ in range(10):  # a novel window: no cut, nothing given back
        budget.record_fetch("a.test", duplicate=False)
    assert budget.remaining("a.test") == 450
    for _ in range(10):
        budget.record_fetch("a.test", duplicate=True)
    assert budget.remaining("a.test") == 225
    assert budget.stats()["cuts"] == 2


def test_novel_host_is_never_cut() -> None:
    budget = HostBudget(50, novelty_window=5, novelty_min_samples=5)
    for i in range(50):
        assert budget.admit("a.test")
        budget.record_fetch("a.test", duplicate=(i % 5 == 0))  # novelty 0.8
    assert budget.remaining("a.test") == 0  # spent normally, not cut
    assert budget.stats()["cuts"] == 0


def test_penalty_grows_to_cap_under_low_novelty_and_relaxes_back() -> None:
    budget = HostBudget(None, novelty_window=10, novelty_min_samples=5, max_penalty=8.0)
    assert budget.penalty("a.test") == 1.0
    for _ in range(4):
        budget.record_fetch("a.test", duplicate=True)
    assert budget.penalty("a.test") == 1.0  # fewer than min_samples
    for _ in range(16):
        budget.record_fetch("a.test", duplicate=True)
    # 16 low-novelty fetches: doubled per window of 10, i.e. 2 ** 1.6
    assert budget.penalty("a.test") == pytest.approx(2 ** 1.6)
    history = []
    for _ in range(100):
        budget.record_fetch("a.test", duplicate=True)
        history.append(budget.penalty("a.test"))
    assert history == sorted(history)  # monotone while novelty stays low
    assert budget.penalty("a.test") == 8.0  # capped
    for _ in range(200):
        budget.record_fetch("a.test", duplicate=False)
    assert budget.penalty("a.test") == 1.0  # recovered
    assert budget.penalty("other.test") == 1.0


def test_threshold_zero_disables_cuts_and_penalties() -> None:
    budget = HostBudget(100, novelty_threshold=0.0)
    for _ in range(100):
        budget.admit("a.test")
        budget.record_fetch("a.test", duplicate=True)
    assert budget.penalty("a.test") == 1.0
    assert budget.stats()["cuts"] == 0


def _crawl_all_duplicates(budget: HostBudget, fanout: int) -> tuple[int, int]:
    """Simulate a host whose every page is a near-duplicate with ``fanout`` new links.

    Order per page as in the pipeline: fetch, fingerprint -> record_fetch, then the
    page's links are offered to admit(). Returns (admits, fetches).
    """
    host = "trap.test"
    queue: deque[int] = deque()
    next_id = 0
    assert budget.admit(host)
    queue.append(next_id)
    admits, fetches = 1, 0
    while queue:
        queue.popleft()
        fetches += 1
        budget.record_fetch(host, duplicate=True)
        for _ in range(fanout):
            next_id += 1
            if budget.admit(host):
                admits += 1
                queue.append(next_id)
        assert fetches < 1_000_000, "the trap did not stop"
    return admits, fetches


def test_all_duplicate_host_worked_example() -> None:
    """Budget 100, windows of 4, cut 0.5, 10 links per page, every page a duplicate.

    By hand: the seed is admitted (99 left). Fetches 1-3 admit 10 each (69 left). Fetch
    4 ends the first window, all duplicates: cut to floor(69 * 0.5) = 34, then its 10
    links (24 left). Fetches 5 and 6 admit 10 each (4 left), fetch 7 the last 4. Fetch 8
    cuts 0 to 0; nothing more is admitted and the 64 queued URLs drain. Admitted and
    fetched: 1 + 30 + 10 + 20 + 4 = 65; a cut at the end of every full window of 4
    fetches: 16; links refused: 65 * 10 - 64 = 586.
    """
    budget = HostBudget(100, novelty_window=4, novelty_min_samples=4, cut_factor=0.5)
    assert _crawl_all_duplicates(budget, fanout=10) == (65, 65)
    stats = budget.stats()
    assert (stats["cuts"], stats["rejected"], budget.remaining("trap.test")) == (16, 586, 0)


def _documented_rule(limit: int | None, window: int, cut: float, fanout: int) -> tuple[int, int]:
    """The HostBudget docstring's rule applied by hand to :func:`_crawl_all_duplicates`'s host.

    Each admit spends one page; the end of every ``window`` fetches (all duplicates here)
    multiplies what is left by ``cut``, rounded down; without a limit, the first cut sets
    the budget to ``cut`` x the pages admitted so far. Returns (admits, fetches).
    """
    remaining, admits, queued, fetches = limit, 0, 0, 0

    def admit() -> None:
        nonlocal remaining, admits, queued
        if remaining is None or remaining > 0:
            remaining = None if remaining is None else remaining - 1
            admits += 1
            queued += 1

    admit()
    while queued:
        queued -= 1
        fetches += 1
        if fetches % window == 0:
            remaining = int((admits if remaining is None else remaining) * cut)
        for _ in range(fanout):
            admit()
    return admits, fetches


@pytest.mark.parametrize(("limit", "window", "cut", "fanout"), [
    (1_000_000, 20, 0.5, 1), (1_000_000, 20, 0.5, 10), (1_000_000, 20, 0.5, 50),
    (5_000, 7, 0.3, 4), (None, 20, 0.5, 10), (None, 5, 0.75, 3), (40, 10, 0.5, 10),
])
def test_all_duplicate_host_is_admitted_what_the_documented_rule_says(
    limit: int | None, window: int, cut: float, fanout: int
) -> None:
    budget = HostBudget(limit, novelty_window=window, novelty_min_samples=min(10, window), cut_factor=cut)
    assert _crawl_all_duplicates(budget, fanout) == _documented_rule(limit, window, cut, fanout)
    assert budget.remaining("trap.test") == 0


@pytest.mark.parametrize("fanout", [1, 10, 50])
def test_all_duplicate_host_stops_after_a_logarithmic_number_of_admits(fanout: int) -> None:
    """The docstring's bound, checked step by step on the class: after the k-th window of
    duplicates at most B * c**k pages are left, so nothing is left after the first K
    windows with B * c**K < 1, and at most 1 + f * W * K URLs were admitted."""
    big, window, cut = 1_000_000, 20, 0.5
    budget = HostBudget(big, novelty_window=window, cut_factor=cut)
    host = "trap.test"
    assert budget.admit(host)
    queued, admits, fetches = 1, 1, 0
    while queued:
        queued -= 1
        fetches += 1
        budget.record_fetch(host, duplicate=True)
        if fetches % window == 0:
            k = fetches // window
            left = budget.remaining(host)
            assert left is not None and left <= big * cut**k, (k, left)
        for _ in range(fanout):
            if budget.admit(host):
                admits += 1
                queued += 1
    windows = 0
    while big * cut**windows >= 1:  # K by its definition, not by the docstring's formula
        windows += 1
    assert windows == 20 and admits <= 1 + fanout * window * windows
    if fanout == 10:
        assert 1 + fanout * window * windows == 4001  # the number quoted in the HostBudget docstring
    assert budget.penalty(host) == 8.0  # capped after a long run of low novelty


def test_all_duplicate_host_stops_even_without_a_page_limit() -> None:
    """No limit, windows of 20, cut 0.5, 10 links per page. By hand: fetches 1-19 admit
    190 (191 with the seed); fetch 20 cuts to floor(191 * 0.5) = 95 and admits 10 (85
    left); fetches 21-28 admit 80 and fetch 29 the last 5. Admitted: 191 + 10 + 85 = 286."""
    budget = HostBudget(None)
    assert _crawl_all_duplicates(budget, fanout=10) == (286, 286)
    assert budget.remaining("trap.test") == 0
    assert budget.stats()["cuts"] == 286 // 20


# --- HostBudget: persistence and config ----------------------------------------------------


def _drive(budget: HostBudget, steps: range) -> list[tuple]:
    out = []
    for i in steps:
        host = f"h{i % 3}.test"
        admitted = budget.admit(host)
        budget.record_fetch(host, duplicate=(i % 4 != 0))
        out.append((admitted, budget.remaining(host), budget.penalty(host), budget.novelty(host)))
    return out


def test_snapshot_round_trip_through_json_continues_identically() -> None:
    original = HostBudget(200, novelty_window=8, novelty_min_samples=4)
    _drive(original, range(150))
    snap = json.loads(json.dumps(original.snapshot()))
    restored = HostBudget(200, novelty_window=8, novelty_min_samples=4)
    restored.restore(snap)
    assert restored.stats() == original.stats()
    assert _drive(restored, range(150, 400)) == _drive(original, range(150, 400))
    assert restored.snapshot() == original.snapshot()


def test_restore_replaces_existing_state() -> None:
    budget = HostBudget(5)
    budget.admit("old.test")
    budget.restore(HostBudget(5).snapshot())
    assert budget.stats()["hosts"] == 0
    assert budget.remaining("old.test") == 5


def test_what_bounds_admissions_is_handed_out_once_per_change() -> None:
    """take_changed: what crawler.engine.admission writes with each commit. An admission,
    a refusal, a cut and a limit mark the host; novelty samples alone do not."""
    budget = HostBudget(3, novelty_window=4, novelty_min_samples=2)
    assert budget.take_changed() == {}
    budget.admit("a.test")
    budget.admit("b.test")
    changed = budget.take_changed()
    assert sorted(changed) == ["a.test", "b.test"] and budget.take_changed() == {}
    budget.record_fetch("a.test", duplicate=False)  # a sample: bounds nothing yet
    assert budget.take_changed() == {}
    for _ in range(3):
        budget.record_fetch("a.test", duplicate=True, queued=0)  # ends a window: a cut
    assert budget.stats()["cuts"] == 1 and list(budget.take_changed()) == ["a.test"]
    assert budget.set_limit("b.test", 1) == 0 and list(budget.take_changed()) == ["b.test"]
    budget.forget_host("b.test")
    budget.admit("c.test")
    budget.forget_host("c.test")  # handed over before its change was written: its store rows went too
    assert budget.take_changed() == {}


def test_spending_since_the_checkpoint_is_not_refunded_and_novelty_stays() -> None:
    """merge: the newest stored spending per host, over what the checkpoint restored."""
    live = HostBudget(10, novelty_window=8, novelty_min_samples=4)
    for _ in range(4):
        live.admit("spent.test")
    for _ in range(5):
        live.record_fetch("spent.test", duplicate=True)
    live.take_changed()  # written with those admissions, before the checkpoint
    checkpoint = json.loads(json.dumps(live.snapshot()))
    for _ in range(5):
        live.admit("spent.test")  # after the checkpoint: in the store only
        live.admit("new.test")
    stored = json.loads(json.dumps(live.take_changed()))

    again = HostBudget(10, novelty_window=8, novelty_min_samples=4)
    again.restore(checkpoint)
    assert again.merge(stored) == 2
    assert again.remaining("spent.test") == 1 and again.remaining("new.test") == 5  # 9 and 5 spent
    assert again.novelty("spent.test") == live.novelty("spent.test") == 0.0  # the checkpoint's samples
    assert again.stats() == live.stats()
    assert again.snapshot() == live.snapshot()


def test_a_malformed_stored_budget_costs_only_that_host(caplog) -> None:
    budget = HostBudget(5)
    budget.admit("ok.test")
    stored = budget.take_changed()
    again = HostBudget(5)
    assert again.merge({**stored, "bad.test": [1, 2], "worse.test": "x"}) == 1
    assert again.remaining("ok.test") == 4 and again.remaining("bad.test") == 5
    assert "malformed stored budgets" in caplog.text


@pytest.mark.parametrize(
    "snapshot",
    [
        {},
        {"version": 99, "fields": [], "hosts": {}},
        {"version": 1, "fields": ["admitted"], "hosts": {"a": [1]}},
        {"version": 1, "fields": ["admitted", "rejected"], "hosts": {"a": [1]}},
        {"version": 1, "fields": [], "hosts": []},
        None,
    ],
)
def test_restore_rejects_malformed_snapshots(snapshot: object) -> None:
    budget = HostBudget(5)
    budget.admit("kept.test")
    with pytest.raises(StorageError):
        budget.restore(snapshot)  # type: ignore[arg-type]
    assert budget.remaining("kept.test") == 4  # state untouched on failure


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"max_pages_per_host": -1}, "max_pages_per_host"),
        ({"novelty_window": 0}, "novelty_window"),
        ({"novelty_window": None}, "novelty_window"),
        ({"novelty_min_samples": 0}, "novelty_min_samples"),
        ({"novelty_min_samples": 30}, "novelty_min_samples"),
        ({"novelty_threshold": 1.5}, "novelty_threshold"),
        ({"cut_factor": 1.0}, "cut_factor"),
        ({"cut_factor": -0.1}, "cut_factor"),
        ({"max_penalty": 0.5}, "max_penalty"),
        ({"max_penalty": float("inf")}, "max_penalty"),
    ],
)
def test_host_budget_bad_config(kwargs: dict, name: str) -> None:
    args: dict = {"max_pages_per_host": 10}
    args.update(kwargs)
    with pytest.raises(ConfigError, match=name):
        HostBudget(**args)


def test_a_cut_trims_the_queue_to_the_new_plan():
    # B = 100, window 20, cut factor 0.5: after 20 duplicate fetches with 60 URLs queued
    # and 20 more admissible, the plan is int(0.5 * 80) = 40: 20 queued URLs go.
    budget = HostBudget(100, novelty_window=20, novelty_min_samples=10, novelty_threshold=0.5, cut_factor=0.5)
    for _ in range(80):
        assert budget.admit("t.test")
    drops = [budget.record_fetch("t.test", True, queued=60) for _ in range(20)]
    assert drops == [0] * 19 + [20]
    assert budget.remaining("t.test") == 0  # the 40 kept in the queue are the whole plan
    assert not budget.admit("t.test")
    # A queue already within the plan is kept, and the rest may still be admitted.
    budget2 = HostBudget(100, novelty_window=20, novelty_min_samples=10, novelty_threshold=0.5, cut_factor=0.5)
    for _ in range(30):
        budget2.admit("t.test")
    assert [budget2.record_fetch("t.test", True, queued=10) for _ in range(20)][-1] == 0
    assert budget2.remaining("t.test") == int(0.5 * (10 + 70)) - 10
