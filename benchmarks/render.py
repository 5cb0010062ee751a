"""Rendering JavaScript pages: raycrawl's ``render: auto`` against a plain render-everything
CDP loop on the same Chromium and the same mixed web, plus the browser pool alone.

Three measurements, one run (``python -m benchmarks.render``):

1. **crawl, auto**: a ``--local`` crawl of a mixed web (crawler.testing.spaweb: single-page
   apps whose routes only their script draws, many plain server-rendered pages with a
   harmless script, one server-rendered page with framework markers), ``render.mode:
   auto``, one browser with 4 tabs. Pages/s, the share rendered, the decision's precision
   and recall against the web's ground truth, politeness violations at the server
   counting every request (subresources included).
2. **crawl, baseline**: a breadth-first loop that renders *every* page it finds on the
   same Chromium over CDP, 4 tabs, the browser fetching for itself (no interception, no
   politeness, no robots): load event, then a fixed 0.5 s for the app's data (a
   typical hand-rolled loop). Same pages/s, found pages, violations.
3. **pool**: ``--renders`` renders on one browser of the pool (4 tabs, no recycling), the
   app pages answered in-process: renders/s per core, CPU seconds per render, p50/p95
   render time, and the browser's memory (PSS of its process group) every 10 renders.

Results: ``benchmarks/results/render.json`` (README "JavaScript pages").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from crawler.config import settings as config
from crawler.session.inprocess import local_session
from crawler.output import read_pages
from crawler.parse import parse_page
from crawler.render.browser import FLAGS, BrowserPool, PoolSettings, find_browser
from crawler.render.cdp import CdpConnection
from crawler.render.jobs import RenderJob, SubRequest, SubResponse
from crawler.testing.server import WebServer
from crawler.testing.spaweb import SpaWeb
from crawler.testing.webtypes import USER_AGENT

HERE = Path(__file__).resolve().parent
INTERVAL = 0.05
TABS = 4


def mixed_web() -> SpaWeb:
    return SpaWeb(apps=4, routes=12, plain_pages=40, plain_hosts=10)


def violations(server: WebServer, interval: float) -> dict[str, int]:
    """Per-host politeness breaches in the server's log: overlapping requests and starts
    closer than ``interval`` (every request counts: pages, scripts, XHR, robots.txt)."""
    by_host: dict[str, list] = defaultdict(list)
    for r in server.requests():
        by_host[r.host].append(r)
    overlap = early = 0
    for recs in by_host.values():
        recs.sort(key=lambda r: r.start)
        for a, b in zip(recs, recs[1:]):
            overlap += b.start < a.end
            early += b.start - a.start < interval - 1e-3
    return {"requests": sum(len(v) for v in by_host.values()), "overlapping": overlap, "closer_than_interval": early}


def decision_quality(web: SpaWeb, rows: list[dict]) -> dict[str, float]:
    rendered = {r["url"] for r in rows if r["rendered"]}
    needed = {u for u, need in web.documents().items() if need}
    hit = len(rendered & needed)
    return {"precision": round(hit / max(1, len(rendered)), 4), "recall": round(hit / max(1, len(needed)), 4),
            "rendered": len(rendered), "needed": len(needed)}


def signal_rule_quality(web: SpaWeb) -> dict[str, float]:
    """The HTML-signal rule alone (no spot checks, no learning) on every document's raw HTML."""
    from crawler.render.decide import page_signals

    tp = fp = fn = 0
    for url, need in web.documents().items():
        host, _, path = url.split("://", 1)[1].partition("/")
        r = web.reply(host.split(":")[0], "/" + path)
        page = parse_page(r.body, url, "text/html; charset=utf-8", {}, user_agent_token="raycrawl", max_links=5000)
        hit = bool(page_signals(r.body, page))
        tp += hit and need
        fp += hit and not need
        fn += need and not hit
    return {"precision": round(tp / max(1, tp + fp), 4), "recall": round(tp / max(1, tp + fn), 4),
            "true_positives": tp, "false_positives": fp, "false_negatives": fn}


def crawl_auto(tmp: str) -> dict[str, Any]:
    web = mixed_web()
    with WebServer(web) as server:
        cfg = config.from_dict({
            "seeds": web.seeds(), "scope": "any", "user_agent": USER_AGENT,
            "politeness": {"interval_s": INTERVAL}, "sitemaps": {"enabled": False},
            "fetch": {"resolve": {"*.test": server.host}, "timeout_s": 10.0},
            "output": {"path": os.path.join(tmp, "auto")},
            "render": {"mode": "auto", "tabs": TABS, "quiet_s": 0.3, "max_wait_s": 5.0},
        })
        session = local_session(cfg)
        t0 = time.monotonic()
        stats = asyncio.run(session.run())
        elapsed = time.monotonic() - t0
        rows = read_pages(cfg.output.path).to_pylist()
        docs = web.documents()
        counts = server.request_counts()
        times = [t for s in session.runtime.shards.values() for t in s.pipeline.renderer.render_times]
        return {
            "pages": len(rows), "documents": len(docs), "found": sum(1 for u in docs if counts.get(u)),
            "documents_requested_twice": sum(1 for u in docs if counts.get(u, 0) > 1),
            "elapsed_s": round(elapsed, 2), "pages_per_s": round(len(rows) / elapsed, 2),
            "rendered_share": round(sum(1 for r in rows if r["rendered"]) / max(1, len(rows)), 4),
            "decision": decision_quality(web, rows), "signal_rule": signal_rule_quality(web), "render": stats["render"],
            "render_time_s": {"p50": round(statistics.median(times), 3), "p95": round(_pct(times, 95), 3), "n": len(times)},
            "politeness": violations(server, INTERVAL),
            "wrong_user_agent": sum(1 for r in server.requests() if r.user_agent != USER_AGENT),
        }


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] if xs else 0.0


async def _baseline(web: SpaWeb, port: int, exe: str) -> dict[str, Any]:
    profile = tempfile.mkdtemp(prefix="raycrawl-chromium-baseline-")
    flags = [f for f in FLAGS if not f.startswith("--host-resolver-rules")]
    proc = await asyncio.create_subprocess_exec(
        exe, *flags, "--host-resolver-rules=MAP *.test 127.0.0.1", f"--user-data-dir={profile}", "about:blank",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL, start_new_session=True)
    port_file = os.path.join(profile, "DevToolsActivePort")
    while not os.path.exists(port_file) or len(open(port_file).read().split()) < 2:
        await asyncio.sleep(0.05)
    p, path = open(port_file).read().split()[:2]
    conn = CdpConnection()
    await conn.open(f"ws://127.0.0.1:{p}{path}")
    queue: asyncio.Queue[str] = asyncio.Queue()
    seen = set(web.seeds())
    for s in web.seeds():
        queue.put_nowait(s)
    done: list[str] = []
    times: list[float] = []

    async def render(url: str) -> str:
        ctx = (await conn.send("Target.createBrowserContext", {"disposeOnDetach": True}))["browserContextId"]
        try:
            tid = (await conn.send("Target.createTarget", {"url": "about:blank", "browserContextId": ctx}))["targetId"]
            sess = (await conn.send("Target.attachToTarget", {"targetId": tid, "flatten": True}))["sessionId"]
            loaded = asyncio.Event()
            conn.listen(sess, lambda m, _p: loaded.set() if m == "Page.loadEventFired" else None)
            await conn.send("Page.enable", {}, sess)
            await conn.send("Emulation.setUserAgentOverride", {"userAgent": USER_AGENT}, sess)
            await conn.send("Page.navigate", {"url": url}, sess)
            await asyncio.wait_for(loaded.wait(), 15)
            await asyncio.sleep(0.5)
            out = await conn.send("Runtime.evaluate", {"expression": "document.documentElement.outerHTML",
                                                       "returnByValue": True}, sess)
            conn.listen(sess, None)
            return out["result"]["value"]
        finally:
            await conn.send("Target.disposeBrowserContext", {"browserContextId": ctx})

    async def worker() -> None:
        while True:
            url = await queue.get()
            try:
                t = time.monotonic()
                html = await render(url)
                times.append(time.monotonic() - t)
                done.append(url)
                page = parse_page(html.encode(), url, "text/html; charset=utf-8", {}, user_agent_token="raycrawl",
                                  max_links=5000)
                for link in page.links:
                    u = (link.resolved or "").split("#", 1)[0]
                    if u.startswith("http://") and ".test:" in u and u not in seen:
                        seen.add(u)
                        queue.put_nowait(u)
            except Exception as exc:  # noqa: BLE001 - a benchmark loop: count and go on
                print(f"baseline: {url}: {exc!r}", file=sys.stderr)
            finally:
                queue.task_done()

    workers = [asyncio.ensure_future(worker()) for _ in range(TABS)]
    t0 = time.monotonic()
    await queue.join()
    elapsed = time.monotonic() - t0
    for w in workers:
        w.cancel()
    await conn.close()
    os.killpg(proc.pid, 9)
    await proc.wait()
    shutil.rmtree(profile, ignore_errors=True)
    return {"done": done, "elapsed": elapsed, "times": times}


def crawl_baseline(exe: str) -> dict[str, Any]:
    web = mixed_web()
    with WebServer(web) as server:
        r = asyncio.run(_baseline(web, server.port, exe))
        docs = web.documents()
        counts = server.request_counts()
        return {
            "pages": len(r["done"]), "documents": len(docs), "found": sum(1 for u in docs if counts.get(u)),
            "elapsed_s": round(r["elapsed"], 2), "pages_per_s": round(len(r["done"]) / r["elapsed"], 2),
            "rendered_share": 1.0,
            "render_time_s": {"p50": round(statistics.median(r["times"]), 3), "p95": round(_pct(r["times"], 95), 3),
                              "n": len(r["times"])},
            "politeness": violations(server, INTERVAL),
            "wrong_user_agent": sum(1 for x in server.requests() if x.user_agent != USER_AGENT),
        }


async def _pool(exe: str, renders: int) -> dict[str, Any]:
    web = SpaWeb(apps=4, routes=12)
    web.bind(8080)
    docs = [u for u, need in web.documents().items() if need and "app-" in u]
    pool = BrowserPool(PoolSettings(exe, processes=1, tabs=TABS, quiet_s=0.3, max_wait_s=5.0,
                                    recycle_renders=renders + 1, recycle_s=1e9, recycle_rss_mb=1 << 20,
                                    user_agent=USER_AGENT))
    pool.RSS_EVERY = 10

    async def subfetch(req: SubRequest) -> SubResponse:
        host, _, path = req.url.split("://", 1)[1].partition("/")
        r = web.reply(host.split(":")[0], "/" + path)
        return SubResponse(r.status, r.headers, r.body)

    sem = asyncio.Semaphore(TABS)
    times: list[float] = []
    fails: dict[str, int] = defaultdict(int)

    async def one(i: int) -> None:
        async with sem:
            url = docs[i % len(docs)]
            host, _, path = url.split("://", 1)[1].partition("/")
            r = web.reply(host.split(":")[0], "/" + path)
            reply = await pool.render(RenderJob(f"b{i}", url, r.status, r.headers, r.body, 20.0), subfetch)
            if reply.html is None:
                fails[reply.reason] += 1
            else:
                times.append(reply.elapsed_s)

    self0, kids0 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    await asyncio.gather(*(one(i) for i in range(renders)))
    elapsed = time.monotonic() - t0
    samples = list(pool.rss_samples)
    await pool.close()  # waits for the browser: its whole tree's CPU lands in RUSAGE_CHILDREN
    self1, kids1 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (self1.ru_utime + self1.ru_stime - self0.ru_utime - self0.ru_stime
           + kids1.ru_utime + kids1.ru_stime - kids0.ru_utime - kids0.ru_stime)
    # PSS moves by +-20% from one sample to the next (renderer processes come and go with
    # the contexts): compare the mean of the first ten samples from 50 renders on with
    # the mean of the last ten.
    early = [b for n, b in samples if n >= 50][:10]
    late = [b for _, b in samples][-10:]
    first = statistics.mean(early) if early else 0
    last = statistics.mean(late) if late else 0
    cores = os.cpu_count() or 1
    return {
        "renders": renders, "ok": len(times), "failed": dict(fails), "elapsed_s": round(elapsed, 2),
        "renders_per_s": round(len(times) / elapsed, 2), "cores": cores,
        "renders_per_s_per_core": round(len(times) / elapsed / cores, 2),
        "cpu_s_per_render": round(cpu / max(1, len(times)), 3),
        "renders_per_cpu_s": round(len(times) / cpu, 2) if cpu > 0 else None,
        "render_time_s": {"p50": round(statistics.median(times), 3), "p95": round(_pct(times, 95), 3)},
        "memory_mb": {"after_50": round(first / 1e6, 1), "last": round(last / 1e6, 1),
                      "compared": "mean of samples 50-140 renders vs mean of the last ten samples",
                      "max": round(max(b for _, b in samples) / 1e6, 1) if samples else 0,
                      "growth": round(last / first - 1, 4) if first else None,
                      "samples": [[n, round(b / 1e6, 1)] for n, b in samples]},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--renders", type=int, default=1000)
    ap.add_argument("--out", default=str(HERE / "results" / "render.json"))
    args = ap.parse_args(argv)
    exe = find_browser(None)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        auto = crawl_auto(tmp)
    print("auto", json.dumps(auto)[:400], flush=True)
    base = crawl_baseline(exe)
    print("baseline", json.dumps(base)[:400], flush=True)
    pool = asyncio.run(_pool(exe, args.renders))
    print("pool", json.dumps({k: v for k, v in pool.items() if k != "memory_mb"}), flush=True)
    out = {
        "browser": os.path.basename(exe), "browser_version": _version(exe), "python": platform.python_version(),
        "cores": os.cpu_count(), "load_before": load_before, "tabs": TABS, "interval_s": INTERVAL,
        "web": {"apps": 4, "routes": 12, "plain_hosts": 10, "plain_pages": 40},
        "auto": auto, "baseline": base, "pool": pool,
        "useful_pages_per_s_ratio": round(auto["pages_per_s"] / base["pages_per_s"], 2),
        "load_after": os.getloadavg()[0],
        "note": "a shared 2-core machine with other jobs running (load averages above): wall-clock figures "
                "are inflated by the load; CPU seconds per render are not",
    }
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


def _version(exe: str) -> str:
    import subprocess

    try:
        return subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
