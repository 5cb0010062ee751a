"""The crawler extracts and resolves links as a real browser does, on real pages.

``tests/fixtures/browser_links.json.gz`` holds, for every page of the real-web corpus
(``manifest.jsonl``: file, original URL) and for synthetic pages (odd hrefs, tricky markup,
legacy encodings), ``a.href`` of each ``a[href], area[href]`` in document order, as
headless Chromium computed it with JavaScript off, the page served as ``text/html`` from
its original URL (``tools/browser_links.py`` regenerates it). These tests parse the same
bytes at the same URL with the crawler's code path, ``parse_page(body, url, "text/html")``,
and compare without a browser or network (docs/browser-agreement.md has the numbers).

A resolved URL must equal the browser's exactly (fragment included), or belong to one of
the documented deliberate classes, each recognised by a small classifier below. Links
whose scheme is not http(s) (``mailto:``, ``javascript:``...) are counted but not
asserted: the crawler only needs to reject them, which the normalizer does.

The corpus pages are read from ``$CRAWLER_CORPUS``, else ``../shared/corpus`` beside the
checkout (tests/corpus.py). Without one the synthetic tests still run and the corpus tests
skip, one skip per test (not per page) saying how to get it; under CI (``CI=true``)
test_corpus_is_available fails instead.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest

from crawler.parse import ParsedPage, lookup_charset, parse_page
from crawler.urls import normalize
from jobs.cli import main as crawl_main
from tests.corpus import corpus_dir, in_ci, missing_reason, require_corpus

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "browser_links.json.gz"
# crawler/parse/charset.py reads a late charset <meta> only within this many bytes (Chromium: whole head).
LATE_META_WINDOW = 32768


@cache
def fixture() -> dict:
    return json.loads(gzip.decompress(FIXTURE.read_bytes()).decode("utf-8", "surrogatepass"))


def corpus_body(page: dict) -> bytes:
    data = (require_corpus() / page["file"]).read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


# ------------------------------------------------------------------ deliberate classes


def _is_http(url: str | None) -> bool:
    return url is not None and url.startswith(("http:", "https:"))


def _after_authority(url: str) -> str:
    i = url.find("//") + 2
    cut = [j for j in (url.find(c, i) for c in "/?#") if j >= 0]
    return url[min(cut):] if cut else ""


def authority_as_written(ours: str | None, theirs: str | None) -> bool:
    """join_url keeps the host and port as written (case, IDNA, %-escapes, default or
    empty port, IPv4 shorthands, invalid hosts); UrlNormalizer canonicalizes or rejects
    them later, so the URL the crawler fetches is the browser's."""
    if ours is None:
        return False
    if theirs is None:
        return normalize(ours) is None
    return _after_authority(ours) == _after_authority(theirs) and normalize(ours) == normalize(theirs)


def chrome_path_escapes(ours: str | None, theirs: str | None) -> bool:
    """Chromium percent-encodes '|' and '^' in paths; the WHATWG URL Standard (which
    join_url follows, as Firefox does) keeps them. The normalizer encodes both."""
    if ours is None or theirs is None:
        return False
    path_end = min([j for j in (ours.find("?"), ours.find("#")) if j >= 0] or [len(ours)])
    escaped = ours[:path_end].replace("|", "%7C").replace("^", "%5E") + ours[path_end:]
    return escaped == theirs and normalize(ours) == normalize(theirs)


_META_CHARSET = re.compile(rb"<meta[^>]+charset\s*=", re.IGNORECASE)
_BODY_TAG = re.compile(rb"<body[\s>]", re.IGNORECASE)


def page_class(parsed: ParsedPage, body: bytes, browser_charset: str) -> str | None:
    """A deliberate page-wide difference, if any.

    * ``degraded``: markup nested so deep that parse_page reads a flattened copy (links
      inside script text become links); Chromium caps the depth instead.
    * ``late-meta-beyond-window``: the only charset <meta> is past the 32 KB the crawler
      scans; Chromium scans the whole head.
    * ``undeclared-charset``: nothing either reads declares the encoding (no charset
      <meta>, or one in <body> past 1024 bytes); the crawler reads UTF-8, Chromium
      guesses (its locale default windows-1252, or a detector's guess).
    """
    if parsed.degraded:
        return "degraded"
    if lookup_charset(browser_charset) == parsed.charset or parsed.charset != "utf-8":
        return None
    meta = _META_CHARSET.search(body)
    if meta is None:
        return "undeclared-charset"
    body_tag = _BODY_TAG.search(body, 0, meta.start())
    if meta.start() > 1024 and body_tag is not None:
        return "undeclared-charset"
    if meta.start() >= LATE_META_WINDOW:
        return "late-meta-beyond-window"
    return None


@dataclass
class Comparison:
    """One page: exact agreements, differences by class, and unexplained differences."""

    links: int = 0
    http_links: int = 0
    exact: int = 0
    http_exact: int = 0
    classes: Counter = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)


def compare(body: bytes, url: str, browser_charset: str, hrefs: list[str | None], max_links: int = 5000) -> Comparison:
    """Parse ``body`` at ``url`` as the crawler does and compare with the browser's hrefs."""
    parsed = parse_page(body, url, "text/html", max_links=max_links)
    assert parsed.error is None, parsed.error
    result = Comparison(links=len(hrefs))
    cls = page_class(parsed, body, browser_charset)
    if cls is None and lookup_charset(browser_charset) != parsed.charset:
        result.failures.append(f"charset: crawler {parsed.charset}, browser {browser_charset}")
    if cls == "degraded":  # the flattened copy has other links; nothing to align
        result.classes[cls] += len(hrefs)
        return result
    if len(parsed.links) + parsed.links_dropped != len(hrefs):
        result.failures.append(f"{len(parsed.links)} (+{parsed.links_dropped} dropped) links, browser {len(hrefs)}")
    for i, (link, theirs) in enumerate(zip(parsed.links, hrefs)):
        ours = link.resolved
        http = _is_http(ours) or _is_http(theirs)
        result.http_links += http
        if ours == theirs:
            result.exact += 1
            result.http_exact += http
        elif not http:
            result.classes["non-http"] += 1
        elif authority_as_written(ours, theirs):
            result.classes["authority-as-written"] += 1
        elif chrome_path_escapes(ours, theirs):
            result.classes["chrome-path-escapes"] += 1
        elif cls is not None and not link.raw.isascii():
            result.classes[cls] += 1
        else:
            result.failures.append(f"#{i} raw {link.raw!r}: crawler {ours!r}, browser {theirs!r}")
    # Links past max_links are counted, not returned: the ones returned are the first.
    result.http_links += sum(_is_http(h) for h in hrefs[len(parsed.links) :])
    if parsed.links_dropped:
        result.classes["max-links-cap"] += parsed.links_dropped
    return result


@cache
def corpus_comparison(index: int) -> Comparison:
    """The comparison of corpus page ``index`` (cached: two tests read it)."""
    page = fixture()["pages"][index]
    return compare(corpus_body(page), page["url"], page["charset"], page["hrefs"])


# ---------------------------------------------------------------------------- tests


def _corpus_id(page: dict) -> str:
    return Path(page["file"]).name.split(".html")[0][:48]


def _corpus_pages() -> list:
    """One parameter per corpus page; without the corpus, a single skipped placeholder
    (one line in the report saying how to get it, not one skip per page)."""
    if corpus_dir() is None:
        return [pytest.param(None, id="no-corpus", marks=pytest.mark.skip(reason=missing_reason()))]
    return [pytest.param(i, id=_corpus_id(p)) for i, p in enumerate(fixture()["pages"])]


def test_corpus_is_available() -> None:
    # Under CI a missing corpus fails here, once, rather than skipping every real-page check.
    if corpus_dir() is None:
        if in_ci():
            pytest.fail(f"CI=true but {missing_reason()}", pytrace=False)
        pytest.skip(missing_reason())
    root = corpus_dir()
    missing = [p["file"] for p in fixture()["pages"] if not (root / p["file"]).is_file()]
    assert not missing, f"{len(missing)} corpus pages missing under {root}, e.g. {missing[:3]}"


def test_fixture_covers_the_corpus() -> None:
    fx = fixture()
    assert fx["chromium"].startswith(("Chrome/", "HeadlessChrome/"))
    assert len(fx["pages"]) == fx["corpus_pages"] > 200
    assert all(set(p) == {"file", "url", "charset", "hrefs"} for p in fx["pages"])
    root = corpus_dir()
    if root is not None:
        manifest = [json.loads(line) for line in (root / "manifest.jsonl").read_text().splitlines() if line.strip()]
        assert [(m["file"], m["url"]) for m in manifest] == [(p["file"], p["url"]) for p in fx["pages"]]


@pytest.mark.parametrize("index", _corpus_pages())
def test_corpus_page_links_match_the_browser(index: int) -> None:
    result = corpus_comparison(index)
    assert not result.failures, "\n".join(result.failures[:20])


@pytest.mark.parametrize("page", fixture()["synthetic"], ids=lambda p: p["name"])
def test_synthetic_page_links_match_the_browser(page: dict) -> None:
    result = compare(page["body"].encode("latin-1"), page["url"], page["charset"], page["hrefs"])
    assert not result.failures, "\n".join(result.failures[:20])


def test_deliberate_classes_are_the_documented_ones() -> None:
    # The synthetic pages exercise every class at least once; a class appearing or
    # vanishing means docs/browser-agreement.md needs updating.
    seen: Counter = Counter()
    for page in fixture()["synthetic"]:
        seen += compare(page["body"].encode("latin-1"), page["url"], page["charset"], page["hrefs"]).classes
    assert set(seen) == {
        "non-http", "authority-as-written", "chrome-path-escapes", "undeclared-charset",
        "late-meta-beyond-window", "degraded",
    }


def test_corpus_agreement_rate(capsys: pytest.CaptureFixture[str]) -> None:
    require_corpus()
    total = Comparison()
    for index in range(len(fixture()["pages"])):
        r = corpus_comparison(index)
        total.links += r.links
        total.http_links += r.http_links
        total.exact += r.exact
        total.http_exact += r.http_exact
        total.classes += r.classes
        total.failures += r.failures
    with capsys.disabled():
        print(
            f"\ncorpus: {len(fixture()['pages'])} pages, {total.links} links; exact agreement "
            f"{total.exact / total.links:.4%} of all, {total.http_exact}/{total.http_links} = "
            f"{total.http_exact / total.http_links:.4%} of http(s); deliberate: {dict(total.classes)}"
        )
    assert not total.failures
    assert total.http_exact / total.http_links > 0.999  # nearly all agree without any class
    assert total.http_links > 40_000


def test_max_links_keeps_the_first_links_in_document_order() -> None:
    page = max(fixture()["synthetic"], key=lambda p: len(p["hrefs"]))
    result = compare(page["body"].encode("latin-1"), page["url"], page["charset"], page["hrefs"], max_links=10)
    assert not result.failures
    assert result.classes["max-links-cap"] == len(page["hrefs"]) - 10


# ------------------------------------------------------------------- crawl links CLI

_CLI_KEYS = {"url", "raw", "resolved", "nofollow", "followed", "reason"}


def _cli_lines(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict]:
    assert crawl_main(["links", *argv]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_crawl_links_prints_one_json_object_per_link(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    root = require_corpus()
    page = next(p for p in fixture()["pages"] if p["file"].endswith(".html") and 20 <= len(p["hrefs"]) <= 200)
    path = root / page["file"]
    lines = _cli_lines(capsys, str(path), "--url", page["url"])
    assert len(lines) == len(page["hrefs"])
    assert all(set(line) == _CLI_KEYS for line in lines)
    for line, theirs in zip(lines, page["hrefs"]):
        assert line["resolved"] == theirs or authority_as_written(line["resolved"], theirs) or not _is_http(theirs)
        assert line["followed"] == (line["reason"] is None)
        if _is_http(line["resolved"]):
            assert line["url"] == normalize(line["resolved"])
    # The same page gzipped (as crawled bodies are often stored) gives the same output.
    gz = tmp_path / "page.html.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    assert _cli_lines(capsys, str(gz), "--url", page["url"]) == lines


def test_crawl_links_reads_a_gzipped_corpus_page(capsys: pytest.CaptureFixture[str]) -> None:
    root = require_corpus()
    page = next(p for p in fixture()["pages"] if p["file"].endswith(".gz") and p["hrefs"])
    lines = _cli_lines(capsys, str(root / page["file"]), "--url", page["url"])
    assert [line["raw"] for line in lines] == [link.raw for link in parse_page(corpus_body(page), page["url"], "text/html").links]
    assert len(lines) == len(page["hrefs"])
