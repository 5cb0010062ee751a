"""CPU cost per page of each pipeline stage, each stage run alone on the same pages.

No network, no event loop, one process: every stage is timed over the same sample of
bench pages (``--pages``, default 10,000, rendered in memory from the same synthetic
web the static export holds, so no 4 GB export is needed) with ``time.process_time``,
best of ``--repeat`` runs; CPU time, not wall time, so the figures hold on a shared
machine. The result says where the crawler's CPU per page goes, against a budget per
stage (µs/page), and what the bare loop's extraction costs on the same pages.

Pipeline stages (what ``crawler.engine.pipeline.PagePipeline.page`` does per HTML page):

* ``sha256``        crawler.content.fingerprints.content_sha256 of the body
* ``parse``         crawler.parse.parse_page, all of it; its parts, each alone:
  * ``parse.tree``    LexborHTMLParser(body) (lexbor builds the tree)
  * ``parse.head``    the head pass (base, title, robots meta, feeds: one tag walk each)
  * ``parse.links``   the link elements (a tag walk; css("a[href], area[href]") on pages
                      with <area>) + attributes + Link objects, no join
  * ``parse.join``    crawler.urls.join_url of the page's distinct hrefs
  * ``parse.text``    strip_tags + the body text (text nodes stripped) + collapse_ws
  * ``parse.main``    crawler.content.maincontent.main_text on the stripped tree, given
                      the body text parse.text took (as parse_page does)
* ``fingerprint``   crawler.content.fingerprints.text_fingerprint of the main text (SimHash)
* ``follow``        LinkPolicy.follow (normalize, scope, traps, on-page duplicates)
* ``urlitems``      building the UrlItems of the followed links
* ``seen``          url_hash64 + SeenSet.check_and_add_hashes (exact, in memory, the
                    default Bloom backend; ``seen.pybloom`` / ``seen.rbloom`` each backend)

``pipeline`` is the sum of the pipeline stages (``parse``, not its parts, counted).
Reference: ``bare_extract`` (what benchmarks/bare_loop.py does per page: lexbor +
``urljoin``). Alternatives measured with ``--alternatives``: body compression codecs.

    python -m benchmarks.stages --pages 10000 --repeat 3 --callgrind 60 --json benchmarks/results/stages_after.json

Memory: the ``parse.head/links/text/main`` parts time a prepared tree per page, and all
10k lexbor trees are alive at once (peak RSS ~13 GB at 10k pages; two such runs at once
were OOM-killed on the 23 GB project machine): run one at a time, or fewer ``--pages``.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import os
import pickle
import sys
import tempfile
import time
import zlib
from collections import Counter
from collections.abc import Callable
from typing import Any

from benchmarks import common
from benchmarks.instructions import CallgrindRun, region, under_callgrind
from benchmarks.staticweb import DEFAULT_HOSTS, DEFAULT_PORT, _rewrite

#: CPU budget per stage in µs/page: together 2x the bare loop's CPU per page (fetch +
#: extract), the issue-20 target. ``bare_loop`` figures: benchmarks/results (CPU-ms/page).
BUDGET_US: dict[str, float] = {
    "sha256": 20,
    "parse": 420,
    "fingerprint": 120,
    "follow": 120,
    "urlitems": 30,
    "seen": 40,
}
PIPELINE_STAGES = ("sha256", "parse", "fingerprint", "follow", "urlitems", "seen")


def render_pages(n: int, hosts: int = DEFAULT_HOSTS, port: int = DEFAULT_PORT, seed: int = 0) -> list[tuple[str, bytes]]:
    """(url, body) of up to n bench pages: every host's root, then every host's /p/1, ...

    The same bytes ``benchmarks.staticweb`` exports (same seed, hosts, port), rendered in
    memory.
    """
    from crawler.testing.web import SyntheticWeb

    web = SyntheticWeb(seed=seed, profile="bench", hosts=hosts)
    web.bind(port)
    out: list[tuple[str, bytes]] = []
    k = 0
    while len(out) < n and k < 64:
        for i in range(hosts):
            if k >= web.graph.layout(i).pages:
                continue
            path = "/" if k == 0 else f"/p/{k}"
            body = web.body(web.normal_host(i), path)
            if body is None:
                continue
            out.append((f"http://h{i:04d}.bench.test:{port}{path}", _rewrite(body)))
            if len(out) >= n:
                break
        k += 1
    return out


def cpu_best(name: str, fn: Callable[[], Any], repeat: int, setup: Callable[[], Any] | None = None) -> float:
    """Least CPU seconds of ``repeat`` runs of ``fn`` (``setup`` runs untimed before each);
    under callgrind, the instructions of the last run are counted as region ``name``."""
    best = float("inf")
    for _ in range(repeat):
        if setup is not None:
            setup()
        # As timeit does: no cyclic GC inside the timed run. The sample's 10k parsed pages
        # make every full collection walk ~1M objects, a cost of the sample's size that
        # would land on whichever stage happens to trigger it.
        gc.collect()
        gc.disable()
        with region(name):
            t0 = time.process_time()
            fn()
            best = min(best, time.process_time() - t0)
        gc.enable()
    return best


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="per-stage CPU cost per page")
    p.add_argument("--pages", type=int, default=10_000)
    p.add_argument("--hosts", type=int, default=DEFAULT_HOSTS)
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.add_argument("--repeat", type=int, default=5, help="best of N (the machine may be shared)")
    p.add_argument("--only", default=None, help="comma-separated stage names to run (default all)")
    p.add_argument("--alternatives", action="store_true", help="also time compression codecs")
    p.add_argument("--label", default="", help="what code this run measured (stored in the result)")
    p.add_argument("--callgrind", type=int, default=0, metavar="PAGES",
                   help="also count each stage's instructions under valgrind on the first PAGES pages")
    p.add_argument("--pages-file", default=None, help=argparse.SUPPRESS)  # the callgrind child's pages
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    if under_callgrind():
        a.repeat, a.callgrind = 1, 0
    from selectolax.lexbor import LexborHTMLParser

    from benchmarks.bare_loop import extract
    from crawler.config.settings import from_dict
    from crawler.content.fingerprints import content_sha256, text_fingerprint
    from crawler.frontier.frontier import UrlItem
    from crawler.content.maincontent import main_text
    from crawler.parse import html as parse_html
    from crawler.parse import parse_page
    from crawler.seen import DEFAULT_BLOOM, SeenSet, url_hash64
    from crawler.engine.partbuilders import build_link_policy
    from crawler.urls import join_url

    t0 = time.monotonic()
    if a.pages_file:
        with open(a.pages_file, "rb") as f:
            pages = pickle.load(f)
    else:
        pages = render_pages(a.pages, a.hosts, a.port)
    n = len(pages)
    print(f"[stages] {n} pages rendered in {time.monotonic() - t0:.1f} s", file=sys.stderr, flush=True)
    only = set(a.only.split(",")) if a.only else None
    cg_run: CallgrindRun | None = None
    cg_pages, cg_file = 0, ""
    if a.callgrind:
        # Instructions are counted on an even spread of the sample (its first pages are
        # all host roots), in a valgrind child running while this process times CPU.
        sample = pages[:: max(1, n // a.callgrind)][: a.callgrind]
        cg_pages = len(sample)
        with tempfile.NamedTemporaryFile(suffix=".pickle", delete=False) as f:
            pickle.dump(sample, f)
        cg_file = f.name
        child = ["benchmarks.stages", "--pages-file", cg_file] + (["--only", a.only] if a.only else [])
        print(f"[stages] counting instructions under callgrind on {cg_pages} pages", file=sys.stderr, flush=True)
        cg_run = CallgrindRun(child)
    cfg = from_dict({"seeds": [pages[0][0]], "scope": "any"})
    policy = build_link_policy(cfg, [pages[0][0]])
    min_tokens = cfg.dedup.min_text_tokens
    ct = "text/html; charset=utf-8"
    hdrs = {"content-type": ct}
    bodies = [b for _, b in pages]

    # Timed stages keep no results: the pipeline handles one page at a time, and holding
    # 10k pages' results would add the cost of growing the heap (page faults) to the stage.
    def parse_each() -> None:
        for u, b in pages:
            parse_page(b, u, ct, hdrs, user_agent_token="raycrawl")

    parsed = [parse_page(b, u, ct, hdrs, user_agent_token="raycrawl") for u, b in pages]
    text_fingerprint("warm up the tokenizer table", 1)  # built once per process, not per page
    followed = [policy.follow(pp, 2, Counter()) for pp in parsed]
    results: dict[str, float] = {}

    def stage(name: str, fn: Callable[[], Any], setup: Callable[[], Any] | None = None) -> None:
        if only is not None and name not in only and name.split(".")[0] not in only:
            return
        results[name] = round(1e6 * cpu_best(name, fn, a.repeat, setup) / n, 1)
        budget = BUDGET_US.get(name)
        note = f"  (budget {budget:g})" if budget is not None else ""
        print(f"[stages] {name:16s} {results[name]:9.1f} us/page{note}", file=sys.stderr, flush=True)

    def each(fn: Callable[[Any], Any], items: list[Any]) -> Callable[[], None]:
        def run() -> None:
            for x in items:
                fn(x)

        return run

    stage("sha256", each(content_sha256, bodies))
    stage("parse", parse_each)

    trees: list[Any] = []

    def fresh_trees() -> None:
        trees[:] = [LexborHTMLParser(b) for b in bodies]

    stage("parse.tree", each(LexborHTMLParser, bodies))
    fresh_trees()
    def head_only() -> None:
        # Reading ``attributes`` builds each node's attribute dict: that work is what is timed.
        for t in trees:
            for nd in t.tags("base"):
                _ = nd.attributes
            for nd in t.tags("title")[:1]:
                nd.text()
            for nd in t.tags("meta"):
                _ = nd.attributes
            for nd in t.tags("link"):
                _ = nd.attributes

    stage("parse.head", head_only)

    def links_only() -> None:
        for t in trees:
            for attrs, tag in parse_html._link_elements(t, 5000)[0]:
                raw = attrs.get("href")
                rel = attrs.get("rel")
                if rel:
                    rel.lower().split()
                tuple.__new__(parse_html.Link, (raw or "", raw, False, tag))

    stage("parse.links", links_only)
    hrefs = [(pp.base_url, list(dict.fromkeys(lk.raw for lk in pp.links))) for pp in parsed]
    def join_each() -> None:
        for base, hs in hrefs:
            for h in hs:
                join_url(base, h, "utf-8")

    stage("parse.join", join_each)

    def text_only() -> None:
        for t in trees:
            t.strip_tags(parse_html._STRIP_FOR_TEXT)
            parse_html.collapse_ws(t.body.text(separator=" ", strip=True, skip_empty=True))

    stage("parse.text", text_only, setup=fresh_trees)
    texts = [pp.text for pp in parsed]
    node_texts: list[str] = []

    def stripped_trees() -> None:
        fresh_trees()
        for t in trees:
            t.strip_tags(parse_html._STRIP_FOR_TEXT)
        node_texts[:] = [t.body.text(separator=" ", strip=True, skip_empty=True) for t in trees]

    def main_each() -> None:
        for t, x, nx in zip(trees, texts, node_texts):
            main_text(t, x, nx)

    stage("parse.main", main_each, setup=stripped_trees)
    trees.clear()
    mains = [pp.main_text for pp in parsed]
    stage("fingerprint", each(lambda t: text_fingerprint(t, min_tokens), mains))
    stage("follow", each(lambda pp: policy.follow(pp, 2, Counter()), parsed))
    stage("urlitems", each(lambda pf: [UrlItem(u, 2, pf[0]) for u in pf[1]], [(pu, f) for (pu, _), f in zip(pages, followed)]))

    def seen_run(backend: str) -> Callable[[], Any]:
        sets: list[SeenSet] = []

        def setup() -> None:
            sets[:] = [SeenSet(2_000_000, 0.01, bloom=backend)]

        def run() -> None:
            s = sets[0]
            for f in followed:
                s.check_and_add_hashes([url_hash64(u) for u in f])

        return setup, run  # type: ignore[return-value]

    for name, backend in (("seen", DEFAULT_BLOOM), ("seen.pybloom", "pybloom"), ("seen.rbloom", "rbloom")):
        setup, run = seen_run(backend)  # type: ignore[misc]
        stage(name, run, setup=setup)
    stage("bare_extract", each(lambda ub: extract(ub[1], ub[0]), pages))
    sizes: dict[str, float] = {"body": sum(map(len, bodies)) / n}
    if a.alternatives:
        import pyarrow as pa

        zstd1, zstd3, lz4 = pa.Codec("zstd", compression_level=1), pa.Codec("zstd", compression_level=3), pa.Codec("lz4")
        codecs: dict[str, Callable[[bytes], bytes]] = {
            "gzip5": lambda b: gzip.compress(b, compresslevel=5, mtime=0),
            "gzip1": lambda b: gzip.compress(b, compresslevel=1, mtime=0),
            "zlib1": lambda b: zlib.compress(b, 1),
            "zstd1": lambda b: zstd1.compress(b, asbytes=True),
            "zstd3": lambda b: zstd3.compress(b, asbytes=True),
            "lz4": lambda b: lz4.compress(b, asbytes=True),
        }
        for name, fn in codecs.items():
            stage(name, each(fn, bodies))
            sizes[name] = sum(len(fn(b)) for b in bodies) / n
    pipeline = round(sum(results[s] for s in PIPELINE_STAGES if s in results), 1)
    instr: dict[str, float] = {}
    if cg_run is not None:
        instr = {k: round(v / cg_pages) for k, v in cg_run.counts().items()}
        os.unlink(cg_file)
        for k, v in instr.items():
            print(f"[stages] {k:16s} {v / 1000:9.1f} k instructions/page", file=sys.stderr)
    out = {
        "benchmark": "stages",
        "label": a.label,
        "pages": n,
        "repeat": a.repeat,
        "links_per_page": round(sum(len(pp.links) for pp in parsed) / n, 1),
        "distinct_hrefs_per_page": round(sum(len(hs) for _, hs in hrefs) / n, 1),
        "followed_per_page": round(sum(map(len, followed)) / n, 1),
        "default_bloom": DEFAULT_BLOOM,
        "us_per_page": results,
        "budget_us_per_page": BUDGET_US,
        "pipeline_us_per_page": pipeline,
        "pipeline_over_bare_extract": round(pipeline / results["bare_extract"], 2) if results.get("bare_extract") else None,
        "callgrind_pages": cg_pages,
        "instructions_per_page": instr,
        "pipeline_instructions_per_page": sum(instr[s] for s in PIPELINE_STAGES if s in instr) if instr else None,
        "mean_bytes": {k: round(v) for k, v in sizes.items()},
        "machine": common.machine_info(),
    }
    common.write_json(a.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
