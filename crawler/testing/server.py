"""Serve a :class:`~crawler.testing.web.SyntheticWeb` on loopback, and log every request.

One aiohttp low-level server on ``127.0.0.1`` serves all the web's hosts, choosing by the
``Host`` header. It runs in a background thread with its own event loop, so a test (or
Ray actors in other processes) can crawl it while the test reads :meth:`WebServer.requests`.
Stalling pages sleep with ``asyncio.sleep``: other requests are answered meanwhile.

By hand::

    python -m crawler.testing.server --profile demo --port 8080

prints the seed URLs and the ``fetch.resolve`` line to crawl it with, and serves until
Ctrl-C (:func:`serve_forever`, also behind ``crawl serve-web``).
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import logging
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from aiohttp import web as aioweb

from crawler.testing.loopthread import LoopThreadServer
from crawler.testing.web import PROFILES, SyntheticWeb, canonical_path_qs

__all__ = ["RequestRecord", "WebServer", "main", "serve_forever"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One request as the server saw it.

    ``host``: Host header without port, lower-cased. ``path_qs``: the raw request target
    (path and query, escapes as sent). ``start``/``end``: ``time.monotonic()`` when the
    handler began and when the response was written (or the client went away: status
    499). ``headers``: request headers (the last value of a repeated header).
    ``body_bytes``: the response body's length as sent (0 for a 304). ``client``: the
    address the request came from (a region's source address in the region tests).
    """

    host: str
    path_qs: str
    method: str
    start: float
    end: float
    status: int
    user_agent: str
    headers: dict[str, str] = field(default_factory=dict)
    body_bytes: int = 0
    client: str = ""


def _strip_port(host: str) -> str:
    host = host.strip().lower()
    if host.startswith("["):  # [::1]:8080
        return host[: host.find("]") + 1]
    return host.partition(":")[0]


class WebServer(LoopThreadServer):
    """A running synthetic web: ``with WebServer(web) as srv: ... srv.requests()``.

    ``port=0`` takes an ephemeral port; :meth:`start` binds, then calls ``web.bind(port)``
    so every URL the web hands out carries it. The per-URL request counters that drive
    "503 once, then 200" live here; :meth:`reset` clears them and the log between crawls.
    """

    thread_name = "synthetic-web"

    def __init__(self, web: SyntheticWeb, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__()
        self.web = web
        # A web whose reply() takes the request headers sees them (conditional requests),
        # one that takes ``client`` the client's address (crawler.testing.regionweb).
        params = inspect.signature(web.reply).parameters
        self._wants_headers = "headers" in params
        self._wants_client = "client" in params
        self.host = host
        self._want_port = port
        self.port: int = 0
        self._lock = threading.Lock()
        self._log: list[RequestRecord] = []
        self._attempts: dict[tuple[str, str], int] = {}
        self._active: dict[str, int] = {}
        self._generation = 0  # bumped by reset(): a request begun before it is not logged

    async def _serve(self) -> None:
        self._stop_event = asyncio.Event()
        # access_log=None: no per-request logging cost; handler_cancellation: a client
        # that gives up on a stalled page frees its handler at once.
        server = aioweb.Server(self._handle, handler_cancellation=True, access_log=None)
        runner = aioweb.ServerRunner(server, shutdown_timeout=0.2)
        await runner.setup()
        try:
            site = aioweb.TCPSite(runner, self.host, self._want_port, backlog=1024)
            await site.start()
            sock = site._server.sockets[0]  # type: ignore[union-attr]  # started: aiohttp's server is set
            self.port = sock.getsockname()[1]
            self.web.bind(self.port)
            self._ready.set()
            await self._stop_event.wait()
        finally:
            await runner.cleanup()

    # --------------------------------------------------------------------- serving

    async def _handle(self, request: aioweb.BaseRequest) -> aioweb.StreamResponse:
        start = time.monotonic()
        host = _strip_port(request.headers.get("Host", ""))
        path_qs = request.raw_path
        client = request.remote or ""
        key = (host, canonical_path_qs(path_qs))
        with self._lock:
            generation = self._generation
            attempt = self._attempts.get(key, 0) + 1
            self._attempts[key] = attempt
            self._active[host] = self._active.get(host, 0) + 1
        status = 499
        sent = 0
        try:
            kw: dict[str, Any] = {"headers": dict(request.headers)} if self._wants_headers else {}
            if self._wants_client:
                kw["client"] = client
            reply = self.web.reply(host, path_qs, attempt=attempt,
                                   accept_gzip="gzip" in request.headers.get("Accept-Encoding", ""), **kw)
            sent = len(reply.body)
            if reply.delay:
                await asyncio.sleep(reply.delay)
            if reply.chunk_size:
                resp = aioweb.StreamResponse(status=reply.status, headers=dict(reply.headers))
                resp.enable_chunked_encoding()
                await resp.prepare(request)
                body = reply.body
                for i in range(0, len(body), reply.chunk_size):
                    await resp.write(body[i:i + reply.chunk_size])
                await resp.write_eof()
                status = reply.status
                return resp
            status = reply.status
            return aioweb.Response(status=reply.status, headers=dict(reply.headers), body=reply.body)
        finally:
            rec = RequestRecord(host, path_qs, request.method, start, time.monotonic(), status,
                                request.headers.get("User-Agent", ""), dict(request.headers), sent,
                                client)
            with self._lock:
                if generation == self._generation:
                    self._log.append(rec)
                self._active[host] -= 1

    # ------------------------------------------------------------------------ views

    @property
    def log(self) -> list[RequestRecord]:
        """A snapshot of the request log (same as :meth:`requests`)."""
        return self.requests()

    def requests(self, host: str | None = None) -> list[RequestRecord]:
        """A thread-safe snapshot of the log, optionally for one host."""
        with self._lock:
            recs = list(self._log)
        return recs if host is None else [r for r in recs if r.host == host]

    def request_counts(self) -> dict[str, int]:
        """Canonical URL -> number of requests (what a test compares with the ground truth)."""
        out: dict[str, int] = {}
        for r in self.requests():
            u = self.web.url(r.host, canonical_path_qs(r.path_qs))
            out[u] = out.get(u, 0) + 1
        return out

    def in_flight(self, host: str | None = None) -> int:
        """Requests being handled right now (for one host, or all)."""
        with self._lock:
            return self._active.get(host, 0) if host is not None else sum(self._active.values())

    def reset(self) -> None:
        """Forget the log and the per-URL attempt counters (503-once fails once again).

        A request still being handled (a stalled page whose client gave up, a crawl that
        was killed) belongs to what came before: it is not logged when it ends, so it
        cannot turn up in the next test's log."""
        with self._lock:
            self._generation += 1
            self._log.clear()
            self._attempts.clear()

    def url(self, host: str, path: str = "/") -> str:
        """``http://host:port/path`` on this server."""
        return f"http://{host}:{self.port}{path}"

    def resolve_line(self) -> str:
        """The crawl config line that routes the web's names here."""
        return f'fetch.resolve={{"*.test": "{self.host}"}}'


def serve_forever(profile: str = "demo", seed: int = 0, host: str = "127.0.0.1", port: int = 8080,
                  hosts: int | None = None, out: Callable[[str], None] = print) -> None:
    """Serve a synthetic web until Ctrl-C, printing its seeds and the resolve setting."""
    web = SyntheticWeb(seed=seed, profile=profile, hosts=hosts)
    with WebServer(web, host=host, port=port) as srv:
        out(f"synthetic web '{profile}' (seed {seed}): {len(web.hosts())} hosts on {host}:{srv.port}")
        out("seeds:")
        for s in web.seeds():
            out(f"  {s}")
        out("crawl it with:")
        out(f"  --set '{srv.resolve_line()}' --set 'seeds={json.dumps(web.seeds())}' --set scope=any")
        out("Ctrl-C stops.")
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            out("stopping")


def main(argv: list[str] | None = None) -> int:
    """``python -m crawler.testing.server [--profile P] [--seed N] [--port N] [--host IP]``."""
    ap = argparse.ArgumentParser(prog="python -m crawler.testing.server", description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", choices=sorted(PROFILES), default="demo")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    ap.add_argument("--port", type=int, default=8080, help="0 picks a free port")
    ap.add_argument("--hosts", type=int, default=None, help="number of normal hosts (default: the profile's)")
    args = ap.parse_args(argv)
    try:
        serve_forever(args.profile, args.seed, args.host, args.port, args.hosts)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
