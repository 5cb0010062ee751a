"""The HTTP fetcher against servers these tests start on 127.0.0.1 / ::1.

Traffic rule, enforced by the autouse ``_loopback_only`` fixture: sockets may connect
only to loopback, and no real DNS query is made (every Fetcher gets a fake base
resolver). Guard tests for non-loopback ranges go through a fake connector whose socket
factory records the address it was asked to reach and refuses without creating a socket.
"""

from __future__ import annotations

import asyncio
import errno
import gzip
import ipaddress
import socket
import struct
import tracemalloc
import zlib
from collections.abc import Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver

from crawler.clock import MockClock
from crawler.testing.fakes import FakeResolver
from crawler.fetch.addrguard import AddressRefused
from crawler.errors import ConfigError
from crawler.fetch.fetcher import FetchResult, Fetcher, classify

UA = "raycrawl-test/1.0 (+https://example.invalid/bot)"
PAGE = b"<html><body>" + b"<p>hello crawler</p>" * 1000 + b"</body></html>"


# ----------------------------------------------------------------- safety and fakes


@pytest.fixture(autouse=True)
def _loopback_only(monkeypatch):
    """Fail the test if anything tries to reach a non-loopback address or real DNS."""
    from asyncio import selector_events

    real_sock_connect = selector_events.BaseSelectorEventLoop.sock_connect
    real_getaddrinfo = socket.getaddrinfo

    async def sock_connect(self, sock, address):
        host = address[0]
        if not ipaddress.ip_address(host.split("%")[0]).is_loopback:
            raise AssertionError(f"test tried to connect to non-loopback {address!r}")
        return await real_sock_connect(self, sock, address)

    def getaddrinfo(host, *args, **kwargs):
        if host is not None:
            try:
                ipaddress.ip_address(host if isinstance(host, str) else host.decode())
            except ValueError:
                raise AssertionError(f"test tried a real DNS lookup of {host!r}") from None
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(selector_events.BaseSelectorEventLoop, "sock_connect", sock_connect)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


class RecordingConnector:
    """connector_factory whose sockets are never created: it records and refuses.

    The fetcher's own guarded socket factory is still consulted first, so a refused
    address never even reaches the recorder.
    """

    def __init__(self, swap_resolver: AbstractResolver | None = None) -> None:
        self.attempts: list[tuple[str, int]] = []
        self.swap_resolver = swap_resolver

    def __call__(self, **kwargs):
        guarded = kwargs.pop("socket_factory")
        if self.swap_resolver is not None:  # bypass DnsCache to exercise the last line
            kwargs["resolver"] = self.swap_resolver

        def refuse(addr_info):
            guarded.check(addr_info)
            self.attempts.append((addr_info[4][0], addr_info[4][1]))
            raise ConnectionRefusedError(errno.ECONNREFUSED, "fake connector: refused, no packet sent")

        return aiohttp.TCPConnector(socket_factory=refuse, **kwargs)


def make_fetcher(**kw) -> Fetcher:
    kw.setdefault("user_agent", UA)
    kw.setdefault("resolve", {"site.test": "127.0.0.1", "*.site.test": "127.0.0.1"})
    kw.setdefault("base_resolver", FakeResolver())
    return Fetcher(**kw)


@pytest.fixture
async def fetcher():
    f = make_fetcher()
    yield f
    await f.close()


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


# -------------------------------------------------------------- the aiohttp server


def _gzip_bomb_parts() -> tuple[bytes, bytes]:
    # With a full flush after each block, every 1 MiB block of zeros after the first
    # compresses to the same ~1 KB: the stream for 1 GiB is built without 1 GiB anywhere.
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = bytes(1 << 20)
    first = c.compress(block) + c.flush(zlib.Z_FULL_FLUSH)
    repeat = c.compress(block) + c.flush(zlib.Z_FULL_FLUSH)
    return first, repeat


BOMB_FIRST, BOMB_REPEAT = _gzip_bomb_parts()


class Site:
    """An aiohttp app on 127.0.0.1 (and ::1 when available) with a request log."""

    def __init__(self) -> None:
        self.log: list[tuple[str, str, dict[str, str]]] = []  # (host header, path, headers)
        self.port = 0
        self.bomb_bytes_sent = 0
        self._runner: web.AppRunner | None = None

    def paths(self) -> list[str]:
        return [p for _, p, _ in self.log]

    async def start(self, v6: bool = False) -> None:
        app = web.Application(middlewares=[self._record])
        app.router.add_get("/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]
        if v6:
            await web.TCPSite(self._runner, "::1", self.port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @web.middleware
    async def _record(self, request, handler):
        self.log.append((request.host, request.path, dict(request.headers)))
        return await handler(request)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        if path == "/ok":
            resp = web.Response(body=PAGE, content_type="text/html", charset="utf-8")
            resp.headers.add("X-Multi", "a")
            resp.headers.add("X-Multi", "b")
            return resp
        if path == "/gzip":
            return web.Response(body=gzip.compress(PAGE), headers={"Content-Encoding": "gzip"})
        if path == "/multigzip":  # two gzip members: one body (RFC 1952 2.2)
            body = gzip.compress(PAGE[:100]) + gzip.compress(PAGE[100:])
            return web.Response(body=body, headers={"Content-Encoding": "x-gzip"})
        if path == "/deflate":  # zlib-wrapped, as RFC 9110 says
            return web.Response(body=zlib.compress(PAGE), headers={"Content-Encoding": "deflate"})
        if path == "/rawdeflate":  # raw deflate, as many servers send
            c = zlib.compressobj(wbits=-15)
            return web.Response(body=c.compress(PAGE) + c.flush(), headers={"Content-Encoding": "deflate"})
        if path == "/brokengzip":  # valid first half, then a block of invalid type 3
            c = zlib.compressobj(6, zlib.DEFLATED, 31)
            good = c.compress(PAGE[:10_000]) + c.flush(zlib.Z_FULL_FLUSH)
            return web.Response(body=good + b"\x07garbage" * 100, headers={"Content-Encoding": "gzip"})
        if path == "/truncgzip":  # gzip stream without its end: the server stopped early
            return web.Response(body=gzip.compress(PAGE)[:-30], headers={"Content-Encoding": "gzip"})
        if path == "/br":
            return web.Response(body=b"\x8b\x02\x80raw-brotli-bytes", headers={"Content-Encoding": "br"})
        if path == "/big":
            return web.Response(body=b"x" * 100_000)
        if path == "/endless":
            endless = web.StreamResponse()
            await endless.prepare(request)
            chunk = b"y" * 65536
            for _ in range(3000):  # up to ~200 MB, far more than any test reads
                await endless.write(chunk)
            return endless
        if path == "/bomb":
            bomb = web.StreamResponse(headers={"Content-Encoding": "gzip", "Content-Type": "text/html"})
            await bomb.prepare(request)
            await bomb.write(BOMB_FIRST)
            self.bomb_bytes_sent = len(BOMB_FIRST)
            for _ in range(1023):  # 1 GiB of zeros once inflated
                await bomb.write(BOMB_REPEAT)
                self.bomb_bytes_sent += len(BOMB_REPEAT)
            return bomb
        if path == "/moved":
            raise web.HTTPMovedPermanently(location="/ok")
        if path == "/to-loopback":  # a permitted host redirecting to a forbidden one
            raise web.HTTPFound(location=f"http://127.0.0.1:{self.port}/secret")
        if path == "/etag":
            if request.headers.get("If-None-Match") == '"v1"':
                return web.Response(status=304, headers={"ETag": '"v1"', "Content-Encoding": "gzip"})
            return web.Response(body=b"fresh", headers={"ETag": '"v1"'})
        if path == "/missing":
            return web.Response(status=404, text="not here")
        if path == "/slow-down":
            return web.Response(status=429, headers={"Retry-After": "30"})
        if path == "/unavailable":
            return web.Response(status=503)
        if path == "/gone":
            return web.Response(status=410)
        if path == "/secret":
            return web.Response(text="you should not see this")
        return web.Response(status=404)


@pytest.fixture
async def site():
    s = Site()
    await s.start()
    yield s
    await s.stop()


# ------------------------------------------------------------------ raw TCP servers


Behaviour = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class RawServer:
    """asyncio server on 127.0.0.1 that reads a request head and runs ``behaviour``."""

    def __init__(self, behaviour: Behaviour, read_request: bool = True) -> None:
        self.behaviour = behaviour
        self.read_request = read_request
        self.requests: list[bytes] = []
        self.tasks: set[asyncio.Task] = set()
        self.port = 0

    async def _handle(self, reader, writer):
        task = asyncio.current_task()
        self.tasks.add(task)
        try:
            if self.read_request:
                self.requests.append(await reader.readuntil(b"\r\n\r\n"))
            await self.behaviour(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client hung up: expected in most of these tests
        except asyncio.CancelledError:
            pass  # teardown cancels handlers that are still trickling or silent
        finally:
            writer.close()
            self.tasks.discard(task)

    async def __aenter__(self) -> RawServer:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc) -> None:
        self.server.close()
        for t in list(self.tasks):
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    @property
    def url(self) -> str:
        return f"http://site.test:{self.port}/"


def _reset(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()  # RST instead of FIN


# ======================================================================= responses


async def test_200_body_headers_ip_timing_and_request_headers(site):
    clock = MockClock(5000.0)
    f = make_fetcher(clock=clock)
    try:
        r = await f.fetch(f"http://site.test:{site.port}/ok",
                          headers={"If-None-Match": '"x"', "If-Modified-Since": "Tue, 01 Oct 2024 00:00:00 GMT"})
    finally:
        await f.close()
    assert r.status == 200 and r.error is None and r.error_kind is None and not r.transient
    assert r.body == PAGE and not r.truncated
    assert r.headers["x-multi"] == "a, b"  # repeated headers joined
    assert r.headers["content-length"] == str(len(PAGE))
    assert r.content_type == "text/html"
    assert r.ip == "127.0.0.1"
    assert r.started_at == r.headers_at == r.finished_at == clock.now() == 5000.0  # all from the injected clock
    assert classify(r) == "ok"
    host, path, sent = site.log[0]
    assert path == "/ok" and host == f"site.test:{site.port}"
    assert sent["User-Agent"] == UA
    assert sent["Accept-Encoding"] == "gzip, deflate"
    assert sent["If-None-Match"] == '"x"' and sent["If-Modified-Since"].startswith("Tue, 01 Oct 2024")
    assert "Cookie" not in sent


async def test_real_clock_orders_timestamps(fetcher, site):
    r = await fetcher.fetch(f"http://site.test:{site.port}/big")
    assert r.started_at <= r.headers_at <= r.finished_at


@pytest.mark.parametrize("path", ["/gzip", "/multigzip", "/deflate", "/rawdeflate"])
async def test_compressed_bodies_are_decoded(fetcher, site, path):
    r = await fetcher.fetch(f"http://site.test:{site.port}{path}")
    assert r.status == 200 and r.error is None
    assert r.body == PAGE and not r.truncated


async def test_gzip_bomb_is_cut_with_bounded_memory(site):
    f = make_fetcher(max_body_bytes=2_000_000)
    try:
        tracemalloc.start()
        r = await f.fetch(f"http://site.test:{site.port}/bomb")
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    finally:
        await f.close()
    assert r.status == 200 and r.truncated and r.error is None
    assert len(r.body) == 2_000_000 and r.body.count(0) == 2_000_000
    assert peak < 40_000_000, f"peak {peak} bytes: the bomb was inflated, not cut"
    assert classify(r) == "ok"
    # The body was cut at the limit, not when the server had finished its 1 GiB.
    assert f.stats()["wire_bytes"] < len(BOMB_FIRST) + 1023 * len(BOMB_REPEAT)


async def test_max_body_bytes_truncates(site):
    f = make_fetcher(max_body_bytes=10_000)
    try:
        r = await f.fetch(f"http://site.test:{site.port}/big")
        again = await f.fetch(f"http://site.test:{site.port}/ok")  # the pool still works
    finally:
        await f.close()
    assert r.status == 200 and r.truncated and r.body == b"x" * 10_000 and r.error is None
    assert again.status == 200 and again.body == PAGE[:10_000] and again.truncated


async def test_endless_body_is_truncated(site):
    f = make_fetcher(max_body_bytes=1_000_000, timeout_s=5.0)
    try:
        r = await f.fetch(f"http://site.test:{site.port}/endless")
    finally:
        await f.close()
    assert r.status == 200 and r.truncated and len(r.body) == 1_000_000 and r.error is None


async def test_redirect_is_not_followed(fetcher, site):
    r = await fetcher.fetch(f"http://site.test:{site.port}/moved")
    assert r.status == 301 and r.headers["location"] == "/ok"
    assert classify(r) == "redirect"
    assert site.paths() == ["/moved"]


async def test_conditional_request_gets_304(fetcher, site):
    url = f"http://site.test:{site.port}/etag"
    first = await fetcher.fetch(url)
    assert first.status == 200 and first.headers["etag"] == '"v1"'
    r = await fetcher.fetch(url, headers={"If-None-Match": first.headers["etag"]})
    assert r.status == 304 and r.body == b"" and r.error is None  # no "broken gzip" for an empty body
    assert classify(r) == "not_modified"


@pytest.mark.parametrize(
    "path, status, transient, outcome",
    [
        ("/missing", 404, False, "permanent"),
        ("/gone", 410, False, "permanent"),
        ("/slow-down", 429, True, "transient"),
        ("/unavailable", 503, True, "transient"),
    ],
)
async def test_http_errors(fetcher, site, path, status, transient, outcome):
    r = await fetcher.fetch(f"http://site.test:{site.port}{path}")
    assert r.status == status and r.transient is transient and r.error is None
    assert classify(r) == outcome
    if status == 429:
        assert r.headers["retry-after"] == "30"


async def test_broken_gzip_keeps_decoded_prefix(fetcher, site):
    r = await fetcher.fetch(f"http://site.test:{site.port}/brokengzip")
    assert r.status == 200 and r.error_kind == "decode" and r.error.startswith("broken gzip stream")
    assert not r.transient and r.body == PAGE[:10_000]  # what decoded before the damage
    assert classify(r) == "ok"


async def test_truncated_gzip_is_a_decode_error(fetcher, site):
    r = await fetcher.fetch(f"http://site.test:{site.port}/truncgzip")
    assert r.status == 200 and r.error_kind == "decode" and "ended early" in r.error
    assert PAGE.startswith(r.body) and len(r.body) > 0


async def test_unknown_content_encoding_keeps_raw_body(fetcher, site):
    r = await fetcher.fetch(f"http://site.test:{site.port}/br")
    assert r.status == 200 and r.body == b"\x8b\x02\x80raw-brotli-bytes"
    assert r.error_kind == "decode" and "br" in r.error and not r.transient


# ================================================================ hostile servers


async def test_slowloris_body_is_cut_at_total_timeout():
    async def trickle(reader, writer):
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
        for _ in range(1000):
            writer.write(b"x")
            await writer.drain()
            await asyncio.sleep(0.02)

    # The real transport under the real clock: the deadline cuts a live socket. (When it
    # fires, and what it does to a stalled body, is tested on a MockClock in
    # test_fetch_fake.py.)
    async with RawServer(trickle) as srv:
        f = make_fetcher(timeout_s=0.5)
        try:
            r = await f.fetch(srv.url)
        finally:
            await f.close()
    assert r.status == 200 and r.error_kind == "timeout" and r.transient
    assert r.error == "timeout after 0.5s (reading body)"
    assert 0 < len(r.body) < 1000  # partial body kept for diagnostics...
    assert classify(r) == "transient"  # ...but never counted as a page


async def test_trickled_headers_are_cut_at_total_timeout():
    async def trickle_headers(reader, writer):
        writer.write(b"HTTP/1.1 200 OK\r\n")
        for i in range(1000):
            writer.write(b"X-%d: y\r\n" % i)
            await writer.drain()
            await asyncio.sleep(0.05)

    async with RawServer(trickle_headers) as srv:
        f = make_fetcher(timeout_s=0.3)
        try:
            r = await f.fetch(srv.url)
        finally:
            await f.close()
    assert r.status is None and r.error_kind == "timeout" and r.transient
    assert r.headers_at is None and classify(r) == "transient"


async def test_silent_server_times_out():
    async def silent(reader, writer):
        await asyncio.Event().wait()

    async with RawServer(silent, read_request=False) as srv:
        f = make_fetcher(timeout_s=0.3)
        try:
            r = await f.fetch(srv.url)
        finally:
            await f.close()
    assert r.status is None and r.error_kind == "timeout" and r.transient
    assert r.error == "timeout after 0.3s (connecting or waiting for headers)"
    assert classify(r) == "transient"


async def test_reset_mid_body_keeps_status_and_partial_body():
    async def reset_mid_body(reader, writer):
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"z" * 1000)
        await writer.drain()
        await asyncio.sleep(0.05)
        _reset(writer)

    async with RawServer(reset_mid_body) as srv:
        f = make_fetcher()
        try:
            r = await f.fetch(srv.url)
        finally:
            await f.close()
    assert r.status == 200 and r.error == "connection reset" and r.error_kind == "reset"
    assert r.transient and classify(r) == "transient"
    assert r.body == b"z" * 1000


async def test_reset_of_read_until_close_body_is_detected():
    async def reset_eof_body(reader, writer):
        writer.write(b"HTTP/1.0 200 OK\r\n\r\n" + b"z" * 500)
        await writer.drain()
        await asyncio.sleep(0.05)
        _reset(writer)

    async with RawServer(reset_eof_body) as srv:
        f = make_fetcher()
        try:
            r = await f.fetch(srv.url)
        finally:
            await f.close()
    assert r.status == 200 and r.error_kind == "reset" and r.transient


async def test_reset_before_headers():
    async def reset_now(reader, writer):
        _reset(writer)

    async with RawServer(reset_now) as srv:
        f = make_fetcher()
        try:
            r = await f.fetch(srv.url)
        finally:
            await f.close()
    assert r.status is None and r.error_kind == "reset" and r.transient


async def test_close_before_headers():
    async def close_now(reader, writer):
        writer.close()

    async with RawServer(close_now) as srv:
        f = make_fetcher()
        try:
            r = await f.fetch(srv.url)
        finally:
            await f.close()
    assert r.status is None and r.error_kind == "reset" and r.transient


async def test_lying_content_length():
    async def short_body(reader, writer):
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n" + b"s" * 100)
        await writer.drain()
        writer.close()

    async with RawServer(short_body) as srv:
        f = make_fetcher()
        try:
            r = await f.fetch(srv.url)
        finally:
            await f.close()
    assert r.status == 200 and r.error_kind == "protocol"
    assert r.error.startswith("content-length mismatch") and r.transient
    assert r.body == b"s" * 100 and classify(r) == "transient"


async def test_invalid_chunked_encoding():
    async def bad_chunk(reader, writer):
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nZZZ\r\nxx\r\n0\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(0.2)

    async with RawServer(bad_chunk) as srv:
        f = make_fetcher()
        try:
            r = await f.fetch(srv.url)
        finally:
            await f.close()
    assert r.error == "invalid chunked encoding" and r.error_kind == "protocol" and not r.transient
    assert classify(r) == "failed"


async def test_invalid_chunk_after_first_body_bytes():
    # aiohttp 3.14 does not wake the body reader in this case; the fetch ends at the
    # total timeout but is still reported as the protocol error it is.
    async def bad_chunk_later(reader, writer):
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(b"ZZZ\r\nxx\r\n0\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(1)

    async with RawServer(bad_chunk_later) as srv:
        f = make_fetcher(timeout_s=0.3)
        try:
            r = await f.fetch(srv.url)
        finally:
            await f.close()
    assert r.status == 200 and r.body == b"hello"
    assert r.error == "invalid chunked encoding" and r.error_kind == "protocol" and not r.transient


async def test_truncated_chunked_body():
    async def cut_chunk(reader, writer):
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n10\r\nabc")
        await writer.drain()
        writer.close()

    async with RawServer(cut_chunk) as srv:
        f = make_fetcher()
        try:
            r = await f.fetch(srv.url)
        finally:
            await f.close()
    assert r.status == 200 and r.error_kind == "protocol" and "truncated chunked" in r.error and r.transient


async def test_one_megabyte_header_block():
    async def huge_header(reader, writer):
        writer.write(b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * (1 << 20) + b"\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()

    async with RawServer(huge_header) as srv:
        f = make_fetcher()
        try:
            r = await f.fetch(srv.url)
        finally:
            await f.close()
    assert r.status is None and r.error == "header too large"
    assert r.error_kind == "protocol" and not r.transient and classify(r) == "failed"


async def test_too_many_headers():
    async def many_headers(reader, writer):
        writer.write(b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-%d: a\r\n" % i for i in range(1000)) + b"Content-Length: 0\r\n\r\n")
        await writer.drain()

    async with RawServer(many_headers) as srv:
        f = make_fetcher()
        try:
            r = await f.fetch(srv.url)
        finally:
            await f.close()
    assert r.error == "header too large" and r.error_kind == "protocol"


async def test_invalid_status_line():
    async def bad_status(reader, writer):
        writer.write(b"HTTQ/9 banana\r\n\r\n")
        await writer.drain()

    async with RawServer(bad_status) as srv:
        f = make_fetcher()
        try:
            r = await f.fetch(srv.url)
        finally:
            await f.close()
    assert r.status is None and r.error == "invalid status line"
    assert r.error_kind == "protocol" and not r.transient


async def test_connection_refused_is_transient_connect_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connect is refused
        f = make_fetcher()
        try:
            r = await f.fetch(f"http://site.test:{port}/")
        finally:
            await f.close()
    assert r.status is None and r.error_kind == "connect" and r.transient
    assert r.error == "connect: connection refused" and classify(r) == "transient"


async def test_unresolvable_name_is_dns_error_and_negatively_cached():
    base = FakeResolver()
    clock = MockClock(5000.0)
    f = make_fetcher(base_resolver=base, clock=clock, dns_negative_ttl_s=60)
    try:
        r1 = await f.fetch("http://nx.example/")
        clock.advance(30)
        r2 = await f.fetch("http://nx.example/other")
    finally:
        await f.close()
    for r in (r1, r2):
        assert r.status is None and r.error_kind == "dns" and not r.transient
        assert r.error.startswith("dns: name not resolved") and classify(r) == "failed"
    assert base.calls == ["nx.example"]


@pytest.mark.parametrize(
    "url",
    ["ftp://site.test/", "not a url", "http://", "mailto:x@site.test", "http://127.1/", "http://[::1/", "http://site.test:99999/"],
)
async def test_bad_urls_become_results(fetcher, url):
    r = await fetcher.fetch(url)
    assert r.status is None and r.error_kind in ("url", "guard") and not r.transient
    assert classify(r) == "failed"


async def test_cancellation_propagates():
    async def silent(reader, writer):
        await asyncio.Event().wait()

    async with RawServer(silent, read_request=False) as srv:
        f = make_fetcher(timeout_s=5)
        try:
            task = asyncio.ensure_future(f.fetch(srv.url))
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        finally:
            await f.close()


async def test_fetch_after_close_is_a_retryable_result(site):
    f = make_fetcher()
    await f.fetch(f"http://site.test:{site.port}/ok")
    await f.close()
    await f.close()  # idempotent
    r = await f.fetch(f"http://site.test:{site.port}/ok")
    assert r.status is None and r.error == "fetcher is closed" and r.transient
    assert site.paths() == ["/ok"]


def test_constructor_rejects_bad_config():
    with pytest.raises(ConfigError):
        Fetcher(user_agent="")
    with pytest.raises(ConfigError):
        Fetcher(user_agent="x\r\nInjected: 1")
    with pytest.raises(ConfigError, match="'bad.test'"):
        Fetcher(user_agent="x", resolve={"bad.test": "nope"})
    with pytest.raises(ConfigError):
        Fetcher(user_agent="x", allow_networks=["not-a-net"])
    with pytest.raises(ConfigError):
        Fetcher(user_agent="x", max_body_bytes=0)


# ================================================================== address guard


FORBIDDEN = [
    "169.254.169.254",
    "10.0.0.1",
    "172.16.5.4",
    "192.168.1.1",
    "100.64.0.1",
    "fc00::1",
    "fe80::1",
    "224.0.0.251",
    "ff02::1",
    "0.0.0.0",
    "::",
    "240.0.0.1",
    "::ffff:127.0.0.1",
    "::ffff:169.254.169.254",
    "127.0.0.1",
    "::1",
]


@pytest.mark.parametrize("ip", FORBIDDEN)
async def test_guard_refuses_names_resolving_to_forbidden_ranges(ip):
    seam = RecordingConnector()
    f = make_fetcher(base_resolver=FakeResolver({"evil.example": [ip]}), connector_factory=seam)
    try:
        r = await f.fetch("http://evil.example/latest/meta-data/")
    finally:
        await f.close()
    assert r.error_kind == "guard" and r.status is None and not r.transient
    assert r.error.startswith("refused by address guard: evil.example -> ")
    assert ipaddress.ip_address(r.ip) == ipaddress.ip_address(ip)
    assert seam.attempts == []  # the connector was never asked to reach it
    assert classify(r) == "failed"


@pytest.mark.parametrize("ip", FORBIDDEN)
async def test_guard_refuses_ip_literal_urls(ip):
    seam = RecordingConnector()
    f = make_fetcher(connector_factory=seam)
    host = f"[{ip}]" if ":" in ip else ip
    try:
        r = await f.fetch(f"http://{host}:8080/")
    finally:
        await f.close()
    assert r.error_kind == "guard" and r.error.startswith(f"refused by address guard: {ip} is ") and r.ip == ip
    assert seam.attempts == []


async def test_guard_seam_reaches_connector_for_public_and_allowed_addresses():
    seam = RecordingConnector()
    base = FakeResolver({"public.example": ["93.184.216.34"], "intranet.example": ["10.1.2.3"]})
    f = make_fetcher(base_resolver=base, connector_factory=seam, allow_networks=["10.0.0.0/8"])
    try:
        r1 = await f.fetch("http://public.example/")
        r2 = await f.fetch("http://intranet.example:8080/")
        r3 = await f.fetch("http://10.9.9.9/")  # literal inside allow_networks
        r4 = await f.fetch("http://192.168.0.1/")  # literal outside it
    finally:
        await f.close()
    # The fake connector refused each one without a packet: these are connect errors.
    assert [r.error_kind for r in (r1, r2, r3)] == ["connect", "connect", "connect"]
    assert r4.error_kind == "guard"
    assert seam.attempts == [("93.184.216.34", 80), ("10.1.2.3", 8080), ("10.9.9.9", 80)]


async def test_socket_factory_is_the_last_line_of_defence():
    # A connector whose resolver bypasses DnsCache still cannot reach a private address.
    seam = RecordingConnector(swap_resolver=FakeResolver({"sneaky.example": ["10.0.0.7", "169.254.169.254"]}))
    f = make_fetcher(connector_factory=seam)
    try:
        r = await f.fetch("http://sneaky.example/")
    finally:
        await f.close()
    assert r.error_kind == "guard" and "refused by address guard" in r.error
    assert seam.attempts == []


async def test_dns_rebinding_after_ttl_is_refused():
    seam = RecordingConnector()
    base = FakeResolver({"rebind.example": ["93.184.216.34"]})
    clock = MockClock(5000.0)
    f = make_fetcher(base_resolver=base, connector_factory=seam, clock=clock, dns_ttl_s=10)
    try:
        r1 = await f.fetch("http://rebind.example/")
        base.table["rebind.example"] = ["127.0.0.1"]
        clock.advance(11)
        r2 = await f.fetch("http://rebind.example/")
    finally:
        await f.close()
    assert r1.error_kind == "connect" and r2.error_kind == "guard"
    assert seam.attempts == [("93.184.216.34", 80)]


async def test_guard_disabled_lets_everything_through_the_seam():
    seam = RecordingConnector()
    f = make_fetcher(base_resolver=FakeResolver({"lan.example": ["10.0.0.1"]}), connector_factory=seam, ssrf_guard=False)
    try:
        await f.fetch("http://lan.example/")
        await f.fetch("http://169.254.169.254/")
    finally:
        await f.close()
    assert seam.attempts == [("10.0.0.1", 80), ("169.254.169.254", 80)]


async def test_guard_end_to_end_on_loopback():
    """A real server on loopback: reachable only through a resolve override."""
    v6 = _ipv6_loopback()
    s = Site()
    await s.start(v6=v6)
    base = FakeResolver({"localhost": ["127.0.0.1", "::1"] if v6 else ["127.0.0.1"]})
    f = make_fetcher(base_resolver=base, resolve={"site.test": "127.0.0.1"})
    try:
        p = s.port
        literal = await f.fetch(f"http://127.0.0.1:{p}/secret")
        by_name = await f.fetch(f"http://localhost:{p}/secret")
        other_loopback = await f.fetch(f"http://127.0.0.2:{p}/secret")
        mapped = await f.fetch(f"http://[::ffff:127.0.0.1]:{p}/secret")
        v6_literal = await f.fetch(f"http://[::1]:{p}/secret") if v6 else None
        redirect = await f.fetch(f"http://site.test:{p}/to-loopback")
        followed = await f.fetch(redirect.headers["location"])
        ok = await f.fetch(f"http://site.test:{p}/ok")
    finally:
        await f.close()
        await s.stop()
    refused = [literal, by_name, other_loopback, mapped, followed] + ([v6_literal] if v6 else [])
    for r in refused:
        assert r.error_kind == "guard" and r.status is None, r
    assert literal.error == "refused by address guard: 127.0.0.1 is loopback"
    assert by_name.error == "refused by address guard: localhost -> 127.0.0.1 is loopback"
    assert redirect.status == 302 and classify(redirect) == "redirect"
    assert redirect.headers["location"] == f"http://127.0.0.1:{p}/secret"
    assert ok.status == 200 and ok.body == PAGE and ok.ip == "127.0.0.1"
    # None of the refused requests reached the server; the override name did.
    assert s.paths() == ["/to-loopback", "/ok"]
    assert all(host.startswith("site.test:") for host, _, _ in s.log)
    if not v6:
        pytest.skip("no IPv6 loopback on this host: the [::1] case was not exercised")


async def test_loopback_reachable_via_allow_networks(site):
    f = make_fetcher(allow_networks=["127.0.0.0/8"], resolve={})
    try:
        r = await f.fetch(f"http://127.0.0.1:{site.port}/ok")
    finally:
        await f.close()
    assert r.status == 200 and r.body == PAGE


# ================================================================ classify & stats


def _result(status, kind=None, transient=False, headers=None) -> FetchResult:
    return FetchResult("http://a.test/", status, headers or {}, b"", False, kind and "x", kind, transient, 0.0, None, 0.0, None)


@pytest.mark.parametrize(
    "result, outcome",
    [
        (_result(200), "ok"),
        (_result(204), "ok"),
        (_result(200, "decode"), "ok"),
        (_result(200, "reset", True), "transient"),
        (_result(200, "protocol", False), "failed"),
        (_result(301, headers={"location": "/x"}), "redirect"),
        (_result(308, headers={"location": "/x"}), "redirect"),
        (_result(302), "permanent"),  # a redirect without Location goes nowhere
        (_result(304), "not_modified"),
        (_result(300), "permanent"),
        (_result(403), "permanent"),
        (_result(429, transient=True), "transient"),
        (_result(500, transient=True), "transient"),
        (_result(None, "timeout", True), "transient"),
        (_result(None, "dns", False), "failed"),
        (_result(None, "guard", False), "failed"),
    ],
)
def test_classify(result, outcome):
    assert classify(result) == outcome


def test_content_type_property():
    r = _result(200, headers={"content-type": "Text/HTML; charset=UTF-8"})
    assert r.content_type == "text/html"
    assert _result(200).content_type is None


async def test_stats_count_outcomes(site):
    f = make_fetcher()
    try:
        await f.fetch(f"http://site.test:{site.port}/ok")
        await f.fetch(f"http://site.test:{site.port}/missing")
        await f.fetch("http://127.0.0.1/")
        await f.fetch("http://nx.example/")
        stats = f.stats()
    finally:
        await f.close()
    assert stats["fetches"] == 4 and stats["responses"] == 2
    assert stats["status_classes"] == {"2xx": 1, "4xx": 1}
    assert stats["errors"] == {"guard": 1, "dns": 1}
    assert stats["body_bytes"] == len(PAGE) + len(b"not here")
    # the second site.test fetch reused the keep-alive connection: no second lookup
    assert stats["dns"]["override_hits"] == 1 and stats["dns"]["misses"] == 1


async def test_address_refused_is_an_oserror_for_aiohttp():
    # DnsCache and the socket factory signal refusals with an OSError subclass so that
    # aiohttp's connector wraps them (instead of letting them escape as bugs).
    assert issubclass(AddressRefused, OSError)
