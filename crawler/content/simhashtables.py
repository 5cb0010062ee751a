"""The permuted SimHash tables of the duplicate-content index (crawler.content.index).

A near-duplicate lookup is an exact match on a prefix of a permuted fingerprint, one
table per choice of the blocks on top: :class:`TableLayout` says which bits each table
keys on and which shard owns which key. It holds no entry (a shard's entries are
:class:`~crawler.content.sortedruns.SortedRuns`, crawler.content.index.ContentShard).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from crawler.content.fingerprints import check_simhash_params
from crawler.errors import ConfigError

__all__ = ["NO_HIT", "TableLayout"]

_U64 = np.uint64
#: Distance reported for "no neighbour within k".
NO_HIT = 255


class TableLayout:
    """Which bits of a fingerprint key each table, and which shard owns which key.

    The 64 bits are cut into ``B`` blocks. A fingerprint within distance ``k`` of another
    differs in at most ``k`` blocks, so it agrees with it on at least ``B - k`` whole blocks
    (pigeonhole). A table sorts the fingerprints by a key that puts ``B - k`` of the blocks
    on top, and one table per choice of blocks finds every neighbour by an exact match on
    that prefix (Manku, Jain, Das Sarma, WWW 2007):

    * ``tables`` = B with B >= k + 1: one block on top per table (16-bit prefixes for 4
      tables); the fewest tables, the most candidates per lookup (N / 2^16 per table);
    * ``tables`` = C(B, k) with B > k + 1 (10, 20, 35 for k = 3): B - k blocks on top per
      table (26-bit prefixes for 10 tables, 32 for 20): more memory per page, far fewer
      candidates at scale.

    A key is a permutation of the fingerprint's bits, so Hamming distances between keys
    are the fingerprints' own.
    """

    def __init__(self, k: int, tables: int, shards: int) -> None:
        check_simhash_params(k, tables)
        if not isinstance(shards, int) or isinstance(shards, bool) or not 1 <= shards <= 256:
            raise ConfigError(f"content index shards: must be an integer in 1..256, got {shards!r}")
        self.k, self.tables, self.shards = k, tables, shards
        blocks, combos = tables, [[t] for t in range(tables)]
        for b in range(k + 2, 65):
            n = math.comb(b, k)
            if n == tables and k > 0:
                blocks = b
                combos = [sorted(set(range(b)) - set(drop)) for drop in itertools.combinations(range(b), k)]
                break
            if n > tables:
                break
        base, extra = divmod(64, blocks)
        widths = [base + (1 if i < extra else 0) for i in range(blocks)]
        starts = [sum(widths[:i]) for i in range(blocks)]
        self.blocks = blocks
        self.prefix: list[int] = []  # key bits that must match exactly, per table
        self._moves: list[list[tuple[int, int, int]]] = []  # per table: (source shift, mask, target shift)
        for top in combos:
            order = top + [i for i in range(blocks) if i not in top]
            moves, dst = [], 64
            for i in order:
                dst -= widths[i]
                moves.append((starts[i], (1 << widths[i]) - 1, dst))
            self._moves.append(moves)
            self.prefix.append(sum(widths[i] for i in top))

    def key(self, t: int, fps: np.ndarray) -> np.ndarray:
        """Table ``t``'s sort key of each fingerprint: its bits permuted, the table's blocks on top."""
        out = np.zeros(len(fps), _U64)
        for src, mask, dst in self._moves[t]:
            out |= ((fps >> _U64(src)) & _U64(mask)) << _U64(dst)
        return out

    def owner(self, t: int, keys: np.ndarray) -> np.ndarray:
        """Shard of each table-``t`` key: by its top 8 bits (inside the prefix), and the table."""
        return ((keys >> _U64(56)).astype(np.int64) + 37 * t) % self.shards

    def bounds(self, t: int, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Smallest and largest key sharing each key's prefix."""
        low_bits = 64 - self.prefix[t]
        low = _U64((1 << low_bits) - 1)
        lo = keys & ~low
        return lo, lo | low
