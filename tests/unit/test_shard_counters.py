"""A shard's counters as one typed record (crawler.counters.ShardCounters):
the JSON they make, checkpoints of the one-Counter era read back, the driver's sum, and
a status that crosses a process boundary (Ray pickles it) intact."""

from __future__ import annotations

import json
import pickle
from collections import Counter

import pytest

from crawler.counters import ShardCounters, drop_reason, restore_dropped
from crawler.engine.status import ShardStatus
from crawler.session.crawlstats import merge_status


def test_as_dict_is_the_old_counter_shape_zeros_left_out_families_flat():
    c = ShardCounters()
    assert c.as_dict() == {}
    c.requests += 3
    c.fetched += 2
    c.render_gained += False  # a bool adds 0: still not shown, as a Counter showed it
    c.families["dup_exact"] += 1
    c.families["render_refused_robots"] += 2
    c.families["render_wait_idle"] += 0
    assert c.as_dict() == {"requests": 3, "fetched": 2, "dup_exact": 1, "render_refused_robots": 2}
    assert json.loads(json.dumps(c.as_dict())) == c.as_dict()


def test_a_checkpoint_written_by_the_one_counter_code_restores():
    old = dict(Counter({"fetched": 7, "robots_requests": 2, "dup_near": 1, "render_decision_signal_empty_root": 4}))
    c = ShardCounters()
    c.restore(old)
    assert (c.fetched, c.robots_requests) == (7, 2)
    assert c.families == Counter({"dup_near": 1, "render_decision_signal_empty_root": 4})
    assert c.as_dict() == old
    # Restoring adds, as Counter.update did; and as_dict round-trips through restore.
    again = ShardCounters()
    again.restore(c.as_dict())
    assert again == c


def test_the_driver_sums_every_shard():
    a, b = ShardCounters(requests=3, fetched=1), ShardCounters(requests=4, bytes=10)
    a.families["dup_exact"] = 2
    b.families.update({"dup_exact": 1, "render_served": 5})
    total = ShardCounters.merged([a, b])
    assert total.as_dict() == {"requests": 7, "fetched": 1, "bytes": 10, "dup_exact": 3, "render_served": 5}
    assert a.as_dict() == {"requests": 3, "fetched": 1, "dup_exact": 2}  # the parts are left alone
    assert ShardCounters.merged([]) == ShardCounters()
    st = [ShardStatus(shard="shard-000", counters=a), ShardStatus(shard="shard-001", counters=b)]
    assert merge_status(st)["counters"] == total.as_dict()


def test_a_status_copy_does_not_move_and_crosses_pickling_intact():
    live = ShardCounters(requests=2)
    live.families["dup_near"] = 1
    st = ShardStatus(shard="shard-000", counters=live.copy(), dropped={"scope": 2})
    live.requests += 1
    live.families["dup_near"] += 1
    assert st.counters.requests == 2 and st.counters.families["dup_near"] == 1
    back = pickle.loads(pickle.dumps(st))
    assert back == st and back.counters.requests == 2 and back.counters.families == Counter({"dup_near": 1})


def test_outcomes_and_drop_reasons_are_checked():
    c = ShardCounters()
    c.count_outcome("robots_blocked")
    assert c.robots_blocked == 1 == c.outcome("robots_blocked")
    with pytest.raises(ValueError):
        c.count_outcome("ok")
    dropped: Counter = Counter()
    restore_dropped(dropped, {"scope": 2, "host_budget": 1})
    assert dropped == Counter({"scope": 2, "host_budget": 1}) and drop_reason("depth") == "depth"
    with pytest.raises(ValueError):
        drop_reason("robots")
