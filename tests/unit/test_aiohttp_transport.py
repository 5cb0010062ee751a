"""AiohttpTransport against servers these tests start on 127.0.0.1.

What is specific to the real transport: the one aiohttp private attribute it reads, and
the backstop that keeps a real socket from hanging under a clock nobody advances.
Everything else about real responses is in test_fetch.py (through the Fetcher).
"""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web
from yarl import URL

from crawler.fetch.aiohttp_transport import AiohttpTransport, _protocol_of
from crawler.clock import MockClock
from crawler.fetch.fetcher import Fetcher
from crawler.testing.fakes import FakeResolver
from crawler.fetch.transport import Request
from tests.unit.http_kit import loopback_site

UA = "raycrawl-test/1.0 (+https://example.invalid/bot)"
RESOLVE = {"site.test": "127.0.0.1"}


@pytest.fixture
async def tiny_site():
    async def tiny(_: web.Request) -> web.Response:
        return web.Response(body=b"ok")

    async with loopback_site({"/tiny": tiny}) as port:
        yield port


async def test_aiohttp_still_keeps_the_protocol_of_a_released_response(tiny_site):
    """Fails loudly if aiohttp drops ``ClientResponse._protocol`` (see ``_protocol_of``)."""
    t = AiohttpTransport(resolve=RESOLVE, base_resolver=FakeResolver())
    url = f"http://site.test:{tiny_site}/tiny"
    try:
        response = await t.send(Request(url, URL(url), {"User-Agent": UA}))
        raw = response._resp
        # A 2-byte body arrives with the headers: aiohttp has released the connection...
        assert raw.connection is None
        # ...and only the private attribute still leads to the protocol.
        assert getattr(raw, "_protocol", None) is not None, (
            "aiohttp no longer has ClientResponse._protocol: update "
            "crawler.fetch.aiohttp_transport._protocol_of (peer address, reset and parse-error checks)"
        )
        proto = _protocol_of(raw)
        assert callable(getattr(proto, "exception", None)) and proto.transport is not None
        assert response.peer == "127.0.0.1"
        assert await response.read() == b"ok" and await response.read() == b""
        assert response.failure() is None
        response.close(reusable=True)
    finally:
        await t.close()


async def test_a_mock_clock_nobody_advances_cannot_hang_a_real_socket():
    # The fetcher's deadline is on the MockClock, which stands still here; aiohttp's own
    # timer (timeout_s + 1 s of real time) ends the fetch instead of letting it hang.
    async def silent(reader, writer):
        await asyncio.Event().wait()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    clock = MockClock()
    f = Fetcher(user_agent=UA, timeout_s=0.1, clock=clock, resolve=RESOLVE, base_resolver=FakeResolver())
    try:
        r = await f.fetch(f"http://site.test:{port}/")
    finally:
        await f.close()
        server.close()
    assert r.status is None and r.error_kind == "timeout" and r.transient
    assert r.finished_at == clock.now() == 0.0
