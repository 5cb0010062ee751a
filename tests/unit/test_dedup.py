"""Content fingerprints and the reference permuted-table SimHash index (the crawl's sharded
content index is tested in test_contentindex.py)."""

from __future__ import annotations

import hashlib
import itertools
import random
import re
import statistics
from collections.abc import Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from simhash import Simhash

from crawler.content.fingerprints import (
    SHINGLE_WORDS,
    SimHashIndex,
    _numpy_features,
    _numpy_word_hashes,
    content_sha256,
    hamming,
    reference_simhash64,
    simhash64,
    text_fingerprint,
    to_int64,
    to_uint64,
    token_count,
)
from crawler.errors import ConfigError

M64 = 2**64 - 1


# --- generated text ---------------------------------------------------------------------


class Corpus:
    """Zipf-distributed words: unrelated pages share their frequent words, like real text."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        letters = "abcdefghijklmnopqrstuvwxyz"
        self.vocab = ["".join(self.rng.choice(letters) for _ in range(self.rng.randint(2, 9))) for _ in range(20_000)]
        self.weights = [1 / (i + 1) for i in range(len(self.vocab))]

    def words(self, n: int) -> list[str]:
        return self.rng.choices(self.vocab, self.weights, k=n)

    def edit(self, words: list[str], changes: int) -> list[str]:
        out = list(words)
        for _ in range(changes):
            out[self.rng.randrange(len(out))] = self.rng.choice(self.vocab)
        return out


# --- small functions --------------------------------------------------------------------


def test_content_sha256_is_hex_sha256() -> None:
    assert content_sha256(b"abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert content_sha256(b"") == hashlib.sha256(b"").hexdigest()


def test_hamming_counts_differing_bits() -> None:
    assert hamming(0, 0) == 0
    assert hamming(0, M64) == 64
    assert hamming(0b1011, 0b0001) == 2
    assert hamming(to_int64(M64), M64) == 0  # a signed value from Parquet compares by its bits


@pytest.mark.parametrize("u", [0, 1, 2**63 - 1, 2**63, M64, 0xDEADBEEFCAFEBABE])
def test_int64_round_trip(u: int) -> None:
    i = to_int64(u)
    assert -(2**63) <= i < 2**63
    assert to_uint64(i) == u


def test_int64_conversions_reject_out_of_range() -> None:
    with pytest.raises(ValueError):
        to_int64(-1)
    with pytest.raises(ValueError):
        to_int64(2**64)
    with pytest.raises(ValueError):
        to_uint64(2**63)


# --- simhash64 --------------------------------------------------------------------------


def test_simhash_of_text_without_words_is_zero() -> None:
    assert simhash64("") == 0
    assert simhash64("  \n\t ... --- !!! ") == 0
    assert token_count("  ... ") == 0


def test_simhash_ignores_case_punctuation_and_spacing() -> None:
    text = "The quick brown fox jumps over the lazy dog, again and again."
    assert simhash64(text) == simhash64("the QUICK brown   fox -- jumps over the lazy dog again and again")
    assert simhash64(text) != simhash64("The quick brown fox jumps over the lazy cat, again and again.")
    assert 0 < simhash64(text) <= M64


def test_simhash_is_stable_across_releases() -> None:
    # Fingerprints are stored in Parquet and compared between crawls: a change in the
    # hashing constants would silently break near-duplicate detection against old data.
    assert simhash64("the quick brown fox jumps over the lazy dog") == simhash64(
        "The quick brown fox jumps over the lazy dog."
    )
    assert simhash64("the quick brown fox jumps over the lazy dog") == 0xF514AC7D35F50078
    assert simhash64("the quick brown fox jumps over the lazy dog", 1) == 0x084D696CF5406726
    assert simhash64("the quick brown fox jumps over the lazy dog", 2) == 0x6836110944061601


def test_text_with_lone_surrogates_and_many_scripts_is_fingerprinted_by_its_words() -> None:
    text = "caf\u00e9 na\u00efve \udcff \u6771\u4eac \u0663\u0664 \U0001f600 stra\u00dfe \u0130stanbul"
    words = re.findall(r"\w+", text.lower())  # the documented tokenization
    assert token_count(text) == len(words) == 7  # "İ" lowers to "i" + a combining dot: two words
    # The lone surrogate, the emoji and the spacing are not words: the same fingerprint as
    # the words alone, in the fast path and in the reference alike.
    assert simhash64(text) == simhash64(" ".join(words)) != 0
    assert reference_simhash64(text) == reference_simhash64(" ".join(words)) != 0
    assert simhash64(text) == 0xB8B5D416939AA4EE  # stored fingerprints of non-ASCII text must not move


@pytest.mark.parametrize(("edit", "distance", "near"), [
    ("one word replaced", 0, True),
    ("one word deleted", 0, True),
    ("one word inserted", 1, True),
    ("halves swapped", 1, True),
    ("last 100 words rewritten", 6, False),
    ("unrelated text", 27, False),
])
def test_known_edits_move_the_fingerprint_by_known_distances(edit: str, distance: int, near: bool) -> None:
    """Fixed edits of a fixed 1,500-word text: the fast fingerprint moves by the pinned
    distance (fingerprints are stored and compared across crawls), and the reference
    implementation makes the same near-duplicate call (distance <= 3 or not)."""
    corpus = Corpus(seed=17)
    base = corpus.words(1500)
    edited = {
        "one word replaced": base[:700] + ["zzzz"] + base[701:],
        "one word deleted": base[:300] + base[301:],
        "one word inserted": base[:1000] + ["extra"] + base[1000:],
        "halves swapped": base[750:] + base[:750],
        "last 100 words rewritten": base[:1400] + corpus.words(100),
        "unrelated text": corpus.words(1500),
    }[edit]
    a, b = " ".join(base), " ".join(edited)
    assert hamming(simhash64(a), simhash64(b)) == distance
    assert (hamming(reference_simhash64(a), reference_simhash64(b)) <= 3) is near


_TEXT = st.text(
    alphabet=st.sampled_from(list("ab cdE\u00e9\u00df_1 .,\n-\u6771\u0130\u0663\u00a0\u2014") + ["\udcff", "\U0001f600"]),
    max_size=300,
)


@settings(max_examples=200, deadline=None)
@given(_TEXT)
def test_vectorized_tokenizer_matches_the_regex(text: str) -> None:
    words = re.findall(r"\w+", text.lower())
    hashes = _numpy_word_hashes(text)
    assert token_count(text) == len(words) == hashes.size
    # The same word gets the same hash wherever it stands; different words differ.
    by_word: dict[str, int] = {}
    for w, h in zip(words, hashes.tolist()):
        assert by_word.setdefault(w, h) == h
    assert len(set(by_word.values())) == len(by_word)


_WORDY = st.lists(st.sampled_from(["alpha", "beta", "gamma", "delta", "\u00e9t\u00e9", "x1", "_"]), max_size=120).map(
    " ".join
)


@settings(max_examples=100, deadline=None)
@given(_WORDY, st.sampled_from([1, 2, 3]))
def test_vectorized_votes_equal_the_simhash_package_given_the_same_feature_hash(text: str, shingle: int) -> None:
    """With our feature hash plugged into simhash.Simhash, the fingerprints are identical,
    so the numpy vote counting (weights, tie rule, bit order) is exactly SimHash."""

    def feature_hash(feature: bytes) -> int:
        return int(_numpy_features(_numpy_word_hashes(feature.decode("utf-8")), shingle)[0])

    words = re.findall(r"\w+", text.lower())
    if not words:
        assert simhash64(text, shingle) == 0
        return
    n = min(shingle, len(words))
    feats: dict[str, int] = {}
    for i in range(len(words) - n + 1):
        f = " ".join(words[i : i + n])
        feats[f] = feats.get(f, 0) + 1
    assert simhash64(text, shingle) == Simhash(feats, hashfunc=feature_hash).value


def test_fast_simhash_groups_the_same_near_duplicates_as_the_reference() -> None:
    corpus = Corpus(seed=5)
    texts: list[str] = []
    groups: list[int] = []
    for g in range(30):
        base = corpus.words(1500)
        for changes in (0, 0, 1, 2):
            texts.append(" ".join(corpus.edit(base, changes)))
            groups.append(g)
    fast = [simhash64(t) for t in texts]
    ref = [reference_simhash64(t) for t in texts]
    agree = 0
    within: list[tuple[int, int]] = []
    pairs = list(itertools.combinations(range(len(texts)), 2))
    for i, j in pairs:
        df, dr = hamming(fast[i], fast[j]), hamming(ref[i], ref[j])
        agree += (df <= 3) == (dr <= 3)
        if groups[i] == groups[j]:
            within.append((df, dr))
        else:
            assert df > 3 and dr > 3, "unrelated pages grouped"
    assert agree / len(pairs) >= 0.98
    # Near the threshold the two feature hashes add independent noise, so single pairs
    # may land on either side of 3; the distributions must match.
    near_fast = sum(df <= 3 for df, _ in within) / len(within)
    near_ref = sum(dr <= 3 for _, dr in within) / len(within)
    assert near_fast >= 0.85 and near_ref >= 0.85
    assert abs(near_fast - near_ref) <= 0.08
    mean_fast = statistics.mean(df for df, _ in within)
    mean_ref = statistics.mean(dr for _, dr in within)
    assert 0.75 <= mean_fast / mean_ref <= 1.33


def test_three_word_shingles_separate_unrelated_pages_that_single_words_confuse() -> None:
    corpus = Corpus(seed=9)
    pages = [" ".join(corpus.words(1500)) for _ in range(40)]
    pairs = list(itertools.combinations(range(len(pages)), 2))

    def unrelated_within_3(shingle: int) -> int:
        fps = [simhash64(p, shingle) for p in pages]
        return sum(hamming(fps[i], fps[j]) <= 3 for i, j in pairs)

    assert unrelated_within_3(1) > 10  # frequent words dominate single-word votes
    assert unrelated_within_3(SHINGLE_WORDS) == 0
    fps = [simhash64(p) for p in pages]
    assert min(hamming(fps[i], fps[j]) for i, j in pairs) >= 10

    found = 0
    for _ in range(30):
        base = corpus.words(1500)
        found += hamming(simhash64(" ".join(base)), simhash64(" ".join(corpus.edit(base, 1)))) <= 3
    assert found >= 27


def test_text_fingerprint_skips_short_texts() -> None:
    assert text_fingerprint("Page not found", min_tokens=10) is None
    assert text_fingerprint("", min_tokens=0) is None
    long = "one two three four five six seven eight nine ten"
    assert text_fingerprint(long, min_tokens=10) == simhash64(long)
    assert text_fingerprint(long, min_tokens=11) is None


def test_shingle_size_is_validated() -> None:
    with pytest.raises(ConfigError, match="shingle"):
        simhash64("a b c", shingle=4)


# --- SimHashIndex -----------------------------------------------------------------------


def _flip(fp: int, bits: Iterable[int]) -> int:
    for b in bits:
        fp ^= 1 << b
    return fp


_BACKGROUND = [random.Random(1).getrandbits(64) for _ in range(2000)]


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, M64),
    st.sets(st.integers(0, 63), max_size=3),
    st.sets(st.integers(0, 63), min_size=4, max_size=8),
    st.sampled_from([(3, 4), (2, 3), (3, 6), (0, 1)]),
)
def test_index_finds_every_fingerprint_within_k_and_none_beyond(
    fp: int, near_bits: set[int], far_bits: set[int], kt: tuple[int, int]
) -> None:
    k, tables = kt
    near_bits = set(sorted(near_bits)[:k])
    idx = SimHashIndex(k=k, tables=tables)
    for i, b in enumerate(_BACKGROUND[:300]):
        idx.add(b, f"bg{i}")
    idx.add(_flip(fp, far_bits), "far")
    idx.add(_flip(fp, near_bits), "near")
    hits, checked = idx.query(fp)
    assert ("near", len(near_bits)) in hits
    assert all(d <= k for _, d in hits)
    assert "far" not in [key for key, _ in hits]  # 4+ bits away: beyond every k tested
    reported = {key for key, _ in hits}
    assert all(hamming(fp, f) <= k for key, f in idx.items() if key in reported)
    # ...and nothing within k escapes, background included.
    assert reported == {key for key, f in idx.items() if hamming(fp, f) <= k}
    # Comparisons made: every neighbour found was compared, and an entry at most once per
    # table (one sharing b blocks with fp counts b times, so not "<= len(idx)").
    assert len(reported) <= checked <= tables * len(idx)


def test_one_flipped_bit_in_each_of_k_blocks_is_found() -> None:
    # The worst case for the pigeonhole: k of the 4 blocks differ, one stays exact.
    idx = SimHashIndex(k=3, tables=4)
    fp = 0x0123456789ABCDEF
    idx.add(_flip(fp, [0, 16, 32]), "a")
    idx.add(_flip(fp, [5, 21, 40, 60]), "b")  # 4 bits: beyond k, every block differs
    assert idx.query(fp)[0] == [("a", 3)]


def test_index_agrees_with_a_linear_scan_on_clustered_data() -> None:
    rng = random.Random(3)
    bases = [rng.getrandbits(64) for _ in range(200)]
    idx = SimHashIndex(k=3, tables=4)
    stored: list[tuple[str, int]] = []
    for i in range(3000):
        fp = _flip(rng.choice(bases), rng.sample(range(64), rng.randint(0, 6)))
        idx.add(fp, f"u{i}")
        stored.append((f"u{i}", fp))
    for _ in range(300):
        q = _flip(rng.choice(bases), rng.sample(range(64), rng.randint(0, 3)))
        expected = sorted(
            ((hamming(q, fp), n, key) for n, (key, fp) in enumerate(stored) if hamming(q, fp) <= 3),
        )
        hits, checked = idx.query(q)
        assert hits == [(key, d) for d, _, key in expected]
        assert idx.nearest(q) == (hits[0] if hits else None)


def test_results_are_sorted_by_distance_then_insertion() -> None:
    idx = SimHashIndex()
    fp = 0xFFFF_0000_FFFF_0000
    idx.add(_flip(fp, [1, 2]), "two-first")
    idx.add(_flip(fp, [3]), "one-first")
    idx.add(_flip(fp, [4, 5]), "two-second")
    idx.add(_flip(fp, [6]), "one-second")
    idx.add(fp, "zero")
    hits, _ = idx.query(fp)
    assert hits == [("zero", 0), ("one-first", 1), ("one-second", 1), ("two-first", 2), ("two-second", 2)]
    assert idx.nearest(fp) == ("zero", 0)
    assert idx.nearest(_flip(fp, range(20))) is None
    assert SimHashIndex().nearest(fp) is None


def test_signed_fingerprints_from_parquet_match_unsigned_ones() -> None:
    idx = SimHashIndex()
    fp = 0xF000_0000_0000_0001
    idx.add(to_int64(fp), "a")
    assert idx.query(fp)[0] == [("a", 0)]
    assert idx.query(to_int64(_flip(fp, [63])))[0] == [("a", 1)]


def test_candidates_per_lookup_stay_far_below_the_table_size() -> None:
    rng = random.Random(11)
    idx = SimHashIndex(k=3, tables=4)
    for i in range(50_000):
        idx.add(rng.getrandbits(64), str(i))
    total = 0
    for _ in range(500):
        total += idx.query(rng.getrandbits(64))[1]
    mean = total / 500
    assert mean < 10  # expected 4 * 50,000 / 65,536 = 3.05
    st_ = idx.stats()
    assert st_["lookups"] == 500 and st_["candidates_checked_total"] == total
    assert st_["candidates_checked_mean"] == pytest.approx(mean)
    assert len(idx) == st_["entries"] == 50_000


def test_a_fingerprint_found_through_several_tables_is_reported_once() -> None:
    idx = SimHashIndex(k=3, tables=4)
    idx.add(12345, "a")
    idx.add(_flip(12345, [0, 20]), "b")
    hits, checked = idx.query(12345)  # "a" is in all 4 of the query's buckets, "b" in 2
    assert hits == [("a", 0), ("b", 2)]
    assert checked == 6  # comparisons made


@pytest.mark.parametrize("k, tables", [(3, 3), (3, 65), (-1, 4), (3, 0)])
def test_index_needs_at_least_k_plus_one_tables(k: int, tables: int) -> None:
    with pytest.raises(ConfigError, match="tables|distance"):
        SimHashIndex(k=k, tables=tables)
