"""The C SimHash core (crawler/content/_simhash.c) gives the numpy reference's values, bit for bit.

Fingerprints are stored in Parquet and compared across runs and machines, and a worker
without the compiled core (a Ray ``--working-dir`` upload, an install without a compiler)
computes them with numpy: the two must never disagree. Every test here compares the two
on the same input; the numpy functions are the reference.

The extension is built by ``pip install -e .`` when a C compiler is there. Without it the
comparison tests skip with the reason, except under CI (``CI=true``), which installs with
gcc: there ``test_the_native_core_is_built`` fails instead, so a CI run never passes
without having compared the two.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler.content import fingerprints as fp
from tests.corpus import in_ci, require_corpus

ROOT = Path(__file__).resolve().parents[2]


def native() -> None:
    """Skip when the C core is not built, with the reason; under CI (which builds it) fail."""
    if fp._native is None:
        why = f"the C SimHash core is not built ({fp._native_error})"
        if in_ci():
            pytest.fail(f"{why}: CI installs with gcc, so pip install -e . must have built it")
        pytest.skip(f"{why}: pip install -e . with a C compiler builds it")


def both(text: str, shingle: int) -> tuple[tuple[int, int], tuple[int, int]]:
    return fp._native_scan(text, shingle), fp._numpy_scan(text, shingle)


def assert_same(text: str, shingles: tuple[int, ...] = (1, 2, 3)) -> None:
    for shingle in shingles:
        got, want = both(text, shingle)
        assert got == want, (shingle, len(text), text[:80])


# --- the build --------------------------------------------------------------------------


def test_the_native_core_is_built_and_in_use() -> None:
    native()
    assert fp.BACKEND == ("numpy" if os.environ.get("RAYCRAWL_SIMHASH") == "numpy" else "native")


# --- hand-picked cases ------------------------------------------------------------------

EDGES = [
    "",
    " ",
    "...,;",
    "word",
    "Word",
    "two words",
    "three small words",
    "four small short words",
    "a b c d e f g h i",  # min_tokens - 1
    "a b c d e f g h i j",  # exactly min_tokens
    "  leading and trailing  ",
    "_ __ a_b 1 12 x1 1x \u0663\u0664",  # underscore and digits (ASCII and Arabic-Indic) are \w
    "cafe\u0301 e\u0301te\u0301 \u0915\u093f",  # combining marks are \w: they stay in the word
    "\u0130stanbul \u1e9e \u03a3\u039f\u03a3",  # lower() changes the length, or the letter by context
    "\U0001f600 grin \U0001f600\U0001f600 \U00020000\U00020001 \U0001d400bold",  # non-BMP: emoji no, CJK ext B and math letters yes
    "lone \udcff surrogate\udc80inside \ud800\udfff pair",  # lone surrogates are non-word characters
    "\x00nul\x00 \x7f \x80\xa0nbsp\xa0 \xaa\xb5\xba \xff\xdf",  # the Latin-1 storage kind
    "\u00e9\u4e00 mixed \u6771\u4eac width",  # the two-byte kind
    "".join(map(chr, range(256))),  # every Latin-1 character: the C core lowers them itself
    "\u00c0\u00c9\u00ce\u00d5\u00dc \u00de\u00c6 STRASSE Stra\u00dfe M\u00dcNCHEN \u00b5 \u00d7\u00f7 \u00ff",
    "\u0178VES \u0178ves",  # two-byte text whose lower() is one-byte (U+0178 -> U+00FF)
    "x" * 63 + " " + "y" * 64 + " " + "z" * 65 + " " + "w" * 200,  # positions wrap at 64
]


@pytest.mark.parametrize("text", EDGES, ids=range(len(EDGES)))
def test_edge_cases_are_equal(text: str) -> None:
    native()
    assert_same(text)


def test_short_texts_are_one_feature_of_all_their_words() -> None:
    """1, 2 and 3 words against every window width: the shorter-than-a-window rule holds in C."""
    native()
    for n in range(0, 7):
        text = " ".join(f"w{i}" for i in range(n))
        assert_same(text)
        count, _ = fp._native_scan(text, 3)
        assert count == n
    # One word: its hash is the only feature, so every shingle width gives the same SimHash.
    assert len({fp._native_scan("solo", s)[1] for s in (1, 2, 3)}) == 1


def test_the_public_functions_give_the_reference_values(monkeypatch: pytest.MonkeyPatch) -> None:
    native()
    text = "The quick brown fox jumps over the lazy dog, again and again and again. " * 3
    native_values = (fp.simhash64(text), fp.text_fingerprint(text), fp.token_count(text), fp.text_fingerprint("a b"))
    monkeypatch.setattr(fp, "_scan", fp._numpy_scan)
    assert native_values == (fp.simhash64(text), fp.text_fingerprint(text), fp.token_count(text), None)
    assert native_values[2] == 42


def test_latin1_text_is_lowered_in_c_as_lower_does() -> None:
    """One-byte strings skip the lower() copy: the table of Python's own lower() is used."""
    native()
    table = fp._latin1_lower()
    assert table is not None and len(table) == 256
    assert table[ord("A")] == ord("a") and table[0xC0] == 0xE0 and table[0xD7] == 0xD7 and table[0xDF] == 0xDF
    upper = "ABC \u00c0\u00c9 \u00de123_X"
    assert fp._native_scan(upper, 3) == fp._native_scan(upper.lower(), 3) == fp._numpy_scan(upper, 3)


class Shouting(str):
    """A str whose lower() is its own: both paths must call it, not str.lower."""

    def lower(self) -> str:
        return str.upper(self)


def test_a_str_subclass_is_lowered_with_its_own_lower() -> None:
    native()
    text = Shouting("Mixed Case words, here and THERE and there")
    assert fp._native_scan(text, 3) == fp._numpy_scan(text, 3) != fp._numpy_scan(str(text), 3)


def test_ties_give_zero_bits() -> None:
    """Two features voting against each other on a bit: exactly half is not a majority."""
    native()
    for text in ("alpha beta", "alpha beta gamma delta", "x y z w"):
        for shingle in (1, 2):
            assert_same(text, (shingle,))


# --- generated text ---------------------------------------------------------------------

# Code points that matter: ASCII word and non-word characters, Latin-1, combining marks,
# digits of other scripts, CJK, lone surrogates and non-BMP characters.
_ALPHABET = st.one_of(
    st.sampled_from(list("abcXYZ019_ \n\t.,-'") + ["\u00e9", "\u00df", "\u00a0", "\u0301", "\u0663", "\u6771",
                                                     "\u0130", "\u03a3", "\udcff", "\ud800", "\U0001f600",
                                                     "\U00020000", "\u2014", "\ufeff", "\u200b"]),
    st.characters(min_codepoint=0, max_codepoint=0x10FFFF),  # anything, surrogates included
)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=_ALPHABET, max_size=400), st.sampled_from([1, 2, 3]))
def test_random_unicode_is_equal(text: str, shingle: int) -> None:
    native()
    assert_same(text, (shingle,))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "ab", "\u00e9t\u00e9", "x1", "_", "\u6771\u4eac"]), max_size=600).map(" ".join))
def test_repetitive_word_lists_are_equal(text: str) -> None:
    """Few distinct words, many repeats: vote counts past the 255-feature lane flush."""
    native()
    assert_same(text)


@pytest.mark.parametrize("repeats", [254, 255, 256, 511, 512, 70_000])
def test_one_feature_repeated_past_the_counter_width_is_equal(repeats: int) -> None:
    """Identical features set the same bits every time: the C core counts votes in one-byte
    lanes flushed every 255 features, so a bit set in all of them is where a lane would
    overflow."""
    native()
    text = "same " * repeats
    assert_same(text)
    assert_same(text + "other words end it")


def test_a_five_megabyte_text_is_equal() -> None:
    native()
    rng = random.Random(20)
    vocab = ["".join(rng.choice("abcdefghij\u00e9\u6771") for _ in range(rng.randint(1, 12))) for _ in range(3000)]
    words: list[str] = []
    size = 0
    while size < 5_000_000:
        w = rng.choice(vocab)
        words.append(w)
        size += len(w) + 1
    text = " ".join(words)
    assert_same(text, (3,))
    assert fp._native_scan(text, 3)[0] == len(words)


# --- the real pages ---------------------------------------------------------------------


@cache
def corpus_texts() -> list[tuple[str, str, str]]:
    """(file, visible text, main text) of every corpus page, parsed as the crawler does."""
    from crawler.parse.html import parse_page

    root = require_corpus()
    out = []
    for line in (root / "manifest.jsonl").read_text(encoding="utf-8").splitlines():
        page = json.loads(line)
        data = (root / page["file"]).read_bytes()
        body = gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
        parsed = parse_page(body, page["url"], "text/html", user_agent_token="raycrawl")
        out.append((page["file"], parsed.text or "", parsed.main_text or ""))
    return out


def test_the_real_pages_are_equal() -> None:
    native()
    pages = corpus_texts()
    assert len(pages) >= 200
    nonascii = 0
    for name, text, main in pages:
        nonascii += not text.isascii()
        for t in (text, main):
            for shingle in (1, 2, 3):
                assert fp._native_scan(t, shingle) == fp._numpy_scan(t, shingle), (name, shingle)
    assert nonascii >= 100  # the one-, two- and four-byte storage kinds all come up


# --- the fallback -----------------------------------------------------------------------


def test_without_the_native_core_the_numpy_path_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """An install without a compiler: the import fails, BACKEND says numpy, fingerprints work."""
    for name in ("BACKEND", "_scan"):  # set_backend rebinds them; undo() puts them back
        monkeypatch.setattr(fp, name, getattr(fp, name))
    monkeypatch.setattr(fp, "_native", None)
    monkeypatch.setattr(fp, "_native_error", "No module named 'crawler.content._simhash'")
    monkeypatch.setattr(fp, "_native_scan", None)  # any use of the C path would now raise
    fp.set_backend("numpy")
    assert fp.BACKEND == "numpy"
    text = "numpy computes this fingerprint alone, word by word, eleven words long"
    assert fp.token_count(text) == 11
    assert fp.text_fingerprint(text) == fp._numpy_scan(text, 3)[1] != 0
    assert fp.text_fingerprint("too short") is None
    with pytest.raises(ValueError, match="not built"):
        fp.set_backend("native")


def _run_fresh(code: str) -> str:
    """stdout of ``code`` run by a new interpreter on this checkout (RAYCRAWL_SIMHASH unset)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("RAYCRAWL_SIMHASH", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, timeout=120)
    return out.stdout


def test_the_import_falls_back_in_a_fresh_process() -> None:
    """With the extension made unimportable, the module still loads and picks numpy."""
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'crawler.content._simhash':\n"
        "            raise ImportError('blocked for the test')\n"
        "sys.meta_path.insert(0, Block())\n"
        "from crawler.content import fingerprints as fp\n"
        "print(fp.BACKEND, fp.text_fingerprint('one two three four five six seven eight nine ten'))\n"
    )
    backend, value = _run_fresh(code).split()
    assert backend == "numpy"
    assert int(value) == fp._numpy_scan("one two three four five six seven eight nine ten", 3)[1]


def test_a_stale_build_is_not_used(tmp_path: Path) -> None:
    """An in-place .so from an older checkout (another VERSION) falls back to numpy, saying why."""
    code = (
        "import sys, types\n"
        "stale = types.ModuleType('crawler.content._simhash')\n"
        "stale.VERSION = 0\n"
        "stale.__file__ = '/old/_simhash.so'\n"
        "sys.modules['crawler.content._simhash'] = stale\n"
        "from crawler.content import fingerprints as fp\n"
        "print(fp.BACKEND, fp._native_error)\n"
    )
    assert _run_fresh(code).startswith("numpy /old/_simhash.so is VERSION 0, this code needs 1: rebuild it")


@pytest.mark.parametrize(
    ("value", "backend"),
    [("numpy", "numpy"), ("NumPy ", "numpy"), ("native", "native"), ("", "native"), ("auto", "native"), ("bogus", None)],
)
def test_the_environment_variable_picks_the_backend(value: str, backend: str | None) -> None:
    if backend == "native":
        native()
    code = "from crawler.content import fingerprints as fp; print(fp.BACKEND)"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAYCRAWL_SIMHASH": value}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    if backend is None:
        assert out.returncode != 0
        assert "RAYCRAWL_SIMHASH: must be auto, native or numpy, got 'bogus'" in out.stderr
    else:
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == backend


def test_an_unknown_backend_is_refused() -> None:
    with pytest.raises(ValueError, match="'native' or 'numpy'"):
        fp.set_backend("fortran")
    assert fp.BACKEND in ("native", "numpy")
