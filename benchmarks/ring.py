"""Hash-ring balance and movement: the figures behind DESIGN.md's "adding a shard moves ~1/N".

100,000 host names over 16 shards with the real :class:`crawler.placement.hashring.HashRing`
(default 2048 virtual nodes), for several naming schemes of the shards (the names decide
where the virtual nodes land, so the balance is taken as the worst over the schemes):

* balance: hosts on the busiest shard / mean hosts per shard (acceptance bound 1.15);
* movement: share of hosts whose owner changes when a 17th shard joins (ideal 1/17 =
  5.9%), and whether every moved host goes to the new shard.

Host names are drawn from a seeded generator (bench-style, multi-label and random
hex), so the run is reproducible; it takes a few seconds.

    python -m benchmarks.ring --json benchmarks/results/ring.json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from typing import Any

import numpy as np

from crawler.placement.hashring import DEFAULT_VNODES, HashRing

SCHEMES = {
    "shard-000": lambda i: f"shard-{i:03d}",
    "shard-0": lambda i: f"shard-{i}",
    "node1": lambda i: f"node{i + 1}",
    "ip:port": lambda i: f"10.0.{i // 8}.{i % 8 + 10}:6379",
    "hex": lambda i: random.Random(i).randbytes(6).hex(),
}


def host_names(n: int, seed: int = 7) -> list[str]:
    """``n`` distinct host names of mixed shapes (seeded)."""
    rng = random.Random(seed)
    tlds = ("com", "org", "net", "de", "co.uk", "io", "fr", "jp")
    names: set[str] = set()
    while len(names) < n:
        k = rng.randrange(3)
        if k == 0:
            names.add(f"h{rng.randrange(10**7)}.bench.test")
        elif k == 1:
            names.add(f"www.{rng.randbytes(4).hex()}.{rng.choice(tlds)}")
        else:
            names.add(f"{rng.choice(('blog', 'shop', 'news', 'cdn'))}{rng.randrange(10**5)}.site{rng.randrange(999)}.{rng.choice(tlds)}")
    return sorted(names)


def measure(hosts: list[str], shards: int, scheme: str, vnodes: int) -> dict[str, Any]:
    """Balance with ``shards`` shards and movement when one more joins, for one scheme."""
    name = SCHEMES[scheme]
    before = HashRing([name(i) for i in range(shards)], vnodes=vnodes)
    after = HashRing([name(i) for i in range(shards + 1)], vnodes=vnodes)
    groups = before.assign(hosts)
    counts = np.array([len(v) for v in groups.values()], dtype=np.float64)
    owner = {h: n for n, hs in groups.items() for h in hs}
    new = name(shards)
    moved = 0
    to_new = True
    for n, hs in after.assign(hosts).items():
        for h in hs:
            if owner[h] != n:
                moved += 1
                to_new &= n == new
    return {
        "scheme": scheme,
        "busiest_over_mean": round(float(counts.max() / counts.mean()), 4),
        "least_over_mean": round(float(counts.min() / counts.mean()), 4),
        "moved_pct": round(100.0 * moved / len(hosts), 2),
        "all_moves_to_new_shard": to_new,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="hash-ring balance and movement")
    p.add_argument("--hosts", type=int, default=100_000)
    p.add_argument("--shards", type=int, default=16)
    p.add_argument("--vnodes", type=int, default=DEFAULT_VNODES)
    p.add_argument("--json", default=None, help="also save the result here")
    a = p.parse_args(argv)
    t0 = time.monotonic()
    hosts = host_names(a.hosts)
    rows = [measure(hosts, a.shards, s, a.vnodes) for s in SCHEMES]
    worst = max(rows, key=lambda r: r["busiest_over_mean"])
    out = {
        "benchmark": "ring",
        "hosts": a.hosts,
        "shards": a.shards,
        "vnodes": a.vnodes,
        "schemes": rows,
        "busiest_over_mean_worst": worst["busiest_over_mean"],
        "moved_pct_mean": round(sum(r["moved_pct"] for r in rows) / len(rows), 2),
        "moved_pct_ideal": round(100.0 / (a.shards + 1), 2),
        "all_moves_to_new_shard": all(r["all_moves_to_new_shard"] for r in rows),
        "elapsed_s": round(time.monotonic() - t0, 1),
    }
    line = json.dumps(out)
    print(line)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
