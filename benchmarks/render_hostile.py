"""A hostile page costs itself only: plain renders next to runaway pages, same run.

``python -m benchmarks.render_hostile`` renders two webs on the browser pool as shipped
(one browser, 4 tabs, the default render budget: crawler.render.budget), alternating
clean / mixed rounds so both see the same machine load:

* **clean**: ``--plain`` app pages of crawler.testing.spaweb (each draws its routes from
  an ``/api/`` request answered in-process, as benchmarks/render.py's pool part does);
* **mixed**: the same plain pages plus 5% runaway pages spread among them, one of each
  kind in turn: ``while(true){}``, a JS heap grown until out of memory, a million-node
  DOM, ArrayBuffers grown without end.

Reported per web: render time p50/p95 of the plain pages, their failures by reason
(timeouts above all), each runaway's reason, note and time (the CPU budget counts CPU
seconds, so on a loaded machine a busy loop may reach the render's 20 s deadline first:
``timeout``, still its own failure), and the browser's memory:
peak PSS of its whole process group, sampled every 0.25 s. The machine's load average
before and after goes with them. Results: ``benchmarks/results/render_hostile.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from crawler.render.browser import BrowserPool, PoolSettings, find_browser, process_group_rss
from crawler.render.budget import DEFAULT_BUDGET
from crawler.render.jobs import RenderJob, RenderReply, SubRequest, SubResponse
from crawler.testing.spaweb import SpaWeb
from crawler.testing.webtypes import USER_AGENT

HERE = Path(__file__).resolve().parent
HTML = (("content-type", "text/html"),)
TIMEOUT_S = 20.0  # render.timeout_s's default

RUNAWAYS: dict[str, bytes] = {
    "busy_loop": b"<html><body><p>spin</p><script>while (true) {}</script></body></html>",
    "heap_oom": b"<html><body><script>const a = []; for (;;) { a.push({x: Math.random(), s: 's' + Math.random()}); }"
                b"</script></body></html>",
    "million_nodes": b"<html><body><script>for (let i = 0; i < 1e6; i++) "
                     b"{ document.body.appendChild(document.createElement('div')); }</script></body></html>",
    "arraybuffer_growth": b"<html><body><script>const a = []; for (;;) { a.push(new Uint8Array(16 << 20).fill(1)); }"
                          b"</script></body></html>",
}


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] if xs else 0.0


def pages(web: SpaWeb, plain: int, runaway_share: float) -> list[tuple[str, str, bytes]]:
    """(kind, url, body): ``plain`` app pages, runaways spread evenly among them."""
    docs = [u for u, need in web.documents().items() if need and "app-" in u]
    out: list[tuple[str, str, bytes]] = []
    for i in range(plain):
        url = docs[i % len(docs)]
        host, _, path = url.split("://", 1)[1].partition("/")
        out.append(("plain", url, web.reply(host.split(":")[0], "/" + path).body))
    n = round(plain * runaway_share / (1 - runaway_share)) if runaway_share else 0
    kinds = list(RUNAWAYS)
    for k in range(n):
        kind = kinds[k % len(kinds)]
        at = (k + 1) * len(out) // (n + 1)
        out.insert(at, (kind, f"http://runaway-{k}.test/", RUNAWAYS[kind]))
    return out


async def run_web(exe: str, web: SpaWeb, todo: list[tuple[str, str, bytes]]) -> dict[str, Any]:
    pool = BrowserPool(PoolSettings(exe, user_agent=USER_AGENT))  # the shipped pool: 1 browser, 4 tabs

    async def subfetch(req: SubRequest) -> SubResponse:
        host, _, path = req.url.split("://", 1)[1].partition("/")
        r = web.reply(host.split(":")[0], "/" + path)
        return SubResponse(r.status, r.headers, r.body)

    peak = 0
    stop = asyncio.Event()

    async def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, sum(process_group_rss(pid) for pid in pool.pids()))
            try:
                await asyncio.wait_for(stop.wait(), 0.25)
            except asyncio.TimeoutError:
                pass

    async def one(i: int, kind: str, url: str, body: bytes) -> tuple[str, RenderReply, float]:
        t0 = time.monotonic()
        reply = await pool.render(RenderJob(f"h{i}", url, 200, HTML, body, TIMEOUT_S), subfetch)
        return kind, reply, time.monotonic() - t0

    # The browser is started before the clock runs (both webs pay the same, outside).
    await pool.render(RenderJob("warm", todo[0][1], 200, HTML, todo[0][2], TIMEOUT_S), subfetch)
    sampler = asyncio.ensure_future(sample())
    t0 = time.monotonic()
    results = await asyncio.gather(*(one(i, k, u, b) for i, (k, u, b) in enumerate(todo)))
    elapsed = time.monotonic() - t0
    stop.set()
    await sampler
    status = pool.status()
    await pool.close()
    plain = [(r, took) for k, r, took in results if k == "plain"]
    times = [r.elapsed_s for r, _ in plain if r.reason == "ok"]
    return {
        "renders": len(results), "elapsed_s": round(elapsed, 2),
        "plain": {"n": len(plain), "ok": len(times), "failed": dict(Counter(r.reason for r, _ in plain if r.reason != "ok")),
                  "times": times},
        "runaways": [{"kind": k, "reason": r.reason, "notes": {n: c for n, c in r.notes.items() if n.startswith("budget")},
                      "elapsed_s": round(r.elapsed_s, 2), "detail": r.detail[:160]}
                     for k, r, _ in results if k != "plain"],
        "browser_peak_pss_mb": round(peak / 1e6, 1),
        "pool": status,
    }


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    times = [t for r in runs for t in r["plain"]["times"]]
    failed: Counter[str] = Counter()
    for r in runs:
        failed.update(r["plain"]["failed"])
    return {
        "plain_renders": sum(r["plain"]["n"] for r in runs), "plain_ok": len(times),
        "plain_failed": dict(failed), "plain_lost_to_timeout": failed.get("timeout", 0),
        "plain_render_s": {"p50": round(statistics.median(times), 3), "p95": round(_pct(times, 95), 3)} if times else {},
        "browser_peak_pss_mb": max(r["browser_peak_pss_mb"] for r in runs),
        "runaway_reasons": dict(Counter(w["reason"] for r in runs for w in r["runaways"])),
        "runaway_elapsed_s_max": max((w["elapsed_s"] for r in runs for w in r["runaways"]), default=0.0),
        "runaways": [w for r in runs for w in r["runaways"]],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plain", type=int, default=76, help="plain pages per web")
    ap.add_argument("--share", type=float, default=0.05, help="runaway share of the mixed web")
    ap.add_argument("--rounds", type=int, default=2, help="clean/mixed pairs, alternated")
    ap.add_argument("--out", default=str(HERE / "results" / "render_hostile.json"))
    args = ap.parse_args(argv)
    exe = find_browser(None)
    web = SpaWeb(apps=4, routes=12)
    web.bind(8080)
    load_before = os.getloadavg()
    runs: dict[str, list[dict[str, Any]]] = {"clean": [], "mixed": []}
    for rnd in range(args.rounds):
        for name, share in (("clean", 0.0), ("mixed", args.share)) if rnd % 2 == 0 else (("mixed", args.share), ("clean", 0.0)):
            r = asyncio.run(run_web(exe, web, pages(web, args.plain, share)))
            r["load_after"] = round(os.getloadavg()[0], 2)
            runs[name].append(r)
            print(name, rnd, json.dumps({k: v for k, v in r.items() if k != "plain"})[:600],
                  "plain p95", round(_pct(r["plain"]["times"], 95), 3), flush=True)
    clean, mixed = summary(runs["clean"]), summary(runs["mixed"])
    p95c, p95m = clean["plain_render_s"].get("p95", 0.0), mixed["plain_render_s"].get("p95", 0.0)
    for group in runs.values():
        for r in group:
            r["plain"]["times"] = [round(t, 3) for t in r["plain"]["times"]]
    out = {
        "browser": os.path.basename(exe), "cores": os.cpu_count(),
        "load_avg_before": [round(x, 2) for x in load_before], "load_avg_after": [round(x, 2) for x in os.getloadavg()],
        "pool": {"processes": 1, "tabs": 4, "timeout_s": TIMEOUT_S},
        "budget": {"cpu_s": DEFAULT_BUDGET.cpu_s, "heap_mb": DEFAULT_BUDGET.heap_mb, "max_nodes": DEFAULT_BUDGET.max_nodes,
                   "v8_heap_mb": DEFAULT_BUDGET.v8_heap_mb, "renderer_rss_mb": DEFAULT_BUDGET.renderer_rss_mb},
        "web": {"plain_pages": args.plain, "runaway_share": args.share, "rounds": args.rounds,
                "runaway_kinds": list(RUNAWAYS)},
        "clean": clean, "mixed": mixed,
        "plain_p95_ratio_mixed_to_clean": round(p95m / p95c, 3) if p95c else None,
        "goal": {"plain_p95_within": 1.2, "plain_lost_to_timeout": 0},
        "met": {"p95": bool(p95c) and p95m <= 1.2 * p95c, "no_timeouts": mixed["plain_lost_to_timeout"] == 0,
                # A runaway fails as "cap" at its budget, or at the render's deadline
                # ("timeout") when the machine's load leaves it too little CPU to spend it.
                "runaways_cap_or_timeout": all(w["reason"] in ("cap", "timeout") for w in mixed["runaways"])},
        "runs": runs,
        "note": "a shared 2-core machine with other engineers' jobs running (load averages above); clean and mixed "
                "rounds alternate so both see the same load",
    }
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps({k: out[k] for k in ("load_avg_before", "plain_p95_ratio_mixed_to_clean", "met")}))
    print({k: {x: y for x, y in v.items() if x != "runaways"} for k, v in (("clean", clean), ("mixed", mixed))})
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
