"""The synthetic web (crawler.testing.web) served to simulated processes, with its own log.

Each shard incarnation fetches through a :class:`SimTransport` (the fetcher's transport
seam, crawler.fetch.transport): no sockets, the server's delays on the simulation's true
clock, and every request written to the web's log with the true times the *server* saw
it start and end and the process that sent it. The checker judges politeness, robots and
"each page once" from that log alone, as the integration tests judge a crawl from the
loopback server's log (tests/integration/checks.py).

A stopped process sends nothing and reads its response only once it continues; a dead one
never does, and the server sees it hang up (its kernel closed the connection) unless its
machine went dark, when the server's request runs its course; a partitioned machine still
reaches the web (the partition is inside the cluster).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from crawler.clock import MockClock
from crawler.fetch.transport import ConnectError, Request, TransportError
from crawler.testing.sim.nodes import Process
from crawler.testing.web import SyntheticWeb


@dataclass
class WebRequest:
    """One request as the server saw it (true simulated times)."""

    url: str  # canonical: http://host/path_qs
    host: str
    path_qs: str
    start: float
    end: float | None
    status: int | None
    process: str
    sent: float = 0.0  # when the process sent it (before the trip to the server)


class _Response:
    """A :class:`crawler.fetch.transport.Response` of one reply, body in one chunk."""

    def __init__(self, status: int, headers: tuple[tuple[str, str], ...], body: bytes) -> None:
        self.status = status
        self.headers = list(headers)
        self.peer = "192.0.2.1"
        self._body = body

    async def read(self) -> bytes:
        body, self._body = self._body, b""
        return body

    def failure(self) -> TransportError | None:
        return None

    def close(self, reusable: bool) -> None:
        """Nothing to give back."""


class SimWeb:
    """A :class:`SyntheticWeb` served on simulated time, with the server's request log.

    Args:
        web: the pages and the ground truth.
        clock: the simulation's true clock.
        rng: draws network latency.
        latency_s: (low, high) one-way network latency.
    """

    def __init__(self, web: SyntheticWeb, clock: MockClock, rng: random.Random, *,
                 latency_s: tuple[float, float] = (0.002, 0.02)) -> None:
        self.web = web
        self.clock = clock
        self.rng = rng
        self.latency_s = latency_s
        self.log: list[WebRequest] = []
        self._attempts: dict[tuple[str, str], int] = {}
        self.slow_s = 0.0  # added to every reply while the nemesis slows the web

    def transport(self, process: Process) -> "SimTransport":
        return SimTransport(self, process)

    def _latency(self) -> float:
        lo, hi = self.latency_s
        return self.rng.uniform(lo, hi)

    async def serve(self, process: Process, request: Request) -> _Response:
        await process.alive()
        split = self.web.split(request.url)
        if split is None:
            raise ConnectError(f"simulated web: cannot route {request.url!r}")
        host, path_qs = split
        sent = self.clock.now()
        closed: list[bool] = []  # the process died while its request was on its way
        forget_early = process.on_hangup(lambda: closed.append(True))
        try:
            await self.clock.sleep(self._latency())  # the request on its way
        finally:
            forget_early()
        rec = WebRequest(f"http://{host}{path_qs}", host, path_qs, self.clock.now(), None, None, process.name, sent)
        self.log.append(rec)
        if closed:  # it arrives on a connection already closed: the server drops it at once
            rec.end, rec.status = rec.start, 499
            await process.alive()  # dead: never returns
        key = (host, path_qs)
        attempt = self._attempts[key] = self._attempts.get(key, 0) + 1
        reply = self.web.reply(host, path_qs, attempt=attempt,
                               accept_gzip="gzip" in request.headers.get("Accept-Encoding", ""))
        delay = reply.delay + self.slow_s

        def hung_up() -> None:  # the client hung up (its task ended, or its process died): the server stops too
            if rec.end is None:
                rec.end, rec.status = self.clock.now(), 499

        forget = process.on_hangup(hung_up)
        try:
            if delay:
                await self.clock.sleep(delay)
        except BaseException:
            hung_up()
            raise
        finally:
            forget()
        if rec.end is not None:  # hung up while the server worked: nobody reads the answer
            await process.alive()
        rec.end, rec.status = self.clock.now(), reply.status
        await self.clock.sleep(self._latency())  # the response on its way back
        await process.alive()  # read when the process runs again
        return _Response(reply.status, reply.headers, reply.body)

    # -- views for the checker ---------------------------------------------------------

    def requests_by_url(self) -> dict[str, list[WebRequest]]:
        by: dict[str, list[WebRequest]] = {}
        for r in self.log:
            by.setdefault(r.url, []).append(r)
        return by


class SimTransport:
    """One process's way to the simulated web (crawler.fetch.transport.Transport)."""

    def __init__(self, web: SimWeb, process: Process) -> None:
        self._web = web
        self._process = process

    async def send(self, request: Request) -> Any:
        return await self._web.serve(self._process, request)

    async def close(self) -> None:
        """Nothing to close."""

    def stats(self) -> dict[str, Any]:
        return {}
