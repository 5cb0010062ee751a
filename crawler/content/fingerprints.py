"""Content fingerprints and the reference near-duplicate index.

Two fingerprints per fetched page (the "fingerprint" step of a page's way through the crawl):

* ``content_sha256(body)`` -- exact duplicates (mirrors, the same file under two URLs).
* ``simhash64(text)`` -- Charikar's SimHash over the page's visible text, so pages that
  differ only by a date, a counter or a changed word land within a small Hamming
  distance of each other (Manku, Jain, Das Sarma, "Detecting Near-Duplicates for Web
  Crawling", WWW 2007: 64-bit fingerprints, distance <= 3).

Tokenization (shared by the fast path and the reference): lowercase, then the words of
the regex ``\\w+`` (Python's Unicode ``\\w``: letters, digits and ``_`` of any script).
Features are **3-word shingles** weighted by how often they occur. Measured on
generated Zipf-distributed text (see tests/unit/test_dedup.py and the report): single
words make *unrelated* long pages collide (their votes are dominated by the same
frequent words: 28% of unrelated 3000-word pairs within distance 3), 2-word shingles
drift the same way as pages grow (mean distance of unrelated 6000-word pages 20 of
64), while 3-word shingles keep unrelated pages at ~32 bits apart at every length and
still put pages differing by a few words within distance 3. A wrongly flagged page
costs more than a missed near-duplicate, so 3 it is.

Two implementations compute the same fingerprints, bit for bit (they are stored in
Parquet and compared across runs and machines; tests/unit/test_simhash_native.py holds
them equal on real pages, random Unicode and a 5 MB text):

* **The C core** (``crawler/content/_simhash.c``, built by ``pip install`` when a C
  compiler is there): one pass over the str's own storage, the word in progress, the
  last two word hashes and 64 vote counters as its only state. Used whenever it imports.
* **numpy** (the ``_numpy_*`` functions): the lowered text is viewed as an array of code
  points, a 0x110000-entry lookup table (built once from the same regex; the C core gets
  it too) marks word characters, every word's hash is a sum of per-position multiplied
  code points (``np.add.reduceat``) followed by a SplitMix64 finalizer, shingle hashes
  are mixed from neighbouring word hashes, and the per-bit votes are counted on the
  unpacked bits. The reference the tests compare the C core with, and the fallback where
  it is not built (an install without a compiler, a Ray ``--working-dir`` upload).

Why C: numpy needs ~15 passes over the ~23k code points of a bench page's main text
(5-40 us each), ~300 us per page against a 120 us budget; the C core takes ~47 us, 6.4x
fewer instructions (``python -m benchmarks.stages --pages 2000 --only fingerprint
--callgrind 40``, against the same with ``RAYCRAWL_SIMHASH=numpy``). :data:`BACKEND` says
which one runs; ``RAYCRAWL_SIMHASH=numpy`` (or ``native``, which then must be built)
chooses at import, :func:`set_backend` at run time.

``reference_simhash64`` computes the fingerprint of the same features with the
``simhash`` package (MD5 per feature, ~16x slower than numpy: 4.1 ms vs 0.25 ms per 20 KB
page; the package's default character-4-gram mode takes ~26 ms); tests use it to show
both group the same near-duplicates.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import re
import threading
from collections import Counter
from typing import Any, Iterable

import numpy as np

from crawler.errors import ConfigError

__all__ = [
    "BACKEND",
    "MIN_TOKENS",
    "SHINGLE_WORDS",
    "SimHashIndex",
    "content_sha256",
    "hamming",
    "reference_simhash64",
    "set_backend",
    "simhash64",
    "text_fingerprint",
    "to_int64",
    "to_uint64",
    "token_count",
]

#: Words per shingle (feature) of the SimHash; see the module docstring for why 3.
SHINGLE_WORDS = 3
#: Pages with fewer words than this get no SimHash from :func:`text_fingerprint`. Their
#: visible text ("Loading...", "Please enable JavaScript", "Not found") says nothing
#: about what the page holds, so unrelated pages sharing it would be flagged as
#: near-duplicates of each other; and with a few shingles one changed word moves the
#: fingerprint by many bits, so a verdict on them carries no signal either way.
MIN_TOKENS = 10

_MASK64 = (1 << 64) - 1
_WORD_RE = re.compile(r"\w+")

# SplitMix64 finalizer constants (Steele, Lea, Flood 2014): full avalanche on 64 bits,
# which SimHash needs because every bit of a feature hash casts one vote.
_SM1 = np.uint64(0xBF58476D1CE4E5B9)
_SM2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
# Odd multipliers for combining words into a shingle and for the word length.
_SHINGLE_MUL = np.uint64(0x9E3779B97F4A7C15)
_LEN_MUL = np.uint64(0x165667B19E3779F9)
# Per-position odd multipliers for a word's code points (fixed seed: fingerprints are
# stored in Parquet and compared across processes and runs, so they must never change).
_POS_MUL = (
    np.random.default_rng(0x5EED_D0C5).integers(0, 1 << 63, size=64, dtype=np.uint64) * np.uint64(2)
    + np.uint64(1)
)
_SHINGLE_SALT = [np.uint64(0), np.uint64(0xC2B2AE3D27D4EB4F), np.uint64(0x27D4EB2F165667C5)]

# SimHashIndex packs an entry number into the low bits under the fingerprint.
_ID_BITS = 40
_ID_MASK = (1 << _ID_BITS) - 1

_table_lock = threading.Lock()
_word_table: np.ndarray | None = None

# The C core (crawler/content/_simhash.c), when it was built at install time; otherwise,
# or with RAYCRAWL_SIMHASH=numpy in the environment, the numpy reference below.
# _NATIVE_VERSION is the VERSION of _simhash.c this module drives: an in-place build left
# from an older checkout (editable installs do not rebuild it) is not used.
_NATIVE_VERSION = 1
_native: Any
_native_error = ""
try:
    # By name: the extension is built at install time, so the checker may not find it.
    _native = importlib.import_module("crawler.content._simhash")
except ImportError as exc:  # not built (no compiler at install), or built for another Python
    _native, _native_error = None, str(exc)
else:
    if getattr(_native, "VERSION", None) != _NATIVE_VERSION:
        _native_error = (f"{_native.__file__} is VERSION {getattr(_native, 'VERSION', None)}, this code needs "
                         f"{_NATIVE_VERSION}: rebuild it with pip install -e .")
        _native = None
_native_ready = False


def content_sha256(body: bytes) -> str:
    """Hex SHA-256 of a response body: the exact-duplicate key and the blob address."""
    return hashlib.sha256(body).hexdigest()


def hamming(a: int, b: int) -> int:
    """Number of differing bits between two 64-bit fingerprints."""
    return ((a ^ b) & _MASK64).bit_count()


def to_int64(u: int) -> int:
    """Unsigned 64-bit value -> the signed int64 with the same bits (for Parquet columns)."""
    if not 0 <= u <= _MASK64:
        raise ValueError(f"{u!r} is not an unsigned 64-bit value")
    return u - (1 << 64) if u >= 1 << 63 else u


def to_uint64(i: int) -> int:
    """Signed int64 (as read from Parquet) -> the unsigned 64-bit value with the same bits."""
    if not -(1 << 63) <= i < 1 << 63:
        raise ValueError(f"{i!r} is not a signed 64-bit value")
    return i & _MASK64


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finalizer over a uint64 array (wrapping arithmetic is intended)."""
    x = x ^ (x >> _S30)
    x *= _SM1
    x ^= x >> _S27
    x *= _SM2
    x ^= x >> _S31
    return x


def _table() -> np.ndarray:
    """Boolean table over all code points: True where ``\\w`` matches (built once, ~30 ms).

    Built from the regex itself so the vectorized tokenizer agrees with ``re`` exactly,
    including Python's Unicode database version.
    """
    global _word_table
    if _word_table is None:
        with _table_lock:
            if _word_table is None:
                every = np.arange(0x110000, dtype="<u4").tobytes().decode("utf-32-le", "surrogatepass")
                table = np.zeros(0x110000, dtype=np.bool_)
                for m in _WORD_RE.finditer(every):
                    table[m.start() : m.end()] = True
                _word_table = table
    return _word_table


def _numpy_word_hashes(text: str) -> np.ndarray:
    """64-bit hashes of the ``\\w+`` words of ``text.lower()``, in order (uint64 array)."""
    if not text:
        return np.empty(0, dtype=np.uint64)
    low = text.lower()
    if low.isascii():
        # Most pages: one byte per code point moves 4x less memory through every pass
        # below, and the values (hence the fingerprint) are the same.
        cp = np.frombuffer(low.encode("ascii"), dtype=np.uint8)
        is_word = _table()[:128].take(cp)
    else:
        # surrogatepass: text decoded with errors="surrogateescape" holds lone surrogates;
        # they are not word characters and must not make fingerprinting raise.
        cp = np.frombuffer(low.encode("utf-32-le", "surrogatepass"), dtype="<u4")
        is_word = _table().take(cp)
    edges = np.diff(is_word.view(np.int8), prepend=np.int8(0), append=np.int8(0))
    starts = np.flatnonzero(edges == 1)
    if starts.size == 0:
        return np.empty(0, dtype=np.uint64)
    lengths = np.flatnonzero(edges == -1) - starts
    chars = np.flatnonzero(is_word)
    pos = chars - np.repeat(starts, lengths)
    # Each code point times an odd multiplier chosen by its position in the word
    # (positions wrap at 64: only junk tokens are that long), summed per word.
    terms = cp[chars].astype(np.uint64) * _POS_MUL[pos & 63]
    offsets = np.cumsum(lengths) - lengths
    h = np.add.reduceat(terms, offsets)
    h ^= lengths.astype(np.uint64) * _LEN_MUL
    return _mix(h)


def _numpy_features(words: np.ndarray, shingle: int) -> np.ndarray:
    """Hashes of the ``shingle``-word windows over the word hashes (one per window).

    A text shorter than one window yields a single feature of all its words, so a
    two-word page still has a fingerprint.
    """
    n = min(shingle, words.size)
    if n <= 1:
        return words
    count = words.size - n + 1
    acc = words[:count].copy()
    for j in range(1, n):
        acc = acc * _SHINGLE_MUL + (words[j : j + count] ^ _SHINGLE_SALT[j % 3])
    return _mix(acc)


def _numpy_votes_to_fingerprint(features: np.ndarray) -> int:
    """SimHash of a uint64 feature array: bit j is set iff more than half the features have it."""
    bits = np.unpackbits(features.astype("<u8", copy=False).view(np.uint8), bitorder="little")
    # SWAR sum: view each feature's 64 unpacked bits as 8 uint64 lanes of 8 one-byte
    # counters and add up to 255 rows at a time (no byte overflows into its neighbour);
    # 4x faster than a per-bit sum over a (n, 64) uint8 matrix.
    lanes = bits.view(np.uint64).reshape(-1, 8)
    partial = np.add.reduceat(lanes, np.arange(0, lanes.shape[0], 255), axis=0)
    votes = partial.view(np.uint8).reshape(-1, 64).sum(axis=0, dtype=np.int64)
    # Ties (exactly half) give 0, as in the reference implementation.
    on = votes * 2 > features.size
    return int(np.packbits(on, bitorder="little").view("<u8")[0])


def _numpy_scan(text: str, shingle: int) -> tuple[int, int]:
    """(word count, SimHash) of ``text`` by the numpy reference; SimHash 0 for no words."""
    words = _numpy_word_hashes(text)
    if words.size == 0:
        return 0, 0
    return int(words.size), _numpy_votes_to_fingerprint(_numpy_features(words, shingle))


def _latin1_lower() -> bytes | None:
    """``str.lower()`` of each Latin-1 character, for the C core to lower one-byte strings
    itself (saves the copy lower() makes: ~7 us of a 22k-character page). None, and the C
    core calls lower() on every text, unless each lowers to one Latin-1 character, and
    lowering all 256 at once (in context) gives the same (true of every Unicode version so
    far: the only context rule, final sigma, is outside Latin-1)."""
    chars = [chr(b).lower() for b in range(256)]
    joined = "".join(chars)
    if not all(len(c) == 1 and ord(c) < 256 for c in chars) or "".join(map(chr, range(256))).lower() != joined:
        return None
    return joined.encode("latin-1")


def _native_scan(text: str, shingle: int) -> tuple[int, int]:
    """(word count, SimHash) of ``text`` by the C core: the same values as :func:`_numpy_scan`."""
    global _native_ready
    if not _native_ready:
        table = _table()  # takes _table_lock itself (not reentrant): before the lock below
        with _table_lock:
            if not _native_ready:
                _native.init(
                    table,
                    _POS_MUL,
                    _latin1_lower(),
                    int(_LEN_MUL),
                    int(_SHINGLE_MUL),
                    int(_SHINGLE_SALT[1]),
                    int(_SHINGLE_SALT[2]),
                    int(_SM1),
                    int(_SM2),
                )
                _native_ready = True
    fp: tuple[int, int] = _native.fingerprint(text, shingle)
    return fp


def set_backend(name: str) -> None:
    """Compute fingerprints with ``"native"`` (the C core; ValueError when it is not built)
    or ``"numpy"`` (the reference). Both give the same values; tests and benchmarks switch."""
    global BACKEND, _scan
    if name == "native":
        if _native is None:
            raise ValueError(f"the native SimHash core is not built: {_native_error}")
        BACKEND, _scan = "native", _native_scan
    elif name == "numpy":
        BACKEND, _scan = "numpy", _numpy_scan
    else:
        raise ValueError(f"SimHash backend must be 'native' or 'numpy', got {name!r}")


def _check_shingle(shingle: int) -> None:
    if not isinstance(shingle, int) or not 1 <= shingle <= 3:
        raise ConfigError(f"shingle: must be 1, 2 or 3 words, got {shingle!r}")


def simhash64(text: str, shingle: int = SHINGLE_WORDS) -> int:
    """Unsigned 64-bit SimHash of ``text`` over ``shingle``-word shingles; 0 for no words.

    Every occurrence of a shingle votes once (term-frequency weights).
    """
    _check_shingle(shingle)
    return _scan(text, shingle)[1]


def token_count(text: str) -> int:
    """Number of ``\\w+`` words in ``text`` (the tokenization SimHash uses)."""
    return _scan(text, 1)[0]


def text_fingerprint(text: str, min_tokens: int = MIN_TOKENS, shingle: int = SHINGLE_WORDS) -> int | None:
    """SimHash of ``text``, or None when it has fewer than ``min_tokens`` words.

    This is the contract with the content index (crawler.content.index): a page without a fingerprint is only
    checked for exact duplicates, so near-empty pages are never near-duplicates of each
    other. Tokenizes once (cheaper than counting words and then calling simhash64).
    """
    _check_shingle(shingle)
    count, fp = _scan(text, shingle)
    if count == 0 or count < min_tokens:
        return None
    return fp


def reference_simhash64(text: str, shingle: int = SHINGLE_WORDS) -> int:
    """The same fingerprint definition computed by the ``simhash`` package (MD5 features).

    Slow (~4 ms per 20 KB page): a yardstick for tests and benchmarks, not for the crawl.
    Values differ from :func:`simhash64` (another feature hash); distances agree.
    """
    _check_shingle(shingle)
    from simhash import Simhash  # deferred: only tests and benchmarks need it

    words = _WORD_RE.findall(text.lower())
    if not words:
        return 0
    n = min(shingle, len(words))
    feats = Counter(" ".join(words[i : i + n]) for i in range(len(words) - n + 1))
    return int(Simhash(dict(feats)).value)


def check_simhash_params(k: int, tables: int) -> None:
    """Raise ConfigError unless ``k`` (max Hamming distance) and ``tables`` make a complete
    index: at least ``k + 1`` blocks, so every near-duplicate shares one exact block."""
    if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k <= 63:
        raise ConfigError(f"simhash distance k: must be an integer in 0..63, got {k!r}")
    if not isinstance(tables, int) or isinstance(tables, bool) or not k + 1 <= tables <= 64:
        raise ConfigError(
            f"simhash tables: must be an integer in {k + 1}..64 (at least distance + 1 = {k + 1} "
            f"blocks, or a near-duplicate differing in one bit per block would be missed), got {tables!r}"
        )


class SimHashIndex:
    """Finds stored fingerprints within Hamming distance ``k`` without scanning them all.

    The 64 bits are cut into ``tables`` blocks. If two fingerprints differ in at most
    ``k`` bits and there are at least ``k + 1`` blocks, at least one block holds none of
    the differing bits (pigeonhole), so looking up each block value in its own table
    finds every neighbour; only the entries sharing a block value are compared.
    With 4 tables of 16 bits and N random entries a lookup checks about 4 * N / 65536
    candidates (measured: ~61 for 1M entries).

    Fingerprints may be given signed (int64 from Parquet) or unsigned: they are masked
    to 64 bits.
    """

    def __init__(self, k: int = 3, tables: int = 4) -> None:
        check_simhash_params(k, tables)
        self.k = k
        self.tables = tables
        base, extra = divmod(64, tables)
        self._blocks: list[tuple[int, int]] = []  # (shift, mask) per table
        shift = 0
        for i in range(tables):
            width = base + (1 if i < extra else 0)
            self._blocks.append((shift, (1 << width) - 1))
            shift += width
        # Each entry is ONE int, ``fingerprint << 40 | entry_number``, shared by all tables:
        # a candidate check then touches one object instead of an id, a list slot and a
        # fingerprint (lookups are memory-latency bound; this halves them at 1M entries).
        self._index: list[dict[int, list[int]]] = [{} for _ in range(tables)]
        self._entries: list[int] = []
        self._keys: list[str] = []
        self._lookups = 0
        self._candidates = 0

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, fp: int, key: str) -> None:
        """Store fingerprint ``fp`` under ``key`` (duplicates are kept; insertion order counts)."""
        fp &= _MASK64
        value = (fp << _ID_BITS) | len(self._entries)
        self._entries.append(value)
        self._keys.append(key)
        for (shift, mask), table in zip(self._blocks, self._index):
            block = (fp >> shift) & mask
            bucket = table.get(block)
            if bucket is None:
                table[block] = [value]
            else:
                bucket.append(value)

    def _matches(self, fp: int) -> tuple[list[tuple[int, int]], int]:
        fp &= _MASK64
        k = self.k
        hits: list[int] = []
        compared = 0
        for (shift, mask), table in zip(self._blocks, self._index):
            bucket = table.get((fp >> shift) & mask)
            if bucket:
                compared += len(bucket)
                hits += [v for v in bucket if ((v >> _ID_BITS) ^ fp).bit_count() <= k]
        self._lookups += 1
        self._candidates += compared
        # An entry sharing several blocks with fp sits in several buckets: dedupe hits.
        found = sorted({(((v >> _ID_BITS) ^ fp).bit_count(), v & _ID_MASK) for v in hits})
        return found, compared

    def query(self, fp: int) -> tuple[list[tuple[str, int]], int]:
        """All stored ``(key, distance)`` within ``k`` of ``fp`` (nearest first, then oldest
        first) and the number of candidates checked: fingerprint comparisons made, so an
        entry sharing b blocks with ``fp`` counts b times (on random data b is 1 for all
        but ~1 in 20,000 candidates)."""
        found, checked = self._matches(fp)
        keys = self._keys
        return [(keys[e], d) for d, e in found], checked

    def nearest(self, fp: int) -> tuple[str, int] | None:
        """The closest stored ``(key, distance)`` within ``k`` (oldest on ties), or None."""
        found, _ = self._matches(fp)
        if not found:
            return None
        d, e = found[0]
        return self._keys[e], d

    def items(self) -> Iterable[tuple[str, int]]:
        """Stored ``(key, unsigned fingerprint)`` pairs in insertion order."""
        return zip(self._keys, (v >> _ID_BITS for v in self._entries))

    def stats(self) -> dict[str, float | int]:
        """Lookup counters: how much work the permuted tables save over a scan."""
        return {
            "entries": len(self._entries),
            "k": self.k,
            "tables": self.tables,
            "lookups": self._lookups,
            "candidates_checked_total": self._candidates,
            "candidates_checked_mean": self._candidates / self._lookups if self._lookups else 0.0,
        }


#: Which SimHash implementation is in use: ``"native"`` (the C core) or ``"numpy"``.
BACKEND = "numpy"
_scan = _numpy_scan


def _backend_from_env() -> str:
    """``RAYCRAWL_SIMHASH``: ``auto`` (default: native when built), ``native`` or ``numpy``."""
    want = os.environ.get("RAYCRAWL_SIMHASH", "").strip().lower() or "auto"
    if want not in ("auto", "native", "numpy"):
        raise ConfigError(f"RAYCRAWL_SIMHASH: must be auto, native or numpy, got {want!r}")
    if want == "auto":
        return "numpy" if _native is None else "native"
    if want == "native" and _native is None:
        raise ConfigError(f"RAYCRAWL_SIMHASH=native but the C core is not built ({_native_error}): "
                          "reinstall with a C compiler (pip install -e .)")
    return want


set_backend(_backend_from_env())
