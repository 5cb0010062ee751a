"""Consistent hash ring: balance, minimal movement on membership change, determinism."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from crawler.errors import ConfigError
from crawler.placement.hashring import HashRing

ROOT = Path(__file__).resolve().parents[2]


def _hosts(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789-"
    out: set[str] = set()
    while len(out) < n:
        name = "".join(rng.choice(alphabet) for _ in range(rng.randint(4, 14)))
        out.add(f"{rng.choice(['', 'www.', 'blog.'])}{name}.{rng.choice(['com', 'org', 'de', 'co.uk'])}")
    return sorted(out)


HOSTS = _hosts(100_000)
SHARDS = [f"shard-{i:03d}" for i in range(16)]


def _owner_map(ring: HashRing, keys: list[str]) -> dict[str, str]:
    return {k: node for node, ks in ring.assign(keys).items() for k in ks}


@pytest.mark.parametrize(
    "names",
    [SHARDS, [f"node{i}" for i in range(16)], [f"10.0.0.{i + 1}:6379" for i in range(16)]],
    ids=["shard-000", "nodeN", "ip-port"],
)
def test_busiest_of_16_nodes_owns_at_most_15_percent_above_mean(names: list[str]) -> None:
    ring = HashRing(names)
    counts = [len(v) for v in ring.assign(HOSTS).values()]
    assert len(counts) == 16 and sum(counts) == len(HOSTS)
    assert max(counts) <= 1.15 * len(HOSTS) / 16


def test_adding_a_17th_node_moves_about_a_17th_of_hosts_and_only_to_it() -> None:
    ring = HashRing(SHARDS)
    before = _owner_map(ring, HOSTS)
    ring.add("shard-016")
    after = _owner_map(ring, HOSTS)
    moved = [h for h in HOSTS if before[h] != after[h]]
    assert {after[h] for h in moved} == {"shard-016"}
    assert len(moved) <= (1 / 17 + 0.02) * len(HOSTS)
    # The new node does take its share (not a ring that ignores it).
    assert len(moved) >= (1 / 17 - 0.02) * len(HOSTS)


def test_removing_a_node_moves_only_its_hosts_and_spreads_them() -> None:
    ring = HashRing(SHARDS)
    before = _owner_map(ring, HOSTS)
    ring.remove("shard-005")
    after = _owner_map(ring, HOSTS)
    moved = [h for h in HOSTS if before[h] != after[h]]
    assert moved and all(before[h] == "shard-005" for h in moved)
    assert len(moved) == sum(1 for h in HOSTS if before[h] == "shard-005")
    # Virtual nodes hand the orphans to many survivors, not one unlucky neighbour.
    heirs = Counter(after[h] for h in moved)
    assert len(heirs) == 15
    assert max(heirs.values()) < 0.2 * len(moved)


def test_node_for_agrees_with_assign_and_assign_keeps_order() -> None:
    ring = HashRing(SHARDS)
    keys = HOSTS[:2000]
    groups = ring.assign(keys)
    for node, ks in groups.items():
        assert all(ring.node_for(k) == node for k in ks)
        assert ks == [k for k in keys if k in set(ks)]
    assert set(groups) == set(SHARDS)


def test_ring_is_identical_across_processes_with_different_hash_seeds() -> None:
    keys = HOSTS[:300]
    ring = HashRing(SHARDS)
    here = [ring.node_for(k) for k in keys]
    code = (
        "import json, sys\n"
        "from crawler.placement.hashring import HashRing\n"
        "keys = json.load(sys.stdin)\n"
        f"ring = HashRing({SHARDS!r})\n"
        "print(json.dumps([ring.node_for(k) for k in keys]))\n"
    )
    for seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
        proc = subprocess.run(
            [sys.executable, "-c", code], input=json.dumps(keys), capture_output=True, text=True, env=env, timeout=60, check=True
        )
        assert json.loads(proc.stdout) == here


def test_order_of_adding_nodes_does_not_change_owners() -> None:
    a = HashRing(SHARDS)
    b = HashRing(reversed(SHARDS))
    c = HashRing()
    for n in SHARDS[::2] + SHARDS[1::2]:
        c.add(n)
    keys = HOSTS[:3000]
    assert _owner_map(a, keys) == _owner_map(b, keys) == _owner_map(c, keys)


def test_empty_ring_raises_value_error() -> None:
    ring = HashRing()
    with pytest.raises(ValueError, match="empty"):
        ring.node_for("example.com")
    with pytest.raises(ValueError, match="empty"):
        ring.assign(["example.com"])
    assert ring.assign([]) == {}
    ring.add("only")
    assert ring.node_for("example.com") == "only"
    ring.remove("only")
    with pytest.raises(ValueError):
        ring.node_for("example.com")


def test_membership_errors_name_the_problem() -> None:
    ring = HashRing(["a", "b"])
    assert ring.nodes == ["a", "b"] and len(ring) == 2 and "a" in ring
    with pytest.raises(ConfigError, match="already"):
        ring.add("a")
    with pytest.raises(ConfigError, match="not on the ring"):
        ring.remove("zzz")
    with pytest.raises(ConfigError, match="vnodes"):
        HashRing(["a"], vnodes=0)
    with pytest.raises(ConfigError, match="non-empty string"):
        HashRing([""])


def test_odd_keys_from_the_web_still_get_an_owner() -> None:
    ring = HashRing(SHARDS)
    for key in ["", "xn--bcher-kva.example", "bücher.example", "\ud800bad", "a" * 5000]:
        assert ring.node_for(key) in SHARDS
    assert sum(len(v) for v in ring.assign(["\udcff", ""]).values()) == 2
