"""benchmarks.scale at a tiny size: its URL stream and its windows (the numbers are the
benchmark's; here only that it counts what it says)."""

from __future__ import annotations

import argparse
import random

from benchmarks import scale


def _args(**kw: object) -> argparse.Namespace:
    base = {"urls": 3_000, "window": 1_000, "links": 40, "initial": 500, "error_rate": 0.01,
            "probes": 2_000, "cold": True, "cold_urls": 200}
    return argparse.Namespace(**{**base, **kw})


def test_the_link_stream_has_the_stated_shape() -> None:
    stream = list(scale.pages(20_000, 40, random.Random(1)))
    checked = sum(len(idx) for idx, _ in stream)
    held = stream[-1][1]
    assert held >= 20_000 and all(len(idx) == 40 for idx, _ in stream)
    assert 0.37 < 1 - held / checked < 0.43  # ~40% of checked links already seen
    urls = [scale.url(i) for i in range(5_000)]
    assert len(set(urls)) == 5_000
    paths = [u.split("/", 3)[3] for u in urls]
    assert min(map(len, paths)) >= 29 and max(map(len, paths)) <= 80
    assert len({u.split("/")[2] for u in urls}) == 5_000  # spread over the 500,000 hosts


def test_bloom_windows_count_held_urls_and_measure_the_false_positive_rate() -> None:
    rows = scale.run_bloom(_args())
    assert [r["held"] for r in rows] == sorted(r["held"] for r in rows) and len(rows) == 3
    assert rows[-1]["held"] >= 3_000 and rows[-1]["stages"] >= 3  # 500 + 1000 + 2000
    assert all(r["fp_measured"] < 0.02 and r["ops"] > r["held"] / 3 for r in rows)


def test_store_windows_time_a_cold_window_after_each_warm_one(tmp_path) -> None:
    rows = scale.run_seen(_args(), str(tmp_path))
    assert len(rows) == 3
    assert "cold_over_warm_wall" in rows[0] and rows[0]["cold_cpu_us_per_op"] > 0
    assert all(r["cpu_us_per_op"] > 0 and r["disk_bytes"] > 0 for r in rows)
