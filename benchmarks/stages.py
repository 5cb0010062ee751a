"""CPU cost per page of each pipeline stage, on real bench pages, in one process.

No network, no event loop: each stage is timed over the same sample of pages from the
static bench web (``time.process_time``), so the numbers say where the crawler's
CPU per page goes and what the alternatives would cost. Stages:

* ``parse``            crawler.parse.parse_page (lexbor parse, head, links + join_url, text)
*   ``lexbor_only``    just LexborHTMLParser(body) + css("a[href], area[href]") (the floor)
*   ``text_extract``   the body text part of parse_page alone (tree already built)
*   ``join_url``       crawler.urls.join_url of every href (inside ``parse``)
* ``follow``           LinkPolicy.follow (normalize, scope, traps) of the page's links
* ``urlitems``         building the UrlItems of the followed links
* ``simhash``          crawler.dedup.text_fingerprint of the page text
* ``sha256``           crawler.dedup.content_sha256
* ``seen_hash``        url_hash64 of the followed links
* ``gzip5`` / ``gzip1`` / ``zlib1``  body compression at level 5 and at the BlobStore's level (1)
* ``zstd1`` / ``zstd3`` (pyarrow.compress, already a dependency), ``lz4``
* ``bare_extract``     what the bare loop does per page (lexbor + urljoin, for scale)

    python -m benchmarks.stages --pages 2000
"""

from __future__ import annotations

import argparse
import gzip
import os
import sys
import time
import zlib
from collections import Counter
from collections.abc import Callable
from typing import Any

from benchmarks import common
from benchmarks.staticweb import DEFAULT_HOSTS, DEFAULT_PORT, default_dir, generate


def load_pages(web_dir: str, n: int) -> list[tuple[str, bytes]]:
    """(url, body) of up to n pages spread over the hosts of an exported web."""
    import json

    with open(os.path.join(web_dir, "manifest.json")) as f:
        port = json.load(f)["port"]
    hosts = sorted(d for d in os.listdir(web_dir) if d.startswith("h"))
    out: list[tuple[str, bytes]] = []
    k = 0
    while len(out) < n and k < 64:
        for h in hosts:
            path = os.path.join(web_dir, h, "index.html" if k == 0 else f"p/{k}")
            if os.path.exists(path):
                url = f"http://{h}.bench.test:{port}/" + ("" if k == 0 else f"p/{k}")
                with open(path, "rb") as f:
                    out.append((url, f.read()))
                if len(out) >= n:
                    break
        k += 1
    return out


def timeit(fn: Callable[[], Any], repeat: int = 1) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="per-stage CPU cost per page")
    p.add_argument("--pages", type=int, default=2000)
    p.add_argument("--hosts", type=int, default=DEFAULT_HOSTS)
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.add_argument("--repeat", type=int, default=3, help="best of N (the machine may be shared)")
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    import pyarrow as pa
    from selectolax.lexbor import LexborHTMLParser

    from benchmarks.bare_loop import extract
    from crawler.config import from_dict
    from crawler.dedup import content_sha256, text_fingerprint
    from crawler.shard import build_link_policy
    from crawler.frontier import UrlItem
    from crawler.parse import parse_page
    from crawler.seen import url_hash64

    web = generate(default_dir(a.hosts, a.port), hosts=a.hosts, port=a.port)
    pages = load_pages(web["dir"], a.pages)
    n = len(pages)
    cfg = from_dict({"seeds": [pages[0][0]], "scope": "any"})
    policy = build_link_policy(cfg, [pages[0][0]])
    ct = "text/html; charset=utf-8"
    parsed = [parse_page(b, u, ct, {"content-type": ct}, user_agent_token="raycrawl") for u, b in pages]
    followed = [policy.follow(pp, 2, Counter()) for pp in parsed]
    results: dict[str, float] = {}

    def stage(name: str, fn: Callable[[], Any]) -> None:
        results[name] = round(1000 * timeit(fn, a.repeat) / n, 4)
        print(f"[stages] {name:14s} {results[name]:8.4f} ms/page", file=sys.stderr, flush=True)

    stage("parse", lambda: [parse_page(b, u, ct, {"content-type": ct}, user_agent_token="raycrawl") for u, b in pages])

    def lexbor_only() -> None:
        for _, b in pages:
            t = LexborHTMLParser(b)
            for node in t.css("a[href], area[href]"):
                node.attributes.get("href")

    stage("lexbor_only", lexbor_only)

    def text_extract() -> None:
        for t in trees:
            t.strip_tags(["script", "style", "noscript", "template", "svg"])
            " ".join(t.body.text(separator=" ").split())

    trees: list[Any] = []

    def fresh_trees() -> None:
        trees[:] = [LexborHTMLParser(b) for _, b in pages]

    best = float("inf")
    for _ in range(a.repeat):  # parse outside the timed part (strip_tags mutates the tree)
        fresh_trees()
        best = min(best, timeit(text_extract))
    results["text_extract"] = round(1000 * best / n, 4)
    print(f"[stages] {'text_extract':14s} {results['text_extract']:8.4f} ms/page", file=sys.stderr)
    from crawler.urls import join_url

    hrefs = [(pp.base_url, [lk.raw for lk in pp.links]) for pp in parsed]
    stage("join_url", lambda: [[join_url(b, h) for h in hs] for b, hs in hrefs])
    stage("follow", lambda: [policy.follow(pp, 2, Counter()) for pp in parsed])
    stage("urlitems", lambda: [[UrlItem(u, 2, pu) for u in f] for (pu, _), f in zip(pages, followed)])
    texts = [pp.text for pp in parsed]
    stage("simhash", lambda: [text_fingerprint(t, 20) for t in texts])
    bodies = [b for _, b in pages]
    stage("sha256", lambda: [content_sha256(b) for b in bodies])
    stage("seen_hash", lambda: [[url_hash64(u) for u in f] for f in followed])
    stage("gzip5", lambda: [gzip.compress(b, compresslevel=5, mtime=0) for b in bodies])
    stage("gzip1", lambda: [gzip.compress(b, compresslevel=1, mtime=0) for b in bodies])
    stage("zlib1", lambda: [zlib.compress(b, 1) for b in bodies])
    zstd1, zstd3, lz4 = pa.Codec("zstd", compression_level=1), pa.Codec("zstd", compression_level=3), pa.Codec("lz4")
    stage("zstd1", lambda: [zstd1.compress(b, asbytes=True) for b in bodies])
    stage("zstd3", lambda: [zstd3.compress(b, asbytes=True) for b in bodies])
    stage("lz4", lambda: [lz4.compress(b, asbytes=True) for b in bodies])
    stage("bare_extract", lambda: [extract(b, u) for u, b in pages])
    sizes = {
        "body": sum(map(len, bodies)) / n,
        "gzip5": sum(len(gzip.compress(b, compresslevel=5, mtime=0)) for b in bodies) / n,
        "gzip1": sum(len(gzip.compress(b, compresslevel=1, mtime=0)) for b in bodies) / n,
        "zstd1": sum(len(zstd1.compress(b, asbytes=True)) for b in bodies) / n,
        "zstd3": sum(len(zstd3.compress(b, asbytes=True)) for b in bodies) / n,
        "lz4": sum(len(lz4.compress(b, asbytes=True)) for b in bodies) / n,
    }
    out = {
        "benchmark": "stages",
        "pages": n,
        "links_per_page": round(sum(len(pp.links) for pp in parsed) / n, 1),
        "followed_per_page": round(sum(map(len, followed)) / n, 1),
        "ms_per_page": results,
        "mean_bytes": {k: round(v) for k, v in sizes.items()},
        "machine": common.machine_info(),
    }
    common.write_json(a.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
