"""The fetcher's policy on a FakeTransport and a MockClock: no sockets, no real time.

Deadlines, partial bodies, size limits and the outcome of each failure are checked at
exact clock times. The loopback tests in test_fetch.py show the real transport produces
the same results from real sockets.
"""

from __future__ import annotations

import asyncio
import errno
import gzip
import math
from collections.abc import Awaitable
from typing import TypeVar

import pytest

from crawler.clock import MockClock
from crawler.fetch.addrguard import AddressRefused
from crawler.fetch.dns import DnsLookupError
from crawler.fetch.fetcher import FetchResult, Fetcher, classify
from crawler.testing.fakes import FakeResponse, FakeTransport
from crawler.fetch.transport import ConnectError, ConnectionReset, ConnectTimeout, ProtocolError, TLSError

UA = "raycrawl-test/1.0 (+https://example.invalid/bot)"
URL = "http://a.test/page"
T0 = 100.0
T = TypeVar("T")


def setup(script, **kw) -> tuple[MockClock, FakeTransport, Fetcher]:
    clock = MockClock(T0)
    fake = FakeTransport(script, clock=clock)
    kw.setdefault("timeout_s", 10.0)
    # The ignore: crawler.testing.fakes types its response's headers as a list, the
    # Transport protocol as a settable Collection (invariant); the fix belongs there.
    return clock, fake, Fetcher(user_agent=UA, transport=fake, clock=clock, **kw)  # type: ignore[arg-type]


async def run(clock: MockClock, aw: Awaitable[T]) -> T:
    """Drive ``aw`` to completion on the mock clock (jumping over every wait)."""
    task = asyncio.ensure_future(aw)
    await clock.run_until(task.done)
    return task.result()


async def fetch(script, url: str = URL, headers=None, **kw) -> tuple[FetchResult, FakeTransport]:
    clock, fake, f = setup(script, **kw)
    r = await run(clock, f.fetch(url, headers))
    return r, fake


# ======================================================================== deadlines


async def test_headers_timeout_at_the_deadline():
    r, fake = await fetch({URL: FakeResponse(headers_delay=math.inf)})
    assert r.status is None and r.error_kind == "timeout" and r.transient
    assert r.error == "timeout after 10.0s (connecting or waiting for headers)"
    assert r.headers_at is None and r.finished_at == T0 + 10.0
    assert classify(r) == "transient"
    assert fake.requests[0].closed_at == T0 + 10.0  # the send was cancelled at the deadline


async def test_headers_just_before_the_deadline_are_in_time():
    r, _ = await fetch({URL: FakeResponse(body=b"ok", headers_delay=9.5)})
    assert r.status == 200 and r.error is None and r.body == b"ok"
    assert r.headers_at == T0 + 9.5


async def test_body_read_timeout_keeps_the_partial_body():
    # Headers at +0.5, then a chunk every 1.5 s: six arrive by +9.5, the seventh is due
    # at +11, after the deadline.
    slow = FakeResponse(headers={"Content-Length": "2000"}, body=[b"x" * 100] * 20, headers_delay=0.5, chunk_delay=1.5)
    r, fake = await fetch({URL: slow})
    assert r.status == 200 and r.error_kind == "timeout" and r.transient
    assert r.error == "timeout after 10.0s (reading body)"
    assert r.body == b"x" * 600 and not r.truncated  # kept for diagnostics...
    assert classify(r) == "transient"  # ...never stored as a page
    assert (r.headers_at, r.finished_at) == (T0 + 0.5, T0 + 10.0)
    assert fake.requests[0].reusable is False  # a half-read connection is not pooled


async def test_a_body_that_never_ends_times_out():
    r, _ = await fetch({URL: FakeResponse(body=[b"a", b"b"], end_delay=math.inf)}, timeout_s=3.0)
    assert r.status == 200 and r.body == b"ab" and r.error == "timeout after 3.0s (reading body)"
    assert r.finished_at == T0 + 3.0


async def test_headers_at_and_finished_at_come_from_the_clock():
    r, fake = await fetch({URL: FakeResponse(body=[b"a", b"b"], headers_delay=2.5, chunk_delay=1.0)})
    assert (r.started_at, r.headers_at, r.finished_at) == (T0, T0 + 2.5, T0 + 4.5)
    assert r.body == b"ab" and r.error is None
    assert fake.requests[0].at == T0 and fake.requests[0].closed_at == T0 + 4.5
    assert fake.requests[0].reusable is True


async def test_shutdown_cancellation_is_not_turned_into_a_timeout():
    clock, _, f = setup({URL: FakeResponse(headers_delay=math.inf)})
    task = asyncio.ensure_future(f.fetch(URL))
    await clock.settle()
    clock.advance(3.0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    clock.advance(20.0)  # the deadline passes with nothing left to cancel
    assert clock.next_deadline() is None


# ====================================================================== size limits


async def test_max_body_bytes_truncates():
    r, fake = await fetch({URL: FakeResponse(body=[b"a" * 4000] * 3)}, max_body_bytes=10_000)
    assert r.status == 200 and r.truncated and r.error is None
    assert r.body == b"a" * 10_000 and classify(r) == "ok"
    assert fake.requests[0].reusable is False  # the rest was never read


async def test_a_compressed_bomb_is_cut_at_the_decoded_limit():
    packed = gzip.compress(bytes(5_000_000))
    chunks = [packed[i : i + 1000] for i in range(0, len(packed), 1000)]
    r, _ = await fetch({URL: FakeResponse(headers={"Content-Encoding": "gzip"}, body=chunks)}, max_body_bytes=10_000)
    assert r.truncated and r.body == bytes(10_000) and r.error is None


async def test_gzip_split_across_chunks_is_decoded():
    page = b"<p>hello</p>" * 500
    packed = gzip.compress(page)
    chunks = [packed[i : i + 7] for i in range(0, len(packed), 7)]
    r, _ = await fetch({URL: FakeResponse(headers={"Content-Encoding": "gzip"}, body=chunks)})
    assert r.body == page and r.error is None and not r.truncated


async def test_robots_txt_is_capped_at_500_kib():
    url = "http://a.test/robots.txt"
    r, _ = await fetch({url: FakeResponse(body=[b"#" * 100_000] * 8)}, url=url, max_body_bytes=10_000_000)
    assert r.truncated and len(r.body) == 500 * 1024  # RFC 9309 2.5


# ========================================================================= failures


async def test_reset_mid_body_keeps_status_and_partial_body():
    r, fake = await fetch({URL: FakeResponse(body=[b"z" * 1000], body_error=ConnectionReset())})
    assert r.status == 200 and r.error == "connection reset" and r.error_kind == "reset"
    assert r.transient and classify(r) == "transient" and r.body == b"z" * 1000
    assert fake.requests[0].reusable is False


async def test_dns_failure():
    r, _ = await fetch({URL: FakeResponse(error=DnsLookupError("a.test", "NXDOMAIN"))})
    assert r.status is None and r.error_kind == "dns" and not r.transient
    assert r.error == "dns: name not resolved: a.test (NXDOMAIN)" and classify(r) == "failed"


@pytest.mark.parametrize(
    "error, kind, transient, message, ip",
    [
        (ConnectError(), "connect", True, "connect: connection refused", None),
        (ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"), "connect", True, "connect: connection refused", None),
        (ConnectTimeout("connect timeout after 5.0s"), "timeout", True, "connect timeout after 5.0s", None),
        (ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"), "reset", True, "connection reset", None),
        (TLSError("tls: certificate has expired"), "tls", False, "tls: certificate has expired", None),
        (AddressRefused("10.0.0.1", "a.test -> 10.0.0.1 is private"), "guard", False,
         "refused by address guard: a.test -> 10.0.0.1 is private", "10.0.0.1"),
        (TimeoutError(), "timeout", True, "timeout after 10.0s (connecting or waiting for headers)", None),
        (RuntimeError("boom"), "internal", False, "internal error: RuntimeError: boom", None),
    ],
)
async def test_failures_before_headers_become_results(error, kind, transient, message, ip):
    r, _ = await fetch({URL: FakeResponse(error=error, headers_delay=1.0)})
    assert (r.status, r.error_kind, r.transient, r.error, r.ip) == (None, kind, transient, message, ip)
    assert r.finished_at == T0 + 1.0


async def test_invalid_urls_never_reach_the_transport():
    clock, fake, f = setup({})
    results = [await run(clock, f.fetch(u)) for u in ("ftp://a.test/", "http://", "not a url")]
    assert [r.error_kind for r in results] == ["url"] * 3 and fake.requests == []


# ================================================================ statuses, headers


async def test_redirect_status_with_location_is_not_followed():
    r, fake = await fetch({URL: FakeResponse(301, headers={"Location": "/new"})})
    assert r.status == 301 and r.headers["location"] == "/new" and classify(r) == "redirect"
    assert fake.urls() == [URL]


async def test_retry_after_is_passed_through():
    r, _ = await fetch({URL: FakeResponse(429, headers={"Retry-After": "120"})})
    assert r.status == 429 and r.transient and r.headers["retry-after"] == "120"
    assert classify(r) == "transient" and r.error is None


async def test_repeated_headers_are_joined_and_names_lowercased():
    r, _ = await fetch({URL: FakeResponse(headers=[("X-Multi", "a"), ("x-multi", "b"), ("Content-Type", "Text/HTML; charset=utf-8")])})
    assert r.headers["x-multi"] == "a, b" and r.content_type == "text/html"


async def test_request_headers_are_recorded_and_a_callers_header_wins():
    r, fake = await fetch({URL: FakeResponse(304)}, headers={"If-None-Match": '"v1"', "user-agent": "other/1.0"})
    assert classify(r) == "not_modified"
    sent = fake.requests[0].headers
    assert sent == {"Accept-Encoding": "gzip, deflate", "If-None-Match": '"v1"', "user-agent": "other/1.0"}


async def test_scripted_sequence_models_a_retry_and_the_default_is_404():
    clock, fake, f = setup({URL: [FakeResponse(503), FakeResponse(200, body=b"ok")]})
    first = await run(clock, f.fetch(URL))
    clock.advance(30.0)  # a backoff, as the frontier would wait
    second = await run(clock, f.fetch(URL))
    robots = await run(clock, f.fetch("http://a.test/robots.txt"))
    assert (classify(first), classify(second), robots.status) == ("transient", "ok", 404)
    assert [(r.url, r.at) for r in fake.requests] == [(URL, T0), (URL, T0 + 30.0), ("http://a.test/robots.txt", T0 + 30.0)]
    assert fake.requests[0].headers["User-Agent"] == UA
    assert f.stats()["requests"] == 3 and f.stats()["status_classes"] == {"5xx": 1, "2xx": 1, "4xx": 1}


async def test_callable_script_and_strict_default():
    clock = MockClock(T0)
    fake = FakeTransport(lambda req: FakeResponse(body=req.url.encode()), clock=clock)
    f = Fetcher(user_agent=UA, transport=fake, clock=clock)
    assert (await run(clock, f.fetch("http://b.test/x"))).body == b"http://b.test/x"
    strict = FakeTransport({}, clock=clock, default=None)
    r = await run(clock, Fetcher(user_agent=UA, transport=strict, clock=clock).fetch(URL))
    assert r.error_kind == "connect" and "no script" in r.error


async def test_fetch_after_close_never_reaches_the_transport():
    clock, fake, f = setup({URL: FakeResponse()})
    await f.close()
    r = await run(clock, f.fetch(URL))
    assert r.error == "fetcher is closed" and r.transient and fake.closed and fake.requests == []


async def test_build_fetcher_takes_a_fake_transport():
    # How the shard engine gets a socket-free fetcher on its own clock.
    from crawler.config import settings as config
    from crawler.engine.partbuilders import build_fetcher

    cfg = config.from_dict({"seeds": ["http://a.test/"]})
    clock = MockClock(T0)
    fake = FakeTransport({URL: FakeResponse(body=b"hi", headers_delay=0.25)}, clock=clock)
    f = build_fetcher(cfg, clock, transport=fake)
    r = await run(clock, f.fetch(URL))
    assert r.body == b"hi" and r.headers_at == T0 + 0.25
    assert fake.requests[0].headers["User-Agent"] == cfg.user_agent


class _BrokenStream:
    """A response whose connection holds an error read() did not raise (as aiohttp's can)."""

    status, headers, peer = 200, [("Content-Length", "10")], None

    def __init__(self, clock: MockClock, stall: bool, failure) -> None:
        self.clock, self.stall, self._failure, self.sent = clock, stall, failure, False

    async def read(self) -> bytes:
        if not self.sent:
            self.sent = True
            return b"hello"
        if self.stall:
            await asyncio.get_running_loop().create_future()  # the parser gave up; nobody wakes us
        return b""

    def failure(self):
        return self._failure

    def close(self, reusable: bool) -> None:
        self.reusable = reusable


@pytest.mark.parametrize(
    "stall, failure, kind, message, transient",
    [
        (True, ProtocolError("invalid chunked encoding"), "protocol", "invalid chunked encoding", False),
        (False, ConnectionReset(), "reset", "connection reset", True),  # a reset that looked like EOF
    ],
)
async def test_a_failure_the_transport_recorded_is_the_outcome(stall, failure, kind, message, transient):
    clock = MockClock(T0)
    stream = _BrokenStream(clock, stall, failure)

    class Transport:
        async def send(self, request):
            return stream

        async def close(self):
            pass

        def stats(self):
            return {}

    f = Fetcher(user_agent=UA, transport=Transport(), clock=clock, timeout_s=10.0)
    r = await run(clock, f.fetch(URL))
    assert (r.status, r.body, r.error_kind, r.error, r.transient) == (200, b"hello", kind, message, transient)
    assert r.finished_at == (T0 + 10.0 if stall else T0) and stream.reusable is False
