"""Scale simulation: host placement on the hash ring, and seen-filter sizing at 5B URLs.

1. Balance. ``--hosts`` hosts with a realistic skew: one giant host holds
   ``--giant-share`` (40%) of all URLs and the rest follow a Zipf law (exponent
   ``--zipf``). Hosts are placed on shards with the real :class:`crawler.placement.hashring.HashRing`
   (its default virtual nodes). Reported per shard count: hosts per shard and URL share
   per shard (max / mean), the share of the shard that owns the giant host, and the
   *fetch-rate* share: with politeness every host gets at most 1/interval requests per
   second, so while hosts have work a shard's fetch rate follows its *host* count, not
   its URL count (URL share decides queue size on disk, host share decides CPU).
2. Movement. Adding one shard to N: fraction of hosts and of URLs that change owner
   (ideal 1/(N+1), all of them moving to the new shard).
3. Seen filter sizing for ``--urls`` (5 billion) at ``--error-rate`` (1%), from the real
   implementations' parameter math: pybloom_live ``BloomFilter(capacity, error_rate)``
   (k = ceil(log2(1/p)) slices of ceil(n ln(1/p) / (k ln^2 2)) bits; checked here
   against real filters at small capacities) and rbloom (checked the same way), total and
   per shard for several shard counts, with the exact store's cost next to it.

    python -m benchmarks.scale_sim
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from typing import Any

import numpy as np

from benchmarks import common
from crawler.placement.hashring import HashRing

# Exact store per URL (measured by benchmarks/memory.py on this machine; see RESULTS.md):
# the SQLite table of 8-byte hashes costs ~14 bytes per URL on disk; in memory (a Python
# set of ints) ~82 bytes per URL.
EXACT_DISK_BYTES_PER_URL = 14.0
EXACT_RAM_BYTES_PER_URL = 82.0


def host_sizes(hosts: int, total_urls: int, giant_share: float, zipf: float) -> np.ndarray:
    """URLs per host: host 0 holds ``giant_share``; the rest follow rank^-zipf (at least 1)."""
    ranks = np.arange(1, hosts, dtype=np.float64)
    w = ranks ** -zipf
    rest = total_urls * (1.0 - giant_share)
    sizes = np.maximum(1, np.floor(w / w.sum() * rest)).astype(np.int64)
    return np.concatenate([[int(total_urls * giant_share)], sizes])


def balance(names: list[str], sizes: np.ndarray, shards: int) -> dict[str, Any]:
    ring = HashRing([f"shard-{i:03d}" for i in range(shards)])
    owner_of = _owners(ring, names)
    ids = ring.nodes
    idx = {s: i for i, s in enumerate(ids)}
    owners = np.array([idx[o] for o in owner_of])
    host_counts = np.bincount(owners, minlength=shards)
    url_counts = np.bincount(owners, weights=sizes, minlength=shards)
    total = sizes.sum()
    giant_owner = owners[0]
    no_giant = url_counts.copy()
    no_giant[giant_owner] -= sizes[0]
    return {
        "shards": shards,
        "hosts_per_shard": host_counts.tolist(),
        "hosts_max_over_mean": round(float(host_counts.max() / host_counts.mean()), 3),
        "hosts_min_over_mean": round(float(host_counts.min() / host_counts.mean()), 3),
        "url_share_per_shard_pct": [round(100 * float(u) / total, 2) for u in url_counts],
        "urls_max_over_mean": round(float(url_counts.max() / url_counts.mean()), 3),
        "giant_shard_url_share_pct": round(100 * float(url_counts[giant_owner]) / total, 2),
        "urls_excluding_giant_max_over_mean": round(float(no_giant.max() / no_giant.mean()), 3),
        # Politeness-bound fetch rate: every host with work gets <= 1/interval req/s.
        "fetch_rate_share_max_over_mean": round(float(host_counts.max() / host_counts.mean()), 3),
    }


def _owners(ring: HashRing, names: list[str]) -> list[str]:
    groups = ring.assign(names)
    where: dict[str, str] = {}
    for node, keys in groups.items():
        for k in keys:
            where[k] = node
    return [where[n] for n in names]


def movement(names: list[str], sizes: np.ndarray, shards: int) -> dict[str, Any]:
    before = HashRing([f"shard-{i:03d}" for i in range(shards)])
    after = HashRing([f"shard-{i:03d}" for i in range(shards + 1)])
    a, b = _owners(before, names), _owners(after, names)
    new = f"shard-{shards:03d}"
    moved = np.array([x != y for x, y in zip(a, b)])
    to_new = all(y == new for x, y in zip(a, b) if x != y)
    return {
        "from_shards": shards,
        "to_shards": shards + 1,
        "hosts_moved_pct": round(100 * float(moved.mean()), 2),
        "urls_moved_pct": round(100 * float(sizes[moved].sum() / sizes.sum()), 2),
        "ideal_pct": round(100 / (shards + 1), 2),
        "all_moves_go_to_new_shard": bool(to_new),
        "giant_host_moved": bool(moved[0]),
    }


def pybloom_params(capacity: int, error_rate: float) -> tuple[int, int, int]:
    """(num_slices, bits_per_slice, num_bits) exactly as pybloom_live.BloomFilter computes them."""
    # Written exactly as pybloom_live does (math.log with base 2, not log2: same rounding).
    k = int(math.ceil(math.log(1.0 / error_rate, 2)))  # noqa: RUF046, FURB163
    bps = int(math.ceil((capacity * abs(math.log(error_rate))) / (k * (math.log(2) ** 2))))  # noqa: RUF046
    return k, bps, k * bps


def rbloom_bits(capacity: int, error_rate: float) -> int:
    """rbloom's size: m = ceil(-n ln p / ln^2 2) rounded up to whole bytes (checked below)."""
    m = math.ceil(-capacity * math.log(error_rate) / (math.log(2) ** 2))
    return ((m + 7) // 8) * 8


def check_formulas(error_rate: float) -> dict[str, Any]:
    """Compare the formulas with real filters at small capacities (they must agree exactly)."""
    from pybloom_live import BloomFilter

    out: dict[str, Any] = {"pybloom": [], "rbloom": []}
    for cap in (1_000, 123_457, 1_000_000):
        f = BloomFilter(cap, error_rate)
        k, _, bits = pybloom_params(cap, error_rate)
        out["pybloom"].append({"capacity": cap, "real_bits": f.num_bits, "formula_bits": bits,
                               "real_k": f.num_slices, "formula_k": k, "match": f.num_bits == bits and f.num_slices == k})
    try:
        import rbloom

        for cap in (1_000, 123_457, 1_000_000):
            real = int(rbloom.Bloom(cap, error_rate).size_in_bits)
            out["rbloom"].append({"capacity": cap, "real_bits": real, "formula_bits": rbloom_bits(cap, error_rate),
                                  "match": real == rbloom_bits(cap, error_rate)})
    except ImportError:
        out["rbloom"] = "rbloom not installed"
    return out


def sizing(urls: int, error_rate: float, shard_counts: list[int]) -> dict[str, Any]:
    k, bps, bits = pybloom_params(urls, error_rate)
    rows = []
    for n in shard_counts:
        per = math.ceil(urls / n)
        pbits = pybloom_params(per, error_rate)[2]
        rows.append({
            "seen_shards": n,
            "urls_per_shard": per,
            "pybloom_bits_per_shard": pbits,
            "pybloom_gb_per_shard": round(pbits / 8 / 1e9, 3),
            "pybloom_gb_total": round(n * pbits / 8 / 1e9, 2),
            "rbloom_gb_per_shard": round(rbloom_bits(per, error_rate) / 8 / 1e9, 3),
            "exact_disk_gb_per_shard": round(per * EXACT_DISK_BYTES_PER_URL / 1e9, 1),
            "exact_ram_gb_per_shard_if_in_memory": round(per * EXACT_RAM_BYTES_PER_URL / 1e9, 1),
        })
    return {
        "urls": urls,
        "error_rate": error_rate,
        "pybloom_num_slices": k,
        "pybloom_bits_per_slice": bps,
        "pybloom_total_bits": bits,
        "pybloom_total_gb": round(bits / 8 / 1e9, 3),
        "bits_per_url": round(bits / urls, 3),
        "per_shard": rows,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="hash-ring balance/movement and seen-filter sizing")
    p.add_argument("--hosts", type=int, default=200_000)
    p.add_argument("--total-urls", type=int, default=1_000_000_000)
    p.add_argument("--giant-share", type=float, default=0.40)
    p.add_argument("--zipf", type=float, default=1.0)
    p.add_argument("--shards", default="4,8,16,32")
    p.add_argument("--urls", type=int, default=5_000_000_000, help="seen-filter sizing: URLs in the crawl")
    p.add_argument("--error-rate", type=float, default=0.01)
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    t0 = time.monotonic()
    shard_counts = [int(x) for x in a.shards.split(",")]
    sizes = host_sizes(a.hosts, a.total_urls, a.giant_share, a.zipf)
    names = ["giant.example.com"] + [f"www.site{i}.example{i % 97}.org" for i in range(1, a.hosts)]
    top = np.sort(sizes)[::-1]
    out: dict[str, Any] = {
        "benchmark": "scale_sim",
        "hosts": a.hosts,
        "urls": int(sizes.sum()),
        "giant_share_pct": round(100 * float(sizes[0] / sizes.sum()), 2),
        "top10_hosts_share_pct": round(100 * float(top[:10].sum() / sizes.sum()), 2),
        "median_host_urls": int(np.median(sizes)),
        "balance": [balance(names, sizes, n) for n in shard_counts],
        "movement": [movement(names, sizes, n) for n in shard_counts],
        "seen_filter": sizing(a.urls, a.error_rate, [1, *shard_counts, 64]),
        "formula_check": check_formulas(a.error_rate),
    }
    out["elapsed_s"] = round(time.monotonic() - t0, 1)
    common.write_json(a.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
