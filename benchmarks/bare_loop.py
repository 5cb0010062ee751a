"""The bare baseline: the least a Python crawler must do per page, nothing more.

aiohttp GET (same connector settings as the crawler's fetcher: pooled, keep-alive 5 s,
names resolved to 127.0.0.1 without DNS) + selectolax (lexbor) parse + ``urljoin`` of
every ``a[href]``/``area[href]`` against the page's ``<base href>`` + a minimal
canonical form (fragment and query dropped, host lower-cased, %-escapes decoded) + a
set of seen URLs, breadth-first over the static bench web with at most one request in
flight per host and ``--concurrency`` requests in flight overall. No robots.txt, no
politeness interval, no normalization rules, no traps, no storage, no fingerprints.

Its CPU per page is the floor the crawler's pipeline is compared with
(``benchmarks/throughput.py`` runs both against the same nginx in one run).

``--procs 2 --uvloop`` is the *ceiling* the issue's targets are stated against: the
hosts are split between N processes by a stable hash of the host name (as shards split
them), each process crawls its own hosts with an uvloop event loop and drops links to
the others' hosts (the others fetch them: every host of the bench web is a seed), and
the page target is split evenly. Pages/s and CPU are summed over the processes.

    python -m benchmarks.bare_loop --pages 20000
    python -m benchmarks.bare_loop --pages 20000 --procs 2 --uvloop
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import zlib
import resource
import socket
import sys
import time
from collections import deque
from urllib.parse import unquote, urljoin, urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver
from selectolax.lexbor import LexborHTMLParser

from benchmarks import common
from benchmarks.staticweb import (
    DEFAULT_HOSTS,
    DEFAULT_PORT,
    DOMAIN,
    default_dir,
    generate,
    seeds,
)

_SUFFIX = "." + DOMAIN


class LoopbackResolver(AbstractResolver):
    """Every name -> 127.0.0.1 (what ``fetch.resolve: {"*.bench.test": ...}`` does)."""

    async def resolve(self, host: str, port: int = 0, family: int = socket.AF_INET):
        return [{"hostname": host, "host": "127.0.0.1", "port": port, "family": socket.AF_INET,
                 "proto": 0, "flags": socket.AI_NUMERICHOST}]

    async def close(self) -> None:
        return None


def owner(host: str, procs: int) -> int:
    """Which of ``procs`` processes crawls ``host`` (stable across processes)."""
    return zlib.crc32(host.encode()) % procs


def canonical(url: str) -> tuple[str, str] | None:
    """(url, host) of a resolved link on the bench web, minimally canonicalized; None = skip."""
    try:
        s = urlsplit(url)
        host = s.hostname
    except ValueError:
        return None
    if s.scheme not in ("http", "https") or not host or not host.endswith(_SUFFIX):
        return None
    path = s.path or "/"
    if "%" in path:
        path = unquote(path)
    return f"{s.scheme}://{s.netloc.lower()}{path}", host


def extract(body: bytes, url: str) -> list[str]:
    """Absolute link URLs of a page (base href honoured)."""
    tree = LexborHTMLParser(body)
    base = url
    b = tree.css_first("base[href]")
    if b is not None:
        base = urljoin(url, (b.attributes.get("href") or "").strip())
    out = []
    for node in tree.css("a[href], area[href]"):
        href = node.attributes.get("href")
        if href:
            try:
                out.append(urljoin(base, href.strip()))
            except ValueError:  # e.g. "http://a[b].test/x": skip that link alone
                continue
    return out


async def crawl(seed_urls: list[str], pages: int, concurrency: int = 256, timeout_s: float = 600.0,
                part: tuple[int, int] = (0, 1)) -> dict:
    """BFS until ``pages`` 200 responses (or the web runs out); returns counters.

    ``part = (i, n)``: crawl only the hosts that :func:`owner` gives to process ``i`` of ``n``.
    """
    me, procs = part
    connector = aiohttp.TCPConnector(limit=512, limit_per_host=0, resolver=LoopbackResolver(),
                                     use_dns_cache=False, keepalive_timeout=5.0)
    session = aiohttp.ClientSession(connector=connector, auto_decompress=False,
                                    cookie_jar=aiohttp.DummyCookieJar(),
                                    headers={"User-Agent": "bare-loop/0.1", "Accept-Encoding": "gzip, deflate"},
                                    timeout=aiohttp.ClientTimeout(total=10))
    queues: dict[str, deque[str]] = {}
    ready: deque[str] = deque()  # hosts with queued URLs and nothing in flight
    busy: set[str] = set()
    seen: set[str] = set()
    c = {"pages": 0, "requests": 0, "errors": 0, "non_200": 0, "links": 0, "bytes": 0}
    wake = asyncio.Event()
    in_flight = 0
    deadline = time.monotonic() + timeout_s

    def enqueue(u: str, host: str) -> None:
        if u in seen:
            return
        if procs > 1 and owner(host, procs) != me:
            return
        seen.add(u)
        q = queues.get(host)
        if q is None:
            q = queues[host] = deque()
        q.append(u)
        if host not in busy and len(q) == 1:
            ready.append(host)

    for s in seed_urls:
        cu = canonical(s)
        if cu:
            enqueue(*cu)

    async def worker() -> None:
        nonlocal in_flight
        while c["pages"] < pages and time.monotonic() < deadline:
            if not ready:
                if in_flight == 0:
                    wake.set()
                    return
                wake.clear()
                await wake.wait()
                continue
            host = ready.popleft()
            url = queues[host].popleft()
            busy.add(host)
            in_flight += 1
            try:
                c["requests"] += 1
                async with session.get(url, allow_redirects=False) as r:
                    body = await r.read()
                    status = r.status
                if status == 200 and c["pages"] < pages:
                    c["pages"] += 1
                    c["bytes"] += len(body)
                    links = extract(body, url)
                    c["links"] += len(links)
                    for link in links:
                        cu = canonical(link)
                        if cu is not None:
                            enqueue(*cu)
                elif status != 200:
                    c["non_200"] += 1
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
                c["errors"] += 1
            finally:
                in_flight -= 1
                busy.discard(host)
                if queues[host]:
                    ready.append(host)
                else:
                    del queues[host]
                wake.set()

    try:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    finally:
        await session.close()
    c["seen"] = len(seen)
    c["hosts_left"] = len(queues)
    return c


def _run_part(args: tuple[list[str], int, int, float, int, int, bool]) -> dict:
    """One process of a ``--procs N`` run: its share of hosts and pages; counters + CPU."""
    seed_urls, pages, concurrency, timeout_s, me, procs, use_uvloop = args
    if use_uvloop:
        import uvloop

        uvloop.install()
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.monotonic()
    c = asyncio.run(crawl(seed_urls, pages, concurrency, timeout_s, (me, procs)))
    c["wall_s"] = time.monotonic() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    c["cpu_s"] = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return c


def _part_child(job: tuple, conn) -> None:
    conn.send(_run_part(job))
    conn.close()


def crawl_parts(seed_urls: list[str], pages: int, concurrency: int, timeout_s: float, procs: int,
                use_uvloop: bool) -> dict:
    """The crawl split over ``procs`` processes (one in-process when 1); summed counters."""
    share = [pages // procs + (1 if i < pages % procs else 0) for i in range(procs)]
    jobs = [(seed_urls, share[i], concurrency, timeout_s, i, procs, use_uvloop) for i in range(procs)]
    if procs == 1:
        parts = [_run_part(jobs[0])]
    else:
        # Plain processes and pipes (a Pool's terminate can hang on a worker's queue lock).
        ctx = multiprocessing.get_context("fork")
        pipes, workers = [], []
        for job in jobs:
            recv, send = ctx.Pipe(duplex=False)
            w = ctx.Process(target=_part_child, args=(job, send), daemon=True)
            w.start()
            send.close()
            pipes.append(recv)
            workers.append(w)
        parts = [r.recv() for r in pipes]
        for w in workers:
            w.join()
    total: dict = {}
    for c in parts:
        for k, v in c.items():
            if k not in ("wall_s",):
                total[k] = total.get(k, 0) + v
    total["part_wall_s"] = [round(c["wall_s"], 2) for c in parts]
    return total


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="bare aiohttp + selectolax + urljoin BFS baseline")
    p.add_argument("--pages", type=int, default=20000)
    p.add_argument("--hosts", type=int, default=DEFAULT_HOSTS)
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.add_argument("--web", default=None, help="static web directory (default: generated/reused)")
    p.add_argument("--concurrency", type=int, default=256, help="requests in flight per process")
    p.add_argument("--procs", type=int, default=1, help="processes, hosts split between them")
    p.add_argument("--uvloop", action="store_true", help="run each process on uvloop")
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--no-nginx", action="store_true", help="nginx is already serving --port")
    p.add_argument("--child", action="store_true", help="print @@MARK/@@RESULT lines for a measuring parent")
    a = p.parse_args(argv)
    common.exit_on_sigterm()
    ngx = None
    if not a.no_nginx:
        from benchmarks.nginx import Nginx

        web = a.web or generate(default_dir(a.hosts, a.port), hosts=a.hosts, port=a.port)["dir"]
        ngx = Nginx(web, a.port, access_log=False).start()
    try:
        if a.child:
            common.mark("start")
        t0 = time.monotonic()
        c = crawl_parts(seeds(a.hosts, a.port), a.pages, a.concurrency, a.timeout, a.procs, a.uvloop)
        wall = time.monotonic() - t0
        if a.child:
            common.mark("end")
    finally:
        if ngx is not None:
            ngx.stop()
    cpu = c.pop("cpu_s")
    out = {
        "benchmark": "bare_loop",
        "procs": a.procs,
        "uvloop": a.uvloop,
        **c,
        "wall_s": round(wall, 2),
        "pages_per_s": round(c["pages"] / wall, 1),
        "cpu_s": round(cpu, 2),
        "cpu_ms_per_page": round(1000 * cpu / max(1, c["pages"]), 3),
    }
    if a.child:
        common.emit_result(out)
    else:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
