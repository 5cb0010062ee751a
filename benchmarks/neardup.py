"""Near-duplicate detection on chrome-only variants: whole-text vs main-content SimHash.

The crawler flags a page as a near-duplicate when its 64-bit SimHash is within Hamming
distance 3 of a stored one (``crawler.content.fingerprints``). Today the fingerprint is taken over all
the visible text, page chrome included, so copies of one article that differ only in a
footer render timestamp and request id, or in a rotating "related links" box, can land
more than 3 bits apart. This benchmark measures, for each text source:

* ``whole``        ``parse_page(...).text``: all visible text (what the crawler uses today)
* ``main``         ``crawler.content.maincontent.main_text`` on the same lexbor tree
* ``resiliparse``  ``extract_plain_text(html, main_content=True)`` (if installed)
* ``trafilatura``  ``trafilatura.extract(html, include_comments=False)`` (if installed)

on two page sets:

(a) synthetic: groups of copies of one ~10 KB article under realistic chrome (four page
    templates: HTML5 landmarks, div soup named by class/id, ARIA roles, a WordPress-like
    page whose body/wrapper classes mention header and sidebar); the copies of a group
    differ only in the footer's render timestamp and request id (kind ``footer``) or
    only in the links of a rotating "related" box (kind ``related``);
(b) the real corpus (``$CRAWLER_CORPUS`` or ``<repo>/../shared/corpus``, manifest.jsonl):
    copies of each saved page whose footer gets a render timestamp and request id (kind
    ``footer``) or whose navigation gets rotating "trending" links (kind ``nav``), the
    chrome found by tag/role first, then by a class/id containing footer/nav/menu.

and reports: near-duplicate recall on the copies (pairs within 3; copies flagged as the
crawler would on arrival), false positives among distinct pages (pairs within 3 that are
not the same page), the Hamming-distance histograms of copy pairs and distinct pairs,
pages left without a fingerprint, and CPU-ms per page (``time.process_time``, best of
``--repeat`` runs per page; the machine is shared, so CPU time rather than wall time).

    python -m benchmarks.neardup [--out benchmarks/results/neardup.json]
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from selectolax.lexbor import LexborHTMLParser

from crawler.content.fingerprints import hamming, text_fingerprint
from crawler.content.maincontent import extract_main
from crawler.parse import detect_charset, parse_page

ROOT = Path(__file__).resolve().parents[1]
K = 3  # the crawler's near-duplicate distance (crawler.content.fingerprints.SimHashIndex default)
_STRIP = ["script", "style", "noscript", "template", "svg"]  # as crawler/parse.py
_UTF8 = "text/html; charset=utf-8"

# ------------------------------------------------------------------- text sources


def _optional_extractors() -> dict[str, Callable[[str], str]]:
    out: dict[str, Callable[[str], str]] = {}
    try:
        from resiliparse.extract.html2text import extract_plain_text
    except ImportError:
        pass
    else:
        out["resiliparse"] = lambda html: extract_plain_text(html, main_content=True)
    try:
        import trafilatura
    except ImportError:
        pass
    else:
        out["trafilatura"] = lambda html: trafilatura.extract(html, include_comments=False) or ""
    return out


def texts(html: str, url: str, extra: dict[str, Callable[[str], str]]) -> dict[str, str]:
    """The text each source fingerprints, from one page's HTML."""
    data = html.encode("utf-8", "surrogatepass")
    whole = parse_page(data, url, _UTF8).text
    tree = LexborHTMLParser(data)
    tree.strip_tags(_STRIP)  # parse_page's tree is in this state when the pipeline calls main_text
    out = {"whole": whole, "main": extract_main(tree, whole).text}
    for name, fn in extra.items():
        out[name] = fn(html)
    return out


def fingerprints(pages: list[dict[str, str]]) -> dict[str, list[int | None]]:
    """Per source, the text_fingerprint of every page (None: too few words)."""
    return {src: [text_fingerprint(p[src]) for p in pages] for src in pages[0]}


# -------------------------------------------------------------- synthetic pages

_FUNCTION = (
    "the of and to in a is that for it as was with be by on not he this are or his from at "
    "which but have an they you were her she there been one all we their has would when if "
    "will more no out so up said what its about into than them can only other new some could "
    "time these two may then do first any my now such like our over man me even most made "
    "after also did many before must through back years where much your way well down should"
).split()


def _vocabulary(rng: random.Random, n: int = 6000) -> list[str]:
    onsets = "b c d f g h j k l m n p r s t v w z br cr dr fl gr pl st tr sh ch th".split()
    vowels = "a e i o u ai ea ie oo ou".split()
    codas = ["", "", "", "n", "r", "s", "t", "l", "m", "nd", "st", "ng", "ck"]
    words: set[str] = set()
    while len(words) < n:
        words.add("".join(rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas) for _ in range(rng.randint(1, 3))))
    return _FUNCTION + sorted(words)


class TextGen:
    """Zipf-distributed pseudo-English: function words first, then a 6000-word vocabulary."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.vocab = _vocabulary(random.Random(0xC0FFEE))
        weights = [1 / (rank + 1) ** 1.07 for rank in range(len(self.vocab))]
        self.cum = list(itertools.accumulate(weights))

    def words(self, n: int) -> list[str]:
        return self.rng.choices(self.vocab, cum_weights=self.cum, k=n)

    def sentence(self) -> str:
        w = self.words(self.rng.randint(7, 24))
        for i in range(2, len(w) - 2):
            if self.rng.random() < 0.06:
                w[i] += ","
        return " ".join(w).capitalize() + self.rng.choice(".....?!")

    def title(self, lo: int = 4, hi: int = 9) -> str:
        return " ".join(self.words(self.rng.randint(lo, hi))).title()

    def article(self, chars: int = 10_000) -> list[str]:
        """Paragraphs (some of them "## subheadings") totalling about ``chars`` characters."""
        paras: list[str] = []
        total = 0
        while total < chars:
            if paras and self.rng.random() < 0.12:
                p = "## " + self.title(3, 6)
            else:
                p = " ".join(self.sentence() for _ in range(self.rng.randint(3, 7)))
            paras.append(p)
            total += len(p)
        return paras


def _links(items: list[str], prefix: str) -> str:
    return "".join(f'<li><a href="/{prefix}/{i}">{t}</a></li>' for i, t in enumerate(items))


def _body_html(paras: list[str]) -> str:
    return "\n".join(f"<h2>{p[3:]}</h2>" if p.startswith("## ") else f"<p>{p}</p>" for p in paras)


class Site:
    """One site's chrome: navigation, footer links, a pool of related headlines."""

    def __init__(self, template: int, seed: int) -> None:
        gen = TextGen(seed)
        self.template = template
        self.name = gen.title(1, 2)
        self.nav = [gen.title(1, 2) for _ in range(30)]
        self.subnav = [gen.title(1, 3) for _ in range(40)]
        self.footer_links = [gen.title(1, 3) for _ in range(60)]
        self.pool = [gen.title(5, 10) for _ in range(40)]
        self.popular = [gen.title(5, 10) for _ in range(10)]
        self.about = " ".join(gen.sentence() for _ in range(3))
        self.cookies = " ".join(gen.sentence() for _ in range(4))

    def page(self, title: str, paras: list[str], related: list[str], stamp: str) -> str:
        """One page of this site; ``related`` and ``stamp`` are what varies between copies."""
        head = f"<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8><title>{title} | {self.name}</title>" \
               "<style>body{margin:0}</style><script>window.dataLayer=[];</script></head>\n"
        nav = _links(self.nav, "section")
        sub = _links(self.subnav, "topic")
        rel = _links(related, "story")
        pop = _links(self.popular, "popular")
        foot = _links(self.footer_links, "info")
        body = _body_html(paras)
        byline = f"By {self.name} staff. Published 2024-03-0{1 + len(title) % 9}."
        cookie = f'<div class="cookie-banner" role="dialog"><p>{self.cookies}</p><button>Accept all</button></div>'
        crumbs = f'<ol class="breadcrumb"><li><a href=/>{self.name}</a></li><li><a href=/s>{self.nav[3]}</a></li></ol>'
        copyright = f"&copy; 2024 {self.name}. All rights reserved. {self.about}"
        t = self.template
        if t == 0:  # HTML5 landmarks
            page = (f"<body><header><a href=/>{self.name}</a><nav><ul>{nav}</ul><ul>{sub}</ul></nav></header>\n"
                    f"<main>{crumbs}<article><header><h1>{title}</h1><p>{byline}</p></header>{body}</article>\n"
                    f"<aside><h3>Related</h3><ul>{rel}</ul><h3>Most popular</h3><ol>{pop}</ol></aside></main>\n"
                    f"<footer><ul>{foot}</ul><p>{copyright}</p><p>{stamp}</p></footer>{cookie}")
        elif t == 1:  # div soup named by id/class
            page = (f'<body><div id="site-header"><div class="logo">{self.name}</div>'
                    f'<div class="main-nav"><ul>{nav}</ul></div><div class="sub-menu"><ul>{sub}</ul></div></div>\n'
                    f'<div class="content-area">{crumbs}<h1 class="entry-title">{title}</h1><div class="byline">{byline}</div>'
                    f'<div class="entry-content">{body}</div>'
                    f'<div class="share-buttons"><a href=/s/fb>Share on Facebook</a> <a href=/s/x>Share on X</a></div></div>\n'
                    f'<div class="sidebar"><div class="related-posts"><h3>Related</h3><ul>{rel}</ul></div>'
                    f'<div class="popular"><ol>{pop}</ol></div></div>\n'
                    f'<div id="footer" class="site-footer"><ul>{foot}</ul><p>{copyright}</p>'
                    f'<p class="render-info">{stamp}</p></div>{cookie}')
        elif t == 2:  # ARIA roles on plain divs
            page = (f'<body><div role="banner"><span>{self.name}</span></div>'
                    f'<div role="navigation"><ul>{nav}</ul><ul>{sub}</ul></div>\n'
                    f'<div role="main">{crumbs}<h1>{title}</h1><p>{byline}</p>{body}</div>\n'
                    f'<div role="complementary"><h3>Related</h3><ul>{rel}</ul><ol>{pop}</ol></div>\n'
                    f'<div role="contentinfo"><ul>{foot}</ul><p>{copyright}</p><p>{stamp}</p></div>{cookie}')
        else:  # WordPress-like: chrome words on the body and on wrappers of the content
            page = (f'<body class="has-header has-sidebar single-post">'
                    f'<div class="page-with-sidebar"><div class="site-header"><nav class="primary-menu">'
                    f'<ul>{nav}</ul><ul class="sub-menu">{sub}</ul></nav></div>\n'
                    f'{crumbs}<article class="post-header-wrapper"><h1>{title}</h1><p>{byline}</p>{body}'
                    f'<section class="related-posts"><h3>Related</h3><ul>{rel}</ul></section></article>\n'
                    f'<aside class="widget-area"><ol>{pop}</ol></aside></div>\n'
                    f'<footer class="site-footer"><ul>{foot}</ul><p>{copyright}</p><p>{stamp}</p></footer>{cookie}')
        return head + page + "\n</body></html>\n"


def _stamp(rng: random.Random) -> str:
    """A footer line that changes on every request: render time, request id, trace id."""
    rid = "-".join(rng.randbytes(n).hex() for n in (4, 2, 2, 2, 6))
    return (f"Page rendered 2024-11-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:"
            f"{rng.randint(0, 59):02d}.{rng.randint(0, 999):03d}Z by web-{rng.randint(1, 40)} in "
            f"{rng.randint(20, 900)} ms. Request ID: {rid}. Trace {rng.randbytes(8).hex()}.")


def synthetic_groups(kind: str, groups: int, copies: int, seed: int) -> list[list[str]]:
    """``groups`` lists of ``copies`` HTML pages; a group is one article, copies differ in
    the footer stamp (``footer``) or the related links (``related``) only."""
    out: list[list[str]] = []
    sites = [Site(t, seed * 100 + t) for t in range(4)]
    for g in range(groups):
        gen = TextGen(seed * 10_000 + g + (0 if kind == "footer" else 5000))
        rng = random.Random(f"{seed}/{kind}/{g}")
        site = sites[g % 4]
        title, paras = gen.title(), gen.article()
        fixed_related = rng.sample(site.pool, 8)
        fixed_stamp = _stamp(rng)
        group = []
        for _ in range(copies):
            if kind == "footer":
                group.append(site.page(title, paras, fixed_related, _stamp(rng)))
            else:
                group.append(site.page(title, paras, rng.sample(site.pool, 8), fixed_stamp))
        out.append(group)
    return out


# ------------------------------------------------------------------ corpus pages

_TRENDING = [
    "Storm warning for the coast tonight", "Parliament passes the budget", "Five recipes for a quick dinner",
    "Transfer news: striker signs", "Stock markets close higher", "New rail timetable from Monday",
    "Heat record broken in the south", "Election polls tighten", "Museum reopens after renovation",
    "Power outage hits the city centre", "Vaccine campaign starts", "Festival line-up announced",
]


def corpus_dir(arg: str | None) -> Path | None:
    """The corpus folder: --corpus, $CRAWLER_CORPUS, or <repo>/../shared/corpus."""
    for cand in (arg, os.environ.get("CRAWLER_CORPUS"), str(ROOT.parent / "shared" / "corpus")):
        if cand and (Path(cand) / "manifest.jsonl").is_file():
            return Path(cand)
    return None


def load_corpus(folder: Path) -> list[tuple[str, str]]:
    """(url, decoded html) of every page in the manifest."""
    out = []
    for line in (folder / "manifest.jsonl").read_text().splitlines():
        entry = json.loads(line)
        data = (folder / entry["file"]).read_bytes()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        out.append((entry["url"], data.decode(detect_charset(data, None), "replace")))
    return out


_FINDERS = {
    "footer": ("footer, [role=contentinfo]", "[id*=footer i], [class*=footer i]"),
    "nav": ("nav, [role=navigation]", "[id*=nav i], [class*=nav i], [id*=menu i], [class*=menu i]"),
}


def chrome_copy(html: str, kind: str, rng: random.Random) -> tuple[str, str] | None:
    """``html`` with a per-request change in its footer or navigation, and how the chrome
    was found ("tag" or "name"); None when the page has no such chrome."""
    tree = LexborHTMLParser(html)
    body = tree.body
    if body is None:
        return None
    for how, selector in zip(("tag", "name"), _FINDERS[kind]):  # noqa: B007 - read after the loop (the break keeps it)
        target = body.css_first(selector)
        if target is not None:
            break
    else:
        return None
    if kind == "footer":
        target.insert_child(" " + _stamp(rng) + " ")
    else:
        target.insert_child(" Trending: " + " | ".join(rng.sample(_TRENDING, 3)) + " ")
    return tree.html or "", how


# ---------------------------------------------------------------------- scoring


def _hist(distances: list[int]) -> dict[str, int]:
    return {str(d): n for d, n in sorted(Counter(distances).items())}


def score_groups(fps: list[list[int | None]], labels: list[str] | None = None) -> dict[str, Any]:
    """Recall over groups of copies: pairs within K, and copies flagged on arrival (a copy
    is flagged when an earlier copy of its group is within K, as the index would say).
    ``labels`` name the groups for the list of groups with a copy left unflagged."""
    dists: list[int] = []
    unfingerprinted = flagged = later = 0
    missed: list[tuple[str, int | None]] = []
    for n, group in enumerate(fps):
        before = flagged
        unfingerprinted += sum(fp is None for fp in group)
        for a, b in itertools.combinations(group, 2):
            if a is not None and b is not None:
                dists.append(hamming(a, b))
        for i in range(1, len(group)):
            later += 1
            fp = group[i]
            if fp is not None and any(e is not None and hamming(fp, e) <= K for e in group[:i]):
                flagged += 1
        if flagged - before < len(group) - 1:
            spread = [hamming(a, b) for a, b in itertools.combinations(group, 2) if a is not None and b is not None]
            missed.append((labels[n] if labels else str(n), max(spread) if spread else None))
    pairs = sum(len(g) * (len(g) - 1) // 2 for g in fps)
    within = sum(d <= K for d in dists)
    return {
        "groups": len(fps),
        "pairs": pairs,
        "pairs_within_3": within,
        "pair_recall": round(within / pairs, 4) if pairs else None,
        "copies_after_first": later,
        "copies_flagged": flagged,
        "copy_recall": round(flagged / later, 4) if later else None,
        "pages_without_fingerprint": unfingerprinted,
        "max_distance": max(dists) if dists else None,
        "distance_histogram": _hist(dists),
        "groups_with_unflagged_copies": missed[:30],
    }


def score_distinct(fps: list[int | None], same: Callable[[int, int], bool] | None = None) -> dict[str, Any]:
    """False positives among distinct pages: pairs within K that are not the same page."""
    dists: list[int] = []
    fp_pairs = []
    for i, j in itertools.combinations(range(len(fps)), 2):
        a, b = fps[i], fps[j]
        if a is None or b is None or (same is not None and same(i, j)):
            continue
        d = hamming(a, b)
        dists.append(d)
        if d <= K:
            fp_pairs.append((i, j, d))
    return {
        "pages": len(fps),
        "pages_without_fingerprint": sum(fp is None for fp in fps),
        "pairs_compared": len(dists),
        "false_positives": len(fp_pairs),
        "false_positive_pairs": fp_pairs[:20],
        "min_distance": min(dists) if dists else None,
        "distance_histogram": _hist(dists),
    }


# ------------------------------------------------------------------------- cost


def _cpu_ms(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time_ns()
        fn()
        best = min(best, time.process_time_ns() - t0)
    return best / 1e6


def cost(pages: list[tuple[str, str]], extra: dict[str, Callable[[str], str]], repeat: int) -> dict[str, Any]:
    """CPU-ms per page of each step, best of ``repeat`` per page, summarized over pages."""
    per: dict[str, list[float]] = {k: [] for k in ("parse_page", "main_text", "main_text_standalone",
                                                    "fingerprint_whole", "fingerprint_main", *extra)}
    sizes: list[int] = []
    for url, html in pages:
        data = html.encode("utf-8", "surrogatepass")
        sizes.append(len(data))
        whole = parse_page(data, url, _UTF8).text
        per["parse_page"].append(_cpu_ms(lambda: parse_page(data, url, _UTF8), repeat))  # noqa: B023 - called within the iteration
        tree = LexborHTMLParser(data)
        tree.strip_tags(_STRIP)
        per["main_text"].append(_cpu_ms(lambda: extract_main(tree, whole), repeat))  # noqa: B023 - called within the iteration
        raw = LexborHTMLParser(data)
        per["main_text_standalone"].append(_cpu_ms(lambda: extract_main(raw), repeat))  # noqa: B023 - called within the iteration
        main = extract_main(tree, whole).text
        per["fingerprint_whole"].append(_cpu_ms(lambda: text_fingerprint(whole), repeat))  # noqa: B023 - called within the iteration
        per["fingerprint_main"].append(_cpu_ms(lambda: text_fingerprint(main), repeat))  # noqa: B023 - called within the iteration
        for name, fn in extra.items():
            per[name].append(_cpu_ms(lambda: fn(html), 1 if name == "trafilatura" else repeat))  # noqa: B023 - called within the iteration
    near25 = [i for i, s in enumerate(sizes) if 15_000 <= s <= 35_000]

    def summary(xs: list[float]) -> dict[str, float | None]:
        ordered = sorted(xs)
        return {
            "median": round(statistics.median(xs), 4),
            "mean": round(statistics.fmean(xs), 4),
            "p90": round(ordered[int(0.9 * (len(xs) - 1))], 4),
            "median_15_35kb": round(statistics.median([xs[i] for i in near25]), 4) if near25 else None,
        }

    return {
        "pages": len(pages),
        "median_page_kb": round(statistics.median(sizes) / 1024, 1),
        "pages_15_35kb": len(near25),
        "cpu_ms_per_page": {k: summary(v) for k, v in per.items()},
    }


# ----------------------------------------------------------------- agreement

_WORD = re.compile(r"\w+")


def agreement(pages: list[dict[str, str]], ref: str) -> dict[str, Any]:
    """How much of ``ref``'s words ``main`` keeps (recall) and how much of ``main`` is in
    ``ref`` (precision), per page as word multisets; pages where ``ref`` is empty apart."""
    rec, prec, empty = [], [], 0
    for p in pages:
        a, b = Counter(_WORD.findall(p["main"].lower())), Counter(_WORD.findall(p[ref].lower()))
        if not b:
            empty += 1
            continue
        inter = sum((a & b).values())
        rec.append(inter / sum(b.values()))
        prec.append(inter / max(1, sum(a.values())))
    return {
        "reference": ref,
        "pages": len(rec),
        "reference_empty": empty,
        "median_recall_of_reference": round(statistics.median(rec), 3) if rec else None,
        "median_precision_vs_reference": round(statistics.median(prec), 3) if prec else None,
        "pages_recall_below_0.5": sum(r < 0.5 for r in rec),
        "pages_precision_below_0.5": sum(p < 0.5 for p in prec),
    }


def _words(text: str) -> int:
    return len(_WORD.findall(text))


# -------------------------------------------------------------------------- run


def run(args: argparse.Namespace) -> dict[str, Any]:
    extra = {} if args.no_extractors else _optional_extractors()
    sources = ["whole", "main", *extra]
    result: dict[str, Any] = {"benchmark": "neardup", "distance": K, "sources": sources}

    # (a) synthetic chrome-variant groups
    syn: dict[str, Any] = {"groups_per_kind": args.groups, "copies": args.copies}
    all_groups: list[list[dict[str, str]]] = []
    for kind in ("footer", "related"):
        groups = synthetic_groups(kind, args.groups, args.copies, args.seed)
        tx = [[texts(html, f"https://site{g % 4}.example/a/{kind}/{g}", extra) for html in group]
              for g, group in enumerate(groups)]
        all_groups += tx
        syn[kind] = {src: score_groups([[text_fingerprint(p[src]) for p in group] for group in tx]) for src in sources}
        if kind == "footer":
            syn["page_kb"] = round(statistics.median(len(h.encode()) for g in groups for h in g) / 1024, 1)
            syn["words"] = {src: statistics.median(_words(p[src]) for g in tx for p in g) for src in sources}
            syn["cost"] = cost([(f"https://s.example/{i}", g[0]) for i, g in enumerate(groups)], extra, args.repeat)
    # Distinct pages: one copy of every group (each group is its own article; groups g and
    # g+4 share a site's chrome, the hard case for a whole-text fingerprint).
    firsts = [g[0] for g in all_groups]
    syn["distinct"] = {src: score_distinct([text_fingerprint(p[src]) for p in firsts]) for src in sources}
    result["synthetic"] = syn

    # (b) the real corpus
    folder = corpus_dir(args.corpus)
    if folder is None:
        result["corpus"] = {"skipped": "corpus not found (set CRAWLER_CORPUS to the folder with manifest.jsonl)"}
        return result
    pages = load_corpus(folder)
    if args.max_pages:
        pages = pages[: args.max_pages]
    corp: dict[str, Any] = {"pages": len(pages)}
    originals = [texts(html, url, extra) for url, html in pages]
    urls = [u for u, _ in pages]
    corp["distinct"] = {src: score_distinct([text_fingerprint(p[src]) for p in originals],
                                            lambda i, j: urls[i] == urls[j]) for src in sources}
    for _src, res in corp["distinct"].items():
        res["false_positive_pairs"] = [(urls[i], urls[j], d) for i, j, d in res["false_positive_pairs"]]
    corp["words_median"] = {src: statistics.median(_words(p[src]) for p in originals) for src in sources}
    roots = Counter()
    for _url, html in pages:
        tree = LexborHTMLParser(html.encode("utf-8", "surrogatepass"))
        tree.strip_tags(_STRIP)
        roots[extract_main(tree).root] += 1
    corp["main_roots"] = dict(roots)
    corp["agreement"] = [agreement(originals, ref) for ref in extra]
    rng = random.Random(args.seed)
    for kind in ("footer", "nav"):
        groups, found, labels = [], Counter(), []
        for url, html in pages:
            copies = []
            for _ in range(args.copies):
                made = chrome_copy(html, kind, rng)
                if made is None:
                    break
                copies.append(made[0])
            if len(copies) < args.copies:
                found["none"] += 1
                continue
            found[made[1]] += 1
            labels.append(url)
            groups.append([texts(c, url, extra) for c in copies])
        corp[kind] = {"chrome_found_by": dict(found)}
        for src in sources:
            corp[kind][src] = score_groups([[text_fingerprint(p[src]) for p in g] for g in groups], labels)
    corp["cost"] = cost(pages, extra, args.repeat)
    result["corpus"] = corp
    return result


def _machine() -> dict[str, Any]:
    import selectolax

    info: dict[str, Any] = {"nproc": os.cpu_count(), "python": platform.python_version(),
                            "selectolax": selectolax.__version__, "load_avg_1m": round(os.getloadavg()[0], 2)}
    for mod in ("resiliparse", "trafilatura"):
        try:
            from importlib.metadata import version

            info[mod] = version(mod)
        except Exception:  # noqa: BLE001 - not installed
            info[mod] = None
    try:
        info["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                        cwd=ROOT, check=False).stdout.strip()
    except OSError:
        pass
    return info


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "neardup.json"))
    ap.add_argument("--corpus", default=None, help="folder with manifest.jsonl (default: $CRAWLER_CORPUS, ../shared/corpus)")
    ap.add_argument("--groups", type=int, default=12, help="synthetic groups per kind (footer, related)")
    ap.add_argument("--copies", type=int, default=4, help="copies per group")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3, help="timing runs per page (best is kept)")
    ap.add_argument("--max-pages", type=int, default=0, help="only the first N corpus pages (0: all)")
    ap.add_argument("--no-extractors", action="store_true", help="skip resiliparse/trafilatura even if installed")
    args = ap.parse_args(argv)
    started = time.time()
    result = run(args)
    result["machine"] = _machine()
    result["seconds"] = round(time.time() - started, 1)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(_headline(result), indent=2))
    return 0


def _headline(result: dict[str, Any]) -> dict[str, Any]:
    """The numbers a reader wants first (the JSON file has the rest)."""
    out: dict[str, Any] = {}
    syn, corp = result["synthetic"], result.get("corpus", {})
    for src in result["sources"]:
        row: dict[str, Any] = {
            "syn_footer_copy_recall": syn["footer"][src]["copy_recall"],
            "syn_related_copy_recall": syn["related"][src]["copy_recall"],
            "syn_false_positives": syn["distinct"][src]["false_positives"],
        }
        if "distinct" in corp:
            row["corpus_footer_copy_recall"] = corp["footer"][src]["copy_recall"]
            row["corpus_nav_copy_recall"] = corp["nav"][src]["copy_recall"]
            row["corpus_false_positives"] = corp["distinct"][src]["false_positives"]
        out[src] = row
    if "cost" in corp:
        out["corpus_cpu_ms_median"] = {k: v["median"] for k, v in corp["cost"]["cpu_ms_per_page"].items()}
    out["synthetic_cpu_ms_median"] = {k: v["median"] for k, v in syn["cost"]["cpu_ms_per_page"].items()}
    return out


if __name__ == "__main__":
    sys.exit(main())
