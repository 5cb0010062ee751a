"""Sorted runs: an append-only multiset of 64-bit keys with columns, searchable by range.

The storage of the duplicate-content index (crawler.content.index): numpy arrays, no
Python object per entry, so an entry costs its bytes and nothing more.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

__all__ = ["SortedRuns"]

_U64 = np.uint64


class SortedRuns:
    """A growing multiset of ``(uint64 key, columns...)`` kept as sorted runs.

    Each :meth:`add` sorts its batch into a new run; the last two runs are merged while
    the older one is less than twice the newer one's size (size-tiered), so there are at
    most ~log2(N / batch) runs and each entry is merged ~log2 times in all. A range query
    is one binary search per run, vectorized over all the queries of a batch.
    """

    def __init__(self, dtypes: Sequence[Any]) -> None:
        self.dtypes = list(dtypes)
        self.runs: list[tuple[np.ndarray, list[np.ndarray]]] = []

    def __len__(self) -> int:
        """Entries held."""
        return sum(len(k) for k, _ in self.runs)

    def nbytes(self) -> int:
        """Bytes of the arrays."""
        return sum(k.nbytes + sum(c.nbytes for c in cols) for k, cols in self.runs)

    def add(self, keys: np.ndarray, cols: Sequence[np.ndarray]) -> None:
        """Add entries: ``keys`` (uint64) and one array per column, all the same length."""
        if len(keys) == 0:
            return
        order = np.argsort(keys, kind="stable")
        self.runs.append((keys[order], [c[order] for c in cols]))
        # Size-tiered merging: runs shrink geometrically from the first, so there are at
        # most ~log2(N / batch) of them and each entry is merged ~log2 times in all.
        while len(self.runs) >= 2 and len(self.runs[-2][0]) < 2 * len(self.runs[-1][0]):
            (kb, cb), (ka, ca) = self.runs.pop(), self.runs.pop()
            keys = np.concatenate([ka, kb])
            order = np.argsort(keys, kind="stable")  # two sorted runs: a linear merge
            self.runs.append((keys[order], [np.concatenate([x, y])[order] for x, y in zip(ca, cb)]))

    def within(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        """Every stored entry with ``lo[i] <= key <= hi[i]``: (query index, key, columns)."""
        qs: list[np.ndarray] = []
        ks: list[np.ndarray] = []
        cs: list[list[np.ndarray]] = [[] for _ in self.dtypes]
        for keys, cols in self.runs:
            left = np.searchsorted(keys, lo, side="left")
            right = np.searchsorted(keys, hi, side="right")
            counts = right - left
            total = int(counts.sum())
            if total == 0:
                continue
            q = np.repeat(np.arange(len(lo)), counts)
            starts = np.repeat(left - (np.cumsum(counts) - counts), counts)
            pos = np.arange(total) + starts
            qs.append(q)
            ks.append(keys[pos])
            for acc, col in zip(cs, cols):
                acc.append(col[pos])
        if not qs:
            return np.empty(0, np.int64), np.empty(0, _U64), [np.empty(0, d) for d in self.dtypes]
        return np.concatenate(qs), np.concatenate(ks), [np.concatenate(c) for c in cs]

    def column(self, i: int) -> np.ndarray:
        """Column ``i`` of every entry (run order)."""
        return np.concatenate([cols[i] for _, cols in self.runs]) if self.runs else np.empty(0, self.dtypes[i])
