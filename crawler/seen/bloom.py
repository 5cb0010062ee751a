"""The Bloom filter backends of the seen set, behind one small protocol.

A filter answers "maybe seen" or "certainly new" for a 64-bit URL hash and sets the
hash's bits in the same step (:meth:`Bloom.check_and_add`); it never forgets, so it has
no false negatives. Two backends: ``"rbloom"`` (Rust, the default) and ``"pybloom"``
(pybloom-live, pure Python, kept available: ``dedup.seen_bloom: pybloom``). Measured on the
project machine for 100k ``check_and_add`` operations in batches of 100 URLs (half of
them repeats), capacity 1M, hashing included: exact mode pybloom 3.1 us / rbloom 0.9 us
per URL, Bloom-only 2.8 / 0.6 us.

Both keep ``bits_set()`` current so the seen set can estimate its false-positive rate
(fill^k) after every batch, and both save their bits as bytes for the snapshot file
(:mod:`crawler.seen.snapshot`).
"""

from __future__ import annotations

import operator
import struct
import sys
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import xxhash

from crawler.errors import ConfigError, StorageError
from crawler.seen.hashing import MASK64

__all__ = ["BLOOM_BACKENDS", "DEFAULT_BLOOM", "RBLOOM_HINT", "Bloom", "PyBloom", "RBloom", "make_bloom"]

BLOOM_BACKENDS = ("pybloom", "rbloom")
# rbloom is the default (issue 20): the seen stage (url_hash64 + check_and_add_hashes of a
# page's ~37 followed links, exact, in memory) costs 146 us/page CPU and 1.03M instructions
# with pybloom against 38 us and 0.29M with rbloom on 10k bench pages
# (benchmarks/results/stages_before.json, seen.pybloom / seen.rbloom), a fifth of the
# page stages' budget saved; the filters answer the same (tests/unit/test_seen_*.py run
# both). pybloom-live stays a dependency and a choice: a snapshot or a
# Bloom-only set written with it opens with dedup.seen_bloom: pybloom.
DEFAULT_BLOOM = "rbloom"

RBLOOM_HINT = "pip install -e . (rbloom is a dependency; or use bloom='pybloom')"
"""How to get the optional rbloom backend (quoted by the error that needs it)."""


class Bloom(Protocol):
    """What the seen set needs of a Bloom filter over 64-bit URL hashes."""

    k: int
    m: int

    def check_and_add(self, h: int) -> bool:
        """Set h's bits; True if they were all set before (maybe seen)."""

    def contains(self, h: int) -> bool:
        """True if h's bits are all set (maybe seen); sets nothing."""

    def bits_set(self) -> float:
        """Bits set now (exact or a close estimate, see the backend)."""

    def false_positive_rate(self) -> float:
        """Chance that a new hash is reported seen now (fill^k for one filter)."""

    def recount(self) -> None:
        """Re-derive bits_set from the filter itself."""

    def add_many(self, hashes: list[int]) -> None:
        """Set the bits of many hashes (a rebuild); call recount() when done."""

    def to_bytes(self) -> bytes:
        """The filter's bits in the backend's own save format (the snapshot payload)."""

    def memory_bytes(self) -> int:
        """Resident bytes of the bit array."""


class _Digest(Protocol):
    """A hash object of hashlib or xxhash, as the vectorized rebuild drives it."""

    @property
    def digest_size(self) -> int: ...

    def copy(self) -> _Digest: ...

    def update(self, data: bytes, /) -> None: ...

    def digest(self) -> bytes: ...


#: pybloom_live's hashing choices: the salted digests, the unpack dtype, values per digest.
_VectorPlan = tuple[list[_Digest], "np.dtype[Any]", int]


class PyBloom:
    """pybloom_live.BloomFilter driven through its own hash maker and bitarray.

    BloomFilter.add refuses keys once ``count > capacity`` (IndexError "BloomFilter is at
    capacity"); the crawl must keep going past capacity (the filter then just answers
    "maybe" more often and the exact store takes over), so bits are set here directly.
    Setting the bits also tells exactly how many were new, which keeps an exact
    bits-set count for the fill-ratio estimate at no extra cost.
    """

    def __init__(self, capacity: int, error_rate: float, raw: bytes | None = None) -> None:
        from pybloom_live import BloomFilter

        self._f = BloomFilter(capacity, error_rate)
        if raw is not None:
            bits = self._f.bitarray
            fresh = type(bits)(endian="little")
            fresh.frombytes(raw)
            if len(fresh) < len(bits):
                raise StorageError("seen-set snapshot: Bloom bit array is shorter than the filter")
            del fresh[len(bits) :]
            self._f.bitarray = fresh
        self._make = self._f.make_hashes
        self._bits = self._f.bitarray
        self._bps = self._f.bits_per_slice
        self.k: int = self._f.num_slices
        self.m: int = self._f.num_bits
        self._set = self._bits.count() if raw is not None else 0
        self._plan: _VectorPlan | None | bool = False  # vectorized rebuild plan, computed on first use

    def check_and_add(self, h: int) -> bool:
        bits = self._bits
        bps = self._bps
        offset = 0
        new = 0
        for i in self._make(h):
            p = offset + i
            if not bits[p]:
                bits[p] = True
                new += 1
            offset += bps
        self._set += new
        return new == 0

    def contains(self, h: int) -> bool:
        bits = self._bits
        bps = self._bps
        offset = 0
        for i in self._make(h):
            if not bits[offset + i]:
                return False
            offset += bps
        return True

    def bits_set(self) -> float:
        return float(self._set)

    def false_positive_rate(self) -> float:
        return float((self._set / self.m) ** self.k)

    def recount(self) -> None:
        self._set = self._bits.count()

    def add_many(self, hashes: list[int]) -> None:
        # The rebuild path. pybloom's per-key generator costs ~3 us; computing the same
        # probes with one salted digest per key and numpy for the rest is ~3x faster. The
        # plan is checked against make_hashes first, so a pybloom that hashes differently
        # falls back to the plain loop instead of building a wrong filter.
        plan = self._vector_plan()
        if plan is None:
            bits, bps, make = self._bits, self._bps, self._make
            for h in hashes:
                offset = 0
                for i in make(h):
                    bits[offset + i] = True
                    offset += bps
        elif hashes:
            pos = self._positions(plan, hashes).ravel()
            view = np.frombuffer(self._bits, dtype=np.uint8)  # little-endian bit order
            byte, bit = pos >> np.uint64(3), (pos & np.uint64(7)).astype(np.uint8)
            for j in range(8):
                # One mask per pass, so repeated byte indices cannot lose a bit.
                view[byte[bit == j]] |= np.uint8(1 << j)

    def _vector_plan(self) -> _VectorPlan | None:
        """pybloom_live.make_hashfuncs's choices (digest, unpack width, salts), if they
        reproduce ``make_hashes`` on probe keys; None otherwise."""
        if self._plan is not False:
            return self._plan  # type: ignore[return-value]  # not False: a plan or None (mypy cannot narrow a bool literal off a union)
        import hashlib

        bps, k = self._bps, self.k
        code, width = ("<Q", 8) if bps >= 1 << 31 else ("<I", 4) if bps >= 1 << 15 else ("<H", 2)
        total = 8 * k * width
        fn: Callable[..., _Digest] = xxhash.xxh128
        for bound, digest in ((384, hashlib.sha512), (256, hashlib.sha384), (160, hashlib.sha256), (128, hashlib.sha1)):
            if total > bound:
                fn = digest
                break
        per = fn().digest_size // width
        salts = [fn(fn(struct.pack("I", i)).digest()) for i in range(-(-k // per))]
        plan = (salts, np.dtype(code), per)
        probes = [0, 1, 2**63, MASK64, 123456789012345]
        got = self._positions(plan, probes) if sys.byteorder == "little" else None
        want = np.array(
            [[j * bps + i for j, i in enumerate(self._make(h))] for h in probes], dtype=np.uint64
        )
        self._plan = plan if got is not None and np.array_equal(got, want) else None
        return self._plan

    def _positions(self, plan: _VectorPlan, hashes: list[int]) -> np.ndarray:
        salts, dtype, per = plan
        keys = [str(h).encode() for h in hashes]  # pybloom hashes str(key) for non-str keys
        cols = []
        for salt in salts:
            parts = []
            for key in keys:
                d = salt.copy()
                d.update(key)
                parts.append(d.digest())
            cols.append(np.frombuffer(b"".join(parts), dtype=dtype).reshape(len(keys), per))
        vals = np.hstack(cols)[:, : self.k].astype(np.uint64) % np.uint64(self._bps)
        return vals + np.arange(self.k, dtype=np.uint64) * np.uint64(self._bps)

    def to_bytes(self) -> bytes:
        raw: bytes = self._bits.tobytes()
        return raw

    def memory_bytes(self) -> int:
        return self.m // 8


class RBloom:
    """rbloom.Bloom over the 64-bit URL hashes.

    ``hash_func=operator.index`` hands rbloom the integer itself (already a well-mixed
    xxh3 value): a C builtin, so no Python call per probe, and unlike the default
    ``hash`` it makes the filter savable (``save_bytes`` refuses the salted builtin).
    rbloom does not expose per-probe results, so bits_set is tracked as an expectation
    (a key that was not already present sets k (1 - fill) / (1 - fill^k) new bits on
    average; the relative error is ~1/sqrt(bits set)) and re-counted from the saved bits by ``stats()``, not per
    batch: a recount copies and counts the whole filter (~ms for 10M URLs).
    """

    def __init__(self, capacity: int, error_rate: float, raw: bytes | None = None) -> None:
        try:
            import rbloom
        except ImportError as exc:
            # rbloom is an optional extra: asking for it without it is a setup problem.
            raise ConfigError(f"seen bloom: 'rbloom' is not installed; {RBLOOM_HINT}") from exc

        if raw is None:
            self._f = rbloom.Bloom(capacity, error_rate, operator.index)
        else:
            try:
                self._f = rbloom.Bloom.load_bytes(raw, operator.index)
            except (ValueError, OSError) as exc:
                raise StorageError(f"seen-set snapshot: rbloom filter is unreadable: {exc}") from exc
        self.m = int(self._f.size_in_bits)
        header = self._f.save_bytes()[:8]
        # rbloom's save format: u64 little-endian number of hash functions, then the bits.
        self.k = int.from_bytes(header, "little") or 1
        self._set = 0.0
        self.recount()

    def check_and_add(self, h: int) -> bool:
        f = self._f
        if h in f:
            return True
        f.add(h)
        # Expected new bits given that not all k probes were set (we only get here then):
        # k (1 - fill) / (1 - fill^k). Without the condition the count lags behind.
        fill = self._set / self.m
        miss = 1.0 - fill**self.k
        self._set += self.k * (1.0 - fill) / miss if miss > 0.0 else 1.0
        return False

    def contains(self, h: int) -> bool:
        return h in self._f

    def bits_set(self) -> float:
        return self._set

    def false_positive_rate(self) -> float:
        return float((self._set / self.m) ** self.k)

    def recount(self) -> None:
        raw = np.frombuffer(self._f.save_bytes(), dtype=np.uint8, offset=8)
        self._set = float(np.bitwise_count(raw).sum(dtype=np.int64))

    def add_many(self, hashes: list[int]) -> None:
        self._f.update(hashes)

    def to_bytes(self) -> bytes:
        return self._f.save_bytes()

    def memory_bytes(self) -> int:
        return self.m // 8



def make_bloom(backend: str, capacity: int, error_rate: float, raw: bytes | None = None) -> Bloom:
    """A ``backend`` filter sized for ``capacity`` at ``error_rate``; from saved bits if ``raw``.

    Raises ConfigError for an unknown backend or a missing optional one (rbloom), and
    StorageError for saved bits the backend cannot read.
    """
    if backend == "pybloom":
        return PyBloom(capacity, error_rate, raw)
    if backend == "rbloom":
        return RBloom(capacity, error_rate, raw)
    raise ConfigError(f"seen bloom: must be one of {', '.join(BLOOM_BACKENDS)}, got {backend!r}")
