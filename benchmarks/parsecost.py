"""Input-sized documents and the event loop (DESIGN invariant 16): what one hostile or
merely large document costs a shard, and how long its event loop stalls meanwhile.

Each case drives the shard's own entry point for that document kind with a fake fetch
that hands it the document (no sockets), in a fresh process, while a probe task on the
same loop wakes every millisecond and records the longest gap it saw:

* ``feed_1m``: a robots.txt-listed feed read by ``SitemapReader.read`` (the sitemap
  path: up to ``sitemaps.max_bytes_per_file`` = 50 MB are fetched), an RSS 2.0 feed of
  1,000,000 ``<item>``s (about 31 MB);
* ``feed_page``: the same feed fetched as a page (``PagePipeline.page``), cut by the
  fetcher at ``limits.max_body_bytes`` (10 MB, marked truncated);
* ``feed_broken``: a feed expat refuses (an unescaped ``&``) of 100 items of 100 KB of
  escaped HTML, 10 MB, fetched as a page: what the lenient reading (feedparser) costs;
* ``sitemap``: a ``<urlset>`` at both sitemaps.org limits (50,000 URLs, 52,428,800
  bytes: each ``<url>`` carries image entries);
* ``robots``: a 10 MB robots.txt (``RobotsClient.refresh``; the file is read to
  ``limits.max_body_bytes``), then 1,000 lookups of that host's URLs (what admission asks
  per link);
* ``html``: an article page of ``limits.max_body_bytes`` (10 MB of paragraphs and
  100k links, ``PagePipeline.page``: parse, main content, SimHash, links).

Reported per case: wall and CPU seconds (the whole process, the probe included: about
1,000 wake-ups a second), peak RSS growth over the process's RSS before the call (the
document itself excluded), and the loop's longest stall. ``--tree DIR`` imports the
crawler from another checkout (the "before": ``--tree /work/main``); ``--inline`` runs
the parse seam inline (the "after" code without its worker thread). The machine may be
loaded: a probe-only run (``idle``) gives the stall the loop sees with no work at all,
``thread_floor`` the stall it sees while a worker thread spins in pure Python (the GIL
and the CPU share: the least any thread offload can give), ``lexbor`` whether lexbor's
tree build releases the GIL, ``sizes`` the parse CPU by page size and the cost of one
hop to a thread. ``PARSECOST_GC_FREEZE=1`` freezes the start-up heap first (gc.freeze):
the stalls a worker thread still causes are mostly the cyclic GC's full collections.

    python -m benchmarks.parsecost [--tree DIR] [--inline] [--cases feed_1m,html] [--repeat 3] [--label L] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("PARSECOST_DIR", "/tmp/raycrawl-parsecost"))
CASES = ("idle", "thread_floor", "lexbor", "sizes", "feed_1m", "feed_page", "feed_broken", "sitemap", "robots", "html")
MAX_BODY = 10_000_000  # limits.max_body_bytes (configs/default.yaml)
SITEMAP_BYTES = 52_428_800  # sitemaps.max_bytes_per_file
SITEMAP_URLS = 50_000  # sitemaps.max_urls_per_file

# -- the documents (written once, deterministic) ------------------------------------------


def _feed(path: Path) -> None:
    with path.open("wb") as f:
        f.write(b'<?xml version="1.0"?><rss version="2.0"><channel><title>N</title><link>http://n.test/</link>\n')
        for start in range(0, 1_000_000, 10_000):
            f.write(b"".join(b"<item><link>/a/%d</link></item>\n" % i for i in range(start, start + 10_000)))
        f.write(b"</channel></rss>\n")


def _sitemap(path: Path) -> None:
    head = (b'<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
            b'xmlns:image="http://www.google.com/schemas/sitemap-image/1.1">\n')
    tail = b"</urlset>\n"
    per_url = (SITEMAP_BYTES - len(head) - len(tail)) // SITEMAP_URLS
    with path.open("wb") as f:
        f.write(head)
        for i in range(SITEMAP_URLS):
            url = b"<url><loc>http://s.test/p/%d</loc><lastmod>2024-05-01</lastmod>" % i
            j = 0
            while len(url) + 100 < per_url:
                url += b"<image:image><image:loc>http://s.test/img/%d/%d.jpg</image:loc></image:image>" % (i, j)
                j += 1
            f.write(url + b" " * (per_url - len(url) - 7) + b"</url>\n")
        f.write(b" " * (SITEMAP_BYTES - f.tell() - len(tail)) + tail)  # exactly at the byte limit


def _broken_feed(path: Path) -> None:
    # Escaped HTML in each description: what feedparser sanitizes, its slowest input per byte.
    html = b"&lt;p&gt;Some &lt;b&gt;bold&lt;/b&gt; text &lt;a href='/x'&gt;link&lt;/a&gt;&lt;/p&gt; "
    item = b"<item><link>/big/%d</link><description>" + html * (100_000 // len(html)) + b"</description></item>\n"
    with path.open("wb") as f:
        f.write(b"<rss><channel><title>Fish & Chips</title>\n")
        for i in range(100):
            f.write(item % i)
        f.write(b"</channel></rss>\n")


def _robots(path: Path) -> None:
    with path.open("wb") as f:
        f.write(b"User-agent: *\n")
        i = 0
        while f.tell() < MAX_BODY:
            f.write(b"".join(b"Disallow: /private/%d/\nAllow: /private/%d/public\n" % (k, k) for k in range(i, i + 1000)))
            i += 1000
    with path.open("r+b") as f:
        f.truncate(MAX_BODY)


def _html(path: Path) -> None:
    words = ("the crawler reads every page once and keeps what it found for the indexer while hosts "
             "are asked politely for their pages and robots files").split()
    nav = b"".join(b'<li><a href="/section/%d">Section %d</a></li>' % (i, i) for i in range(50))
    out = [b"<!DOCTYPE html><html><head><meta charset=utf-8><title>Articles</title></head><body>",
           b"<header><nav><ul>" + nav + b"</ul></nav></header><main>"]
    size, i = sum(map(len, out)), 0
    while size < MAX_BODY:
        text = " ".join(words[(i + k) % len(words)] for k in range(90)).encode()
        block = (b'<article><h2>Heading %d</h2><p>%s</p><p>%s <a href="/post/%d">more</a></p></article>\n'
                 % (i, text, text[:200], i))
        out.append(block)
        size += len(block)
        i += 1
    out.append(b"</main><footer>f</footer></body></html>")
    path.write_bytes(b"".join(out)[:MAX_BODY])


DOCS: dict[str, tuple[str, Callable[[Path], None]]] = {
    "feed": ("feed-1m.xml", _feed), "broken": ("feed-broken-10mb.xml", _broken_feed), "sitemap": ("sitemap-50mb.xml", _sitemap),
    "robots": ("robots-10mb.txt", _robots), "html": ("page-10mb.html", _html),
}


def document(kind: str) -> Path:
    name, build = DOCS[kind]
    path = CACHE / name
    if not path.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        build(tmp)
        tmp.replace(path)
    return path


# -- the child: one case, one process ---------------------------------------------------------


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def _probe(stop: asyncio.Event, out: dict[str, float]) -> None:
    """Wake every millisecond; the gaps beyond it are how long the loop could not run."""
    loop = asyncio.get_running_loop()
    last, gaps = loop.time(), []
    while not stop.is_set():
        await asyncio.sleep(0.001)
        now = loop.time()
        gaps.append(max(0.0, now - last - 0.001))
        last = now
    gaps.sort()
    out["stall_s"] = gaps[-1] if gaps else 0.0
    out["stall_p99_s"] = gaps[int(0.99 * (len(gaps) - 1))] if gaps else 0.0
    out["stalls_over_50ms"] = sum(1 for g in gaps if g > 0.05)


def _result(status: int, body: bytes, ctype: str, url: str, truncated: bool = False):
    from crawler.fetch.fetcher import FetchResult

    return FetchResult(url=url, status=status, headers={"content-type": ctype}, body=body, truncated=truncated,
                       error=None, error_kind=None, transient=False, started_at=0.0, headers_at=0.0,
                       finished_at=0.0, ip="127.0.0.1")


def _kw(fn: Callable[..., Any], inline: bool) -> dict[str, Any]:
    """``run_blocking=inline`` where the code under test has that seam and --inline asks."""
    if not inline or "run_blocking" not in inspect.signature(fn).parameters:
        return {}

    async def run_inline(f, *a, **k):
        return f(*a, **k)

    return {"run_blocking": run_inline}


def _setup(case: str, inline: bool) -> tuple[Callable[[], Awaitable[Any]], int, Callable[[Any], dict[str, Any]]]:
    """(the call to measure, the document's size, what to report of its result)."""
    from crawler.clock import MockClock
    from crawler.config import settings as config
    from crawler.engine import partbuilders
    from crawler.engine.pipeline import PagePipeline
    from crawler.frontier.urlitem import UrlItem

    cfg = config.from_dict({"seeds": ["http://n.test/"], "scope": "any"})
    clock = MockClock(wall_start=1_700_000_000.0)
    links = partbuilders.build_link_policy(cfg, ["http://n.test/"])

    class Content:
        async def submit(self, item):
            return None, None

        def pending(self) -> int:
            return 0

    pipeline = PagePipeline(
        "s0", links, Content(), clock, user_agent_token="raycrawl", max_links_per_page=cfg.urls.max_links_per_page,
        min_text_tokens=cfg.dedup.min_text_tokens, max_body_bytes=cfg.limits.max_body_bytes, store_bodies=False,
        recrawl=partbuilders.build_recrawl(cfg), news=partbuilders.build_news(cfg, clock), **_kw(PagePipeline, inline),
    )
    if case == "idle":
        async def idle() -> None:
            await asyncio.sleep(2.0)
        return idle, 0, lambda _: {}
    if case == "thread_floor":  # what any work in a thread costs the loop here: GIL and CPU share
        def spin() -> int:
            x, end = 0, time.process_time() + 1.0
            while time.process_time() < end:
                x += 1
            return x

        async def floor() -> int:
            return await asyncio.to_thread(spin)
        return floor, 0, lambda _: {}
    if case == "lexbor":  # does lexbor's tree build release the GIL? (selectolax: "with nogil")
        from selectolax.lexbor import LexborHTMLParser

        page = document("html").read_bytes()

        async def tree() -> Any:
            return await asyncio.to_thread(LexborHTMLParser, page)
        return tree, len(page), lambda _: {}
    if case == "sizes":
        return _sizes, 0, lambda out: out
    if case in ("feed_1m", "sitemap"):
        body = document("feed" if case == "feed_1m" else "sitemap").read_bytes()
        reader = partbuilders.build_sitemaps(cfg, links, pipeline, partbuilders.build_recrawl(cfg), pipeline._news, None, clock,
                                         **_kw(partbuilders.build_sitemaps, inline))
        host = "n.test" if case == "feed_1m" else "s.test"
        item = UrlItem(f"http://{host}/feed.xml" if case == "feed_1m" else f"http://{host}/sitemap.xml", 0, kind="sitemap")
        routed: list[Any] = []

        async def fetch(h, url, max_body_bytes=None):
            return _result(200, body[:max_body_bytes], "application/xml", url, len(body) > (max_body_bytes or len(body)))

        async def route(got) -> bool:
            routed.extend(got)
            return True

        async def read() -> None:
            await reader.read(item, fetch, lambda more: None, route)
        return read, len(body), lambda _: {"links": len(routed), "counters": dict(pipeline.counters)}
    if case in ("feed_page", "feed_broken", "html"):
        full = document({"feed_page": "feed", "feed_broken": "broken", "html": "html"}[case]).read_bytes()
        body = full[:MAX_BODY]
        ctype = "text/html; charset=utf-8" if case == "html" else "application/rss+xml"
        url = "http://n.test/page.html" if case == "html" else "http://n.test/feed.xml"
        res = _result(200, body, ctype, url, len(full) > MAX_BODY)
        del full

        async def page():
            return await pipeline.page(UrlItem(url, 0), res)
        return page, len(body), lambda out: {"links": len(out.links), "error": out.row.error,
                                              "simhash": out.row.simhash is not None}
    assert case == "robots"
    from crawler.fetch.fetcher import classify
    from crawler.policy.politeness import Politeness
    from crawler.robots import RobotsCache, RobotsClient
    from crawler.urls import host_key, join_url

    body = document("robots").read_bytes()
    cache = RobotsCache("raycrawl/0.1", clock=clock)
    client = RobotsClient(cache, classify=classify, normalize=links.normalizer, join=join_url, host_of=host_key,
                          pacer=Politeness(1.0, 60.0, clock=clock), clock=clock, **_kw(RobotsClient, inline))

    async def fetch_robots(h, url):
        return _result(200, body, "text/plain", url)

    urls = [f"http://n.test/private/{(k * 7919) % 20000}/{'public' if k % 2 else 'x'}" for k in range(1000)]

    async def refresh():
        rules, _ = await client.refresh("http://n.test", "n.test", fetch_robots)
        c0 = time.process_time()
        # What admission then asks for each link of that host (1,000 of them), on the loop.
        allowed = sum(rules.allowed(u) for u in urls)
        return rules, allowed, (time.process_time() - c0) / len(urls)
    return refresh, len(body), lambda out: {"kind": out[0].kind, "allowed_of_1000": out[1],
                                             "lookup_cpu_us": round(out[2] * 1e6, 1),
                                             "truncated": cache.stats()["truncated"]}


async def _sizes() -> dict[str, Any]:
    """parse_page CPU by page size (best of 5; prefixes of the html document) and the CPU
    of one hop to a worker thread and back: where inline stops paying."""
    from crawler.parse import parse_page

    page = document("html").read_bytes()
    parse_ms = {}
    for size in (64 << 10, 256 << 10, 1 << 20, MAX_BODY):
        best = float("inf")
        for _ in range(5):
            c0 = time.process_time()
            parse_page(page[:size], "http://n.test/", "text/html", {}, user_agent_token="raycrawl", max_links=5000)
            best = min(best, time.process_time() - c0)
        parse_ms[str(size)] = round(best * 1e3, 2)
    hops, c0 = 2000, time.process_time()
    for _ in range(hops):
        await asyncio.to_thread(int)
    return {"parse_page_cpu_ms_by_bytes": parse_ms, "thread_hop_cpu_us": round((time.process_time() - c0) / hops * 1e6, 1)}


async def _measure(case: str, inline: bool) -> dict[str, Any]:
    call, size, describe = _setup(case, inline)
    if os.environ.get("PARSECOST_GC_FREEZE"):  # what a shard that froze its start-up heap would see
        import gc

        gc.collect()
        gc.freeze()
    stop, probe = asyncio.Event(), {}
    task = asyncio.create_task(_probe(stop, probe))
    await asyncio.sleep(0.05)  # the probe is running
    rss0, max0 = _rss_bytes(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    t0, c0 = time.perf_counter(), time.process_time()
    out = await call()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    max1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    stop.set()
    await task
    return {"case": case, "bytes": size, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
            "peak_rss_growth_mb": round(max(0, max1 - rss0) / 1e6, 1) if max1 > max0 else f"<= {round((max0 - rss0) / 1e6, 1)}",
            "loop_stall_s": round(probe["stall_s"], 4), "loop_stall_p99_s": round(probe["stall_p99_s"], 4),
            "stalls_over_50ms": probe["stalls_over_50ms"], **describe(out)}


def child(case: str, inline: bool) -> None:
    import crawler

    result = asyncio.run(_measure(case, inline))
    result["crawler"] = str(Path(crawler.__file__).parent.parent)
    print(json.dumps(result, default=str))


# -- the parent ---------------------------------------------------------------------------------


def _median(values: list[Any]) -> Any:
    nums = sorted(v for v in values if isinstance(v, (int, float)))
    return nums[len(nums) // 2] if nums else values[0]


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One case over its runs: the median of each figure, and every run's stall."""
    if len(runs) == 1 or any("failed" in r for r in runs):
        return runs[0] if len(runs) == 1 else {"case": runs[0]["case"], "runs": runs}
    out = dict(runs[-1])
    for key in ("wall_s", "cpu_s", "peak_rss_growth_mb", "loop_stall_s", "loop_stall_p99_s", "stalls_over_50ms"):
        out[key] = _median([r[key] for r in runs])
    out["loop_stall_s_runs"] = [r["loop_stall_s"] for r in runs]
    out["runs"] = len(runs)
    return out


def run(cases: list[str], tree: Path, inline: bool, timeout_s: float, repeat: int = 1) -> list[dict[str, Any]]:
    kinds = {"feed_1m": "feed", "feed_page": "feed", "feed_broken": "broken", "sitemap": "sitemap", "robots": "robots", "html": "html",
             "lexbor": "html", "sizes": "html"}
    for kind in {kinds[c] for c in cases if c in kinds}:
        document(kind)
    out = []
    for case in cases:
        runs = []
        for _ in range(repeat):
            # Run as a script (not -m) from a neutral folder, so ``crawler`` comes from ``tree``.
            env = dict(os.environ, PYTHONPATH=str(tree))
            argv = [sys.executable, str(Path(__file__).resolve()), "--child", case] + (["--inline"] if inline else [])
            proc = subprocess.run(argv, env=env, cwd=str(CACHE), capture_output=True, text=True, timeout=timeout_s)
            if proc.returncode != 0:
                runs.append({"case": case, "failed": proc.stderr.strip().splitlines()[-1:]})
            else:
                runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            runs[-1]["load_avg_1m"] = round(os.getloadavg()[0], 1)
            print(json.dumps(runs[-1], default=str), file=sys.stderr, flush=True)
        out.append(_summary(runs))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", type=Path, default=ROOT, help="the checkout whose crawler is measured")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--inline", action="store_true", help="run the parse seam inline (no worker thread)")
    ap.add_argument("--label", default="")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--repeat", type=int, default=1, help="runs per case (medians reported; the machine may be shared)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args.child, args.inline)
        return 0
    cases = [c for c in args.cases.split(",") if c]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        print(f"parsecost: unknown case(s) {unknown}; choose from {','.join(CASES)}", file=sys.stderr)
        return 2
    if args.repeat < 1:
        print("parsecost: --repeat must be at least 1", file=sys.stderr)
        return 2
    results = run(cases, args.tree.resolve(), args.inline, args.timeout, args.repeat)
    report = {"label": args.label, "tree": str(args.tree.resolve()), "inline": args.inline,
              "gc_freeze": bool(os.environ.get("PARSECOST_GC_FREEZE")), "repeat": args.repeat, "cases": results,
              "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                          "load_avg_1m": round(os.getloadavg()[0], 1)}}
    text = json.dumps(report, indent=2, default=str)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
