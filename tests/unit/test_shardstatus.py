"""Shard statuses summed into the crawl-wide totals (crawler.session.crawlstats.merge_status).

The totals are what ``stats.json``, ``GET /stats`` and ``crawl stats --json`` show, and
what progress prints: their keys stay exactly as they were when statuses were dicts.
"""

from __future__ import annotations

import json

from crawler.session.crawlstats import merge_news, merge_status
from crawler.engine.status import ShardStatus
from crawler.counters import ShardCounters


def _counters(saved: dict[str, int]) -> ShardCounters:
    c = ShardCounters()
    c.restore(saved)
    return c


def test_the_totals_sum_every_shard_under_the_keys_the_json_has_always_had():
    a = ShardStatus(
        shard="shard-000", idle=True, queued=3, in_flight=1, in_transit=2, hosts=4, paused_hosts=1, paused_urls=2,
        refresh_waiting=5, refresh_due=1, counters=_counters({"requests": 7, "ok": 6}), dropped={"scope": 2},
        events={"emitted": 4, "pending": 1, "sink_down": False},
    )
    b = ShardStatus(
        shard="shard-001", queued=1, hosts=2, refresh_due=2, counters=_counters({"requests": 3, "http_error": 1}),
        dropped={"scope": 1, "robots": 5}, events={"emitted": 2, "pending": 0, "sink_down": True},
    )
    total = merge_status([a, b])
    assert total == {
        "queued": 4, "in_flight": 1, "in_transit": 2, "hosts": 6, "paused_hosts": 1, "paused_urls": 2,
        "refresh_waiting": 5, "refresh_due": 3,
        "counters": {"requests": 10, "ok": 6, "http_error": 1},
        "dropped": {"scope": 3, "robots": 5},
        "events": {"emitted": 6, "pending": 1, "sink_down": True},
        "news": merge_news([]),
        "shards": 2,
    }
    # Plain JSON, as progress and the API send it.
    assert json.loads(json.dumps(total)) == total


def test_no_shard_yet_gives_zero_totals():
    assert merge_status([]) == {
        "queued": 0, "in_flight": 0, "in_transit": 0, "hosts": 0, "paused_hosts": 0, "paused_urls": 0,
        "refresh_waiting": 0, "refresh_due": 0, "counters": {}, "dropped": {}, "events": {},
        "news": merge_news([]), "shards": 0,
    }


def test_the_shell_adds_its_fields_to_a_copy():
    st = ShardStatus(shard="shard-000", queued=2)
    final = st.but(incarnation="ab12cd34", store_counts={"queued": 2, "claimed": 0, "done": 5, "dropped": 0})
    assert (final.shard, final.queued, final.incarnation, final.store_counts["done"]) == ("shard-000", 2, "ab12cd34", 5)
    assert st.incarnation == "" and st.store_counts is None
