"""Test doubles for the network seams (like trio.testing): nothing here opens a socket.

:class:`FakeResolver` stands in for DNS under the real transport; :class:`FakeTransport`
stands in for the whole wire under :class:`crawler.fetch.fetcher.Fetcher`, on an injected clock.
"""

from __future__ import annotations

import asyncio
import math
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp.abc import AbstractResolver, ResolveResult

from crawler.clock import Clock
from crawler.fetch.transport import ConnectError, Request


class FakeResolver(AbstractResolver):
    """A base DNS resolver that answers from a table and counts calls.

    Unknown names raise ``OSError`` (like NXDOMAIN), so a crawl under test that meets a
    name nobody mapped fails that name instead of sending a query off the machine.
    """

    def __init__(self, table: dict[str, list[str]] | None = None, gate: asyncio.Event | None = None) -> None:
        self.table = dict(table or {})
        self.calls: list[str] = []
        self.gate = gate  # when set, every lookup waits for it (to test concurrent lookups)

    async def resolve(self, host: str, port: int = 0, family: int = socket.AF_INET) -> list[ResolveResult]:
        self.calls.append(host)
        if self.gate is not None:
            await self.gate.wait()
        ips = self.table.get(host)
        if ips is None:
            raise OSError(f"fake resolver: no such name {host} (NXDOMAIN)")
        return [
            {
                "hostname": host,
                "host": ip,
                "port": port,
                "family": socket.AF_INET6 if ":" in ip else socket.AF_INET,
                "proto": 0,
                "flags": 0,
            }
            for ip in ips
        ]

    async def close(self) -> None:
        return None


# ------------------------------------------------------------------------ transport


@dataclass
class FakeResponse:
    """What :class:`FakeTransport` answers for one request (times in seconds of its clock).

    ``error`` is raised instead of a response, after ``headers_delay``: a failure before
    headers such as ``ConnectError()``, ``ConnectTimeout()``, ``ConnectionReset()``,
    ``DnsLookupError("a.test", "NXDOMAIN")``, ``AddressRefused(ip, reason)`` or a plain
    ``ConnectionResetError()``. ``body_error`` is raised after the last chunk (a reset
    mid-body). ``math.inf`` as a delay means "never": the fetcher's deadline ends it.
    The same exception instance is raised every time this response is used.
    """

    status: int = 200
    headers: Mapping[str, str] | Sequence[tuple[str, str]] = ()  # pairs keep repeated names
    body: bytes | Sequence[bytes] = b""  # bytes: one chunk; a sequence: chunk by chunk
    headers_delay: float = 0.0  # before the status line and headers arrive
    chunk_delay: float = 0.0  # before each body chunk
    end_delay: float = 0.0  # after the last chunk, before the end (or body_error)
    error: BaseException | None = None
    body_error: BaseException | None = None
    peer: str | None = None  # FetchResult.ip


# The default answer of FakeTransport: one shared instance, as a default argument would be.
_NOT_FOUND = FakeResponse(404)


@dataclass
class SentRequest:
    """One request a :class:`FakeTransport` received, with the clock times it was open."""

    url: str
    headers: dict[str, str]
    at: float  # clock time of send
    closed_at: float | None = None  # clock time the fetcher closed the response or it failed
    reusable: bool | None = None  # the fetcher read the body to its end (None: no response)


#: What a FakeTransport answers from: URL -> response(s), or a function of the request.
Script = Mapping[str, FakeResponse | Sequence[FakeResponse]] | Callable[[Request], FakeResponse]


class FakeTransport:
    """A :class:`crawler.fetch.transport.Transport` that answers from a script; no sockets.

    ``script`` maps a URL (exactly as passed to ``Fetcher.fetch``) to a
    :class:`FakeResponse`, or to a list of them used one per request in order (the last
    one repeats: ``[FakeResponse(503), FakeResponse(200, body=b"ok")]`` is a retry that
    succeeds); or it is a callable ``request -> FakeResponse``. URLs not in the script get
    ``default`` (a 404: for ``/robots.txt`` that means "no rules", RFC 9309 2.3.1.3); with
    ``default=None`` they fail as a connection error. Every request is recorded in
    :attr:`requests`. Delays run on ``clock``: give it the fetcher's ``MockClock`` and
    drive the test with ``MockClock.run_until``, so nothing sleeps::

        clock = MockClock()
        fake = FakeTransport({"http://a.test/": FakeResponse(body=b"hi")}, clock=clock)
        fetcher = Fetcher(user_agent=UA, transport=fake, clock=clock)
    """

    def __init__(
        self,
        script: Script | None = None,
        *,
        clock: Clock,
        default: FakeResponse | None = _NOT_FOUND,
    ) -> None:
        self.script: Script = script if script is not None else {}  # may be changed between fetches
        self._clock = clock
        self.default = default
        self.requests: list[SentRequest] = []
        self._used: dict[str, int] = {}
        self.closed = False

    def urls(self) -> list[str]:
        """The URLs requested, in order."""
        return [r.url for r in self.requests]

    def _response_for(self, request: Request) -> FakeResponse | None:
        script = self.script
        if callable(script):
            return script(request)
        entry = script.get(request.url)
        if entry is None or isinstance(entry, FakeResponse):
            return entry if entry is not None else self.default
        i = self._used.get(request.url, 0)
        self._used[request.url] = i + 1
        return entry[min(i, len(entry) - 1)]

    async def send(self, request: Request) -> _FakeStream:
        """Record the request, wait ``headers_delay``, then answer or raise ``error``."""
        record = SentRequest(request.url, dict(request.headers), self._clock.now())
        self.requests.append(record)
        answered = False
        try:
            spec = self._response_for(request)
            if spec is None:
                raise ConnectError(f"connect: no script for {request.url} (FakeTransport)")
            await _pause(self._clock, spec.headers_delay)
            if spec.error is not None:
                raise spec.error
            answered = True
            return _FakeStream(spec, self._clock, record)
        finally:
            if not answered:
                record.closed_at = self._clock.now()

    async def close(self) -> None:
        """Mark the transport closed (the fetcher refuses to fetch after close)."""
        self.closed = True

    def stats(self) -> dict[str, Any]:
        """``{"requests": n}``."""
        return {"requests": len(self.requests)}


class _FakeStream:
    """The :class:`crawler.fetch.transport.Response` of a :class:`FakeResponse`."""

    def __init__(self, spec: FakeResponse, clock: Clock, record: SentRequest) -> None:
        self.status = spec.status
        headers = spec.headers
        self.headers: list[tuple[str, str]] = list(headers.items() if isinstance(headers, Mapping) else headers)
        self.peer = spec.peer
        body = spec.body
        self._chunks: list[bytes] = ([body] if body else []) if isinstance(body, bytes) else list(body)
        self._spec = spec
        self._clock = clock
        self._record = record
        self._next = 0
        self._ended = False

    async def read(self) -> bytes:
        spec = self._spec
        if self._next < len(self._chunks):
            await _pause(self._clock, spec.chunk_delay)
            chunk = self._chunks[self._next]
            self._next += 1
            return chunk
        if not self._ended:
            await _pause(self._clock, spec.end_delay)
            self._ended = True
            if spec.body_error is not None:
                raise spec.body_error
        return b""

    def failure(self) -> None:
        return None

    def close(self, reusable: bool) -> None:
        self._record.closed_at = self._clock.now()
        self._record.reusable = reusable


async def _pause(clock: Clock, seconds: float) -> None:
    if seconds <= 0:
        return
    if math.isinf(seconds):
        await asyncio.get_running_loop().create_future()  # never done: only a cancel ends it
    await clock.sleep(seconds)
