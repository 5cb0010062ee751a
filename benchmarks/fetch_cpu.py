"""Client CPU per fetch of :class:`crawler.fetch.fetcher.Fetcher` over loopback.

A separate process serves one 25 KB HTML page (plain at ``/page``, gzip-encoded at
``/gz``) with aiohttp on 127.0.0.1; this process fetches it ``--fetches`` times through a
Fetcher (keep-alive, ``--concurrency`` requests in flight) and reports its own CPU time
(``time.process_time``: user + system of this process only, so the server's CPU is not
counted) per fetch, over ``--rounds`` rounds (min and median). Run it on two trees to
compare a change:

    PYTHONPATH=$PWD python -m benchmarks.fetch_cpu --fetches 2000 --rounds 7 --pin
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import socket
import statistics
import subprocess
import sys
import time

PAGE = (b"<!doctype html><html><head><title>bench</title></head><body>"
        + b"".join(b'<p><a href="/p/%d">link %d</a> some text to make the page realistic.</p>' % (i, i) for i in range(400))
        + b"</body></html>")[:25_000]


def serve(port: int) -> None:
    """Serve ``/page`` and ``/gz`` on 127.0.0.1:port until killed."""
    from aiohttp import web

    gz = gzip.compress(PAGE)

    async def page(_: web.Request) -> web.Response:
        return web.Response(body=PAGE, content_type="text/html")

    async def gzpage(_: web.Request) -> web.Response:
        return web.Response(body=gz, headers={"Content-Type": "text/html", "Content-Encoding": "gzip"})

    app = web.Application()
    app.router.add_get("/page", page)
    app.router.add_get("/gz", gzpage)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


async def _round(path: str, port: int, fetches: int, concurrency: int) -> tuple[float, float]:
    from crawler.fetch.fetcher import Fetcher

    f = Fetcher(user_agent="raycrawl-bench/1.0", resolve={"bench.test": "127.0.0.1"})
    url = f"http://bench.test:{port}{path}"
    try:
        await f.fetch(url)  # open the session and the first connection outside the timing
        left = fetches

        async def worker() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                r = await f.fetch(url)
                assert r.status == 200 and len(r.body) == len(PAGE), r

        c0, w0 = time.process_time(), time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return time.process_time() - c0, time.perf_counter() - w0
    finally:
        await f.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fetches", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--paths", default="/page,/gz")
    ap.add_argument("--pin", action="store_true", help="pin this process to CPU 0 and the server to CPU 1")
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.pin:
        # Same cores every run: CPU time per fetch otherwise moves with where the
        # scheduler puts the client relative to the server.
        os.sched_setaffinity(0, {1} if args.serve else {0})
    if args.serve:
        serve(args.serve)
        return
    port = _free_port()
    cmd = [sys.executable, "-m", "benchmarks.fetch_cpu", "--serve", str(port)] + (["--pin"] if args.pin else [])
    server = subprocess.Popen(cmd, env=os.environ.copy())
    try:
        for _ in range(100):  # wait for the server to listen
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.05)
        out: dict[str, dict[str, float]] = {}
        for path in args.paths.split(","):
            cpu: list[float] = []
            wall: list[float] = []
            for _ in range(args.rounds):
                c, w = asyncio.run(_round(path, port, args.fetches, args.concurrency))
                cpu.append(c)
                wall.append(w)
            out[path] = {
                "cpu_us_per_fetch_min": round(min(cpu) / args.fetches * 1e6, 1),
                "cpu_us_per_fetch_median": round(statistics.median(cpu) / args.fetches * 1e6, 1),
                "wall_us_per_fetch_median": round(statistics.median(wall) / args.fetches * 1e6, 1),
            }
        print(json.dumps({"fetches": args.fetches, "rounds": args.rounds, "pinned": args.pin, "page_bytes": len(PAGE), "results": out}))
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
