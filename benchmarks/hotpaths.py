"""CPU cost of the per-page and per-link hot paths on the real-page corpus, before and after a change.

* ``parse_page``: crawler.parse.parse_page of every corpus page (``text/html``), ms/page;
* ``join_url``: crawler.urls.join_url of every href those pages contain, against the
  page's base and in its encoding, us/link;
* ``normalize``: UrlNormalizer.__call__ of every resolved http(s) link, us/URL.

Each is the best of ``--repeat`` passes of ``time.process_time`` (the machine may be
shared). With ``--against DIR`` (another checkout, e.g. ``git worktree add /tmp/base main``)
both trees' code is loaded side by side in this process and timed in alternating rounds,
so a before/after comparison does not depend on which process got the quieter moment::

    python -m benchmarks.hotpaths [--corpus DIR] [--against DIR] [--repeat 9] [--json FILE]

The corpus is ``$CRAWLER_CORPUS``, else ``../shared/corpus`` beside the checkout.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def load_tree(tree: Path) -> tuple[Callable[..., Any], Callable[[str], Any], Callable[..., Any]]:
    """(join_url, a default UrlNormalizer, parse_page) imported from the checkout ``tree``."""
    for name in [m for m in sys.modules if m == "crawler" or m.startswith("crawler.")]:
        del sys.modules[name]  # the functions keep their own module globals
    sys.path.insert(0, str(tree))
    try:
        from crawler.parse import parse_page
        from crawler.urls import UrlNormalizer, join_url
    finally:
        sys.path.remove(str(tree))
    return join_url, UrlNormalizer(), parse_page


def load_corpus(corpus: Path) -> list[tuple[str, bytes]]:
    """(url, body) of every page in the corpus manifest."""
    pages = []
    for line in (corpus / "manifest.jsonl").read_text().splitlines():
        if line.strip():
            entry = json.loads(line)
            data = (corpus / entry["file"]).read_bytes()
            pages.append((entry["url"], gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data))
    return pages


def _commit(tree: Path) -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tree, capture_output=True, text=True)
    except OSError:
        return None
    return out.stdout.strip() or None


def _cpu(fn: Callable[[], Any]) -> float:
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def main(argv: list[str] | None = None) -> int:
    default_corpus = Path(os.environ.get("CRAWLER_CORPUS") or ROOT.parent / "shared" / "corpus")
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", type=Path, default=default_corpus, help="folder with manifest.jsonl")
    p.add_argument("--against", type=Path, help="another checkout to compare with (the 'before')")
    p.add_argument("--repeat", type=int, default=9, help="rounds; best of N per tree")
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    if not (a.corpus / "manifest.jsonl").is_file():
        print(f"error: no manifest.jsonl in {a.corpus}; set CRAWLER_CORPUS or --corpus", file=sys.stderr)
        return 2
    trees = {"after": ROOT} if a.against is None else {"before": a.against.resolve(), "after": ROOT}
    funcs = {name: load_tree(tree) for name, tree in trees.items()}
    pages = load_corpus(a.corpus)
    join, _, parse = funcs["after"]
    triples = []  # (base, href, encoding) as parse_page joins them
    for url, body in pages:
        page = parse(body, url, "text/html")
        enc = "utf-8" if page.charset in ("utf-16-le", "utf-16-be", "replacement") else page.charset
        triples += [(page.base_url, link.raw, enc) for link in page.links]
    resolved = [r for r in (join(b, h, e) for b, h, e in triples) if r and r.startswith(("http:", "https:"))]

    best: dict[str, dict[str, float]] = {name: {} for name in trees}
    for rnd in range(a.repeat):
        order = list(trees) if rnd % 2 == 0 else list(reversed(trees))
        for name in order:
            join, norm, parse = funcs[name]
            times = {
                "parse_page_ms_per_page": 1e3 * _cpu(lambda: [parse(b, u, "text/html") for u, b in pages]) / len(pages),  # noqa: B023 - called within the iteration
                "join_url_us_per_link": 1e6 * _cpu(lambda: [join(b, h, e) for b, h, e in triples]) / len(triples),  # noqa: B023 - called within the iteration
                "normalize_us_per_url": 1e6 * _cpu(lambda: [norm(u) for u in resolved]) / len(resolved),  # noqa: B023 - called within the iteration
            }
            for key, value in times.items():
                best[name][key] = round(min(best[name].get(key, value), value), 4)
    for name, values in best.items():
        print(f"[hotpaths] {name:6s} " + "  ".join(f"{k} {v}" for k, v in values.items()), file=sys.stderr)
    out = {
        "benchmark": "hotpaths",
        "pages": len(pages),
        "links": len(triples),
        "normalized_urls": len(resolved),
        "repeat": a.repeat,
        "best": best,
        "commits": {name: _commit(tree) for name, tree in trees.items()},
        # Not benchmarks.common.machine_info: that needs psutil, this needs nothing extra.
        "machine": {"nproc": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2),
                    "python": platform.python_version(), "platform": platform.platform()},
    }
    print(json.dumps(out))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
