"""The HTTP fetcher: one GET per call, bounded bodies, every failure turned into a result.

:meth:`Fetcher.fetch` never raises (except ``asyncio.CancelledError``, which must reach
the caller so shutdown works): a timeout, a reset, a lying server or a guard refusal
becomes a :class:`FetchResult` with ``error`` / ``error_kind`` / ``transient`` set, and
:func:`classify` turns a result into the crawler's outcome.

The fetcher owns HTTP policy; the wire is a :class:`crawler.fetch.transport.Transport`
(:class:`~crawler.fetch.aiohttp_transport.AiohttpTransport` unless one is injected; tests use
:class:`crawler.testing.fakes.FakeTransport`, with no sockets and no real time).
Decisions (see also the outcome table in :meth:`Fetcher._map_exception`):

* One deadline, ``timeout_s`` on the injected clock, covers DNS, connect, headers and the
  whole body (:class:`crawler.clock.Timeouts`), so a server trickling one byte a second
  is cut at ``timeout_s`` and a MockClock test sees the same cut without sleeping.
* Bodies are decoded here (:mod:`crawler.fetch.decoding`) so decoded bytes never exceed
  ``max_body_bytes``; bytes read from the wire are capped at ``max_body_bytes`` too.
* A body cut short by a reset, a timeout or a content-length mismatch keeps the status,
  the headers and the bytes received so far (useful for diagnostics), with ``error`` set
  and ``transient=True``; :func:`classify` returns "transient" for it, so a partial page is
  never stored as fetched.
* Redirects are never followed: the target goes through the crawler's link path.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import aiohttp
from yarl import URL

from crawler.fetch.aiohttp_transport import AiohttpTransport
from crawler.clock import SYSTEM_CLOCK, Clock, SystemClock, Timeouts
from crawler.fetch.decoding import ACCEPT_ENCODING, DecodeError, Inflater, decoder_for
from crawler.fetch.addrguard import AddressRefused
from crawler.fetch.dns import DnsLookupError
from crawler.errors import ConfigError
from crawler.robots import ROBOTS_MAX_BYTES
from crawler.fetch.transport import Request, Response, Transport, TransportError, describe_os_error

if TYPE_CHECKING:
    from crawler.config.settings import CrawlConfig, FetchConfig


log = logging.getLogger(__name__)

__all__ = ["FetchResult", "Fetcher", "classify", "ERROR_KINDS", "SOURCE_ADDRESS_ENV", "check_fetch", "source_address"]


#: The environment variable naming this node's own source address (it wins over
#: ``fetch.source_address``: the config is one for the whole cluster, the address is the node's).
SOURCE_ADDRESS_ENV = "RAYCRAWL_SOURCE_ADDRESS"


def check_source_address(value: str, key: str) -> str:
    """``value`` as a normalized IP literal, or ConfigError naming ``key``."""
    try:
        return str(ipaddress.ip_address(value.strip()))
    except ValueError as exc:
        raise ConfigError(
            f"{key}: expected a local IP address of this machine like 10.0.0.5 or 127.0.0.2, got {value!r}"
        ) from exc


def check_fetch(fetch: FetchConfig, prefix: str = "fetch.") -> None:
    """The fetcher's checks of its ``fetch`` section, before a crawl starts (crawler.configcheck):
    ``source_address`` must be an IP address (crawler.config checks the section's other values)."""
    if fetch.source_address is not None:
        check_source_address(fetch.source_address, f"{prefix}source_address")


def source_address(cfg: CrawlConfig, environ: Mapping[str, str]) -> str | None:
    """The local address this node's outgoing connections bind to, or None (the system's
    choice): ``$RAYCRAWL_SOURCE_ADDRESS`` if set and not empty, else ``fetch.source_address``.

    Read where the fetcher is built, so on each node: machines with several addresses (or a
    test's regions on 127.0.0.2 and 127.0.0.3) connect from the one the node is given.
    """
    env = environ.get(SOURCE_ADDRESS_ENV, "").strip()
    if env:
        return check_source_address(env, SOURCE_ADDRESS_ENV)
    configured = cfg.fetch.source_address
    return check_source_address(configured, "fetch.source_address") if configured is not None else None


#: Machine categories of ``FetchResult.error_kind``.
ERROR_KINDS = ("timeout", "connect", "dns", "reset", "protocol", "decode", "guard", "tls", "url", "internal")

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})


@dataclass(slots=True)
class FetchResult:
    """The outcome of one GET: a response (possibly partial) or the reason there is none."""

    url: str
    status: int | None  # None when no response (timeout, DNS, refused, reset before headers, guard)
    headers: dict[str, str]  # lowercased names; repeated headers joined with ", "
    body: bytes  # decoded (gzip/deflate removed), cut at max_body_bytes
    truncated: bool  # body cut at max_body_bytes (decoded or wire bytes)
    error: str | None  # human-readable reason
    error_kind: str | None  # one of ERROR_KINDS
    transient: bool  # worth retrying later (timeouts, resets, connect errors, 429, 5xx)
    started_at: float  # clock time at send
    headers_at: float | None  # clock time the response headers were received
    finished_at: float
    ip: str | None  # peer address connected to (or refused), when known

    @property
    def content_type(self) -> str | None:
        """The Content-Type without parameters, lowercased ("text/html"), or None."""
        ct = self.headers.get("content-type")
        if not ct:
            return None
        ct = ct.split(";", 1)[0].strip().lower()
        return ct or None


def classify(result: FetchResult) -> str:
    """The crawler outcome of a fetch.

    "ok" (2xx with a complete body; a decode problem such as a broken gzip stream keeps
    the decoded part and still counts as ok, with ``error`` set), "redirect" (301, 302,
    303, 307, 308 with a Location header), "not_modified" (304), "transient" (retry later:
    429, 5xx, and failures flagged transient), "permanent" (other 4xx/3xx/1xx: a final
    HTTP error) or "failed" (no usable response and not worth retrying).
    """
    status = result.status
    kind = result.error_kind
    if status is None or (kind is not None and kind != "decode"):
        # No response, or the response broke off mid-body: never store it as a page.
        return "transient" if result.transient else "failed"
    if 200 <= status < 300:
        return "ok"
    if status == 304:
        return "not_modified"
    if status in REDIRECT_STATUSES and result.headers.get("location"):
        return "redirect"
    if status == 429 or 500 <= status < 600:
        return "transient"
    return "permanent"


class _Attempt:
    """One fetch while it runs: what has arrived so far survives a timeout or a reset."""

    __slots__ = (
        "url", "started", "cap", "response", "status", "headers", "headers_at", "peer",
        "parts", "size", "wire", "truncated", "clean", "error", "kind", "transient",
    )  # fmt: skip

    def __init__(self, url: str, started: float, cap: int) -> None:
        self.url = url
        self.started = started
        self.cap = cap
        self.response: Response | None = None
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.headers_at: float | None = None
        self.peer: str | None = None
        self.parts: list[bytes] = []
        self.size = 0  # body bytes kept (decoded)
        self.wire = 0  # body bytes read (as sent)
        self.truncated = False
        self.clean = False  # body read to its end: the connection may go back to the pool
        self.error: str | None = None
        self.kind: str | None = None
        self.transient = False


def _parse_url(url: str) -> URL | str:
    """The URL to send, or why it cannot be sent (an http(s) URL with a host)."""
    try:
        if url.isascii() and url.isprintable() and " " not in url:
            u = URL(url, encoded=True)  # normalized URLs are already percent-encoded
        else:
            u = URL(url)
        scheme, host = u.scheme, u.raw_host
        if host and "xn--" in host.lower():
            # Only a punycode label can fail to decode; ``URL.host`` decodes every host
            # through the idna package (its cache holds 256 hosts, a crawl has thousands):
            # 2-3% of a crawl's CPU when asked of every URL.
            host = u.host
    except (ValueError, TypeError, AttributeError) as exc:
        return f"invalid url: {exc}"
    if scheme not in ("http", "https") or not host:
        return f"invalid url: not an http(s) URL with a host: {url!r}"
    return u


def _header_dict(items: Collection[tuple[str, str]]) -> dict[str, str]:
    """Lowercased names; a repeated header's values joined with ", " (RFC 9110 5.3)."""
    out = {k.lower(): v for k, v in items}
    if len(out) == len(items):
        return out  # no name repeated: the common case, in one pass
    out = {}
    for k, v in items:
        lk = k.lower()
        prev = out.get(lk)
        out[lk] = v if prev is None else f"{prev}, {v}"
    return out


class Fetcher:
    """Fetches URLs through one transport; see the module docstring.

    ``transport`` is the wire (:class:`crawler.fetch.transport.Transport`). Without one, an
    :class:`~crawler.fetch.aiohttp_transport.AiohttpTransport` is built from the network
    options (``connect_timeout_s``, ``resolve``, ``dns_ttl_s``, ``dns_negative_ttl_s``,
    ``ssrf_guard``, ``allow_networks``, ``max_connections``, ``base_resolver``,
    ``connector_factory``, ``keepalive_s``, ``source_address``; documented there); with one, those options
    are not used (so ``build_fetcher(cfg, clock, transport=fake)`` works unchanged).
    """

    def __init__(
        self,
        *,
        user_agent: str,
        timeout_s: float = 10.0,
        connect_timeout_s: float = 5.0,
        max_body_bytes: int = 10_000_000,
        resolve: Mapping[str, str] = MappingProxyType({}),
        dns_ttl_s: float = 300,
        dns_negative_ttl_s: float = 60,
        ssrf_guard: bool = True,
        allow_networks: Iterable[str] = (),
        max_connections: int = 512,
        clock: Clock | None = None,
        base_resolver: aiohttp.abc.AbstractResolver | None = None,
        connector_factory: Callable[..., aiohttp.BaseConnector] | None = None,
        keepalive_s: float = 5.0,
        transport: Transport | None = None,
        source_address: str | None = None,
    ) -> None:
        if not isinstance(user_agent, str) or not user_agent.strip():
            raise ConfigError("fetch.user_agent must be a non-empty string naming the crawler")
        if any(c in user_agent for c in "\r\n"):
            raise ConfigError("fetch.user_agent must be one line (no CR/LF)")
        if not timeout_s > 0 or not connect_timeout_s > 0:
            raise ConfigError(f"fetch timeouts must be > 0 (timeout_s={timeout_s}, connect_timeout_s={connect_timeout_s})")
        if max_body_bytes < 1:
            raise ConfigError(f"fetch.max_body_bytes must be >= 1 (got {max_body_bytes})")
        self._timeout_s = float(timeout_s)
        self._max_body = int(max_body_bytes)
        self._clock: Clock = clock if clock is not None else SYSTEM_CLOCK
        self._headers = {"User-Agent": user_agent, "Accept-Encoding": ACCEPT_ENCODING}
        self._deadlines = Timeouts(self._clock, self._timeout_s)
        if transport is None:
            transport = AiohttpTransport(
                session_headers=self._headers,
                connect_timeout_s=connect_timeout_s,
                # Our deadline runs on the event loop when the clock is the system one;
                # any other clock gets aiohttp's timer as a backstop for real sockets.
                backstop_s=None if isinstance(self._clock, SystemClock) else self._timeout_s + 1.0,
                resolve=resolve,
                dns_ttl_s=dns_ttl_s,
                dns_negative_ttl_s=dns_negative_ttl_s,
                ssrf_guard=ssrf_guard,
                allow_networks=allow_networks,
                max_connections=max_connections,
                keepalive_s=keepalive_s,
                clock=self._clock,
                base_resolver=base_resolver,
                connector_factory=connector_factory,
                source_address=source_address,
            )
        self.transport: Transport = transport
        self._closed = False
        self._count: dict[str, int] = {"fetches": 0, "responses": 0, "body_bytes": 0, "wire_bytes": 0, "truncated": 0}
        self._kinds: dict[str, int] = {}
        self._status_classes: dict[int, int] = {}  # responses by status // 100

    async def close(self) -> None:
        """Close the transport (connections, DNS cache). Idempotent."""
        self._closed = True
        await self.transport.close()

    # -- fetch ------------------------------------------------------------------------

    async def fetch(
        self, url: str, headers: Mapping[str, str] | None = None, *, max_body_bytes: int | None = None
    ) -> FetchResult:
        """GET ``url`` (no redirects followed). Never raises except CancelledError.

        ``headers`` are sent in addition to User-Agent and Accept-Encoding (e.g.
        If-None-Match / If-Modified-Since for a recrawl). ``max_body_bytes`` replaces the
        configured cap for this one request; without it a ``/robots.txt`` URL is capped at
        ``ROBOTS_MAX_BYTES`` (500 KiB, what RFC 9309 2.5 says to parse) and any other URL
        at the configured ``max_body_bytes``.
        """
        started = self._clock.now()
        self._count["fetches"] += 1
        target = _parse_url(url)
        if isinstance(target, str):
            return self._failed(url, started, "url", target, False)
        if self._closed:
            # A fetch racing shutdown: report it as retryable so the URL is not lost.
            return self._failed(url, started, "internal", "fetcher is closed", True)
        a = _Attempt(url, started, self._cap(target, max_body_bytes))
        request = Request(url, target, self._headers if not headers else self._merged_headers(headers))
        try:
            with self._deadlines.scope():
                response = a.response = await self.transport.send(request)
                decoder = self._take_headers(a, response)
                await self._read_body(a, response, decoder)
            if not a.truncated:
                self._check_end(a, response, decoder)
        except DecodeError as exc:
            self._keep_decoded_prefix(a, exc)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a result; CancelledError is not caught
            a.kind, a.error, a.transient, ip = self._map_exception(exc, a)
            if ip is not None:
                a.peer = ip
        finally:
            if a.response is not None:
                a.response.close(a.clean)
        return self._result(a)

    def _cap(self, target: URL, max_body_bytes: int | None) -> int:
        if max_body_bytes is not None:
            return max(1, int(max_body_bytes))
        if target.raw_path == "/robots.txt":
            # RFC 9309 2.5: robots.txt is parsed to 500 KiB (ROBOTS_MAX_BYTES), so read exactly
            # that much whatever the page limit: all the parser needs when pages are capped
            # lower, and no 10 MB download when they are capped higher.
            return ROBOTS_MAX_BYTES
        return self._max_body

    def _merged_headers(self, extra: Mapping[str, str]) -> dict[str, str]:
        # A caller's header replaces ours of the same name, whatever its case.
        names = {k.lower() for k in extra}
        merged = {k: v for k, v in self._headers.items() if k.lower() not in names}
        merged.update(extra)
        return merged

    def _take_headers(self, a: _Attempt, response: Response) -> Inflater | None:
        """Record status, headers and peer; the decoder the Content-Encoding asks for."""
        a.headers_at = self._clock.now()
        a.status = response.status
        a.headers = _header_dict(response.headers)
        a.peer = response.peer
        decoder, note = decoder_for(a.headers.get("content-encoding"))
        if note is not None:
            a.error, a.kind = note, "decode"
        return decoder

    @staticmethod
    async def _read_body(a: _Attempt, response: Response, decoder: Inflater | None) -> None:
        """Read until the end or the cap (decoded bytes, and wire bytes for bombs)."""
        cap = a.cap
        parts = a.parts
        size = wire = 0
        try:
            while True:
                chunk = await response.read()
                if not chunk:
                    return
                wire += len(chunk)
                if decoder is not None:
                    chunk = decoder.feed(chunk, cap + 1 - size)
                n = len(chunk)
                if size + n > cap:
                    parts.append(chunk[: cap - size])
                    size = cap
                    a.truncated = True
                    return
                if n:
                    parts.append(chunk)
                    size += n
                if wire > cap:  # compressed input that decodes to little: still bounded
                    a.truncated = True
                    return
        finally:  # also when a deadline or a reset ends the read: the partial body counts
            a.size, a.wire = size, wire

    def _check_end(self, a: _Attempt, response: Response, decoder: Inflater | None) -> None:
        """The body ended: was it whole? (A decoder cut short; a reset that looked like EOF.)"""
        a.clean = True
        if decoder is not None and not decoder.finished():
            a.error, a.kind = f"broken {decoder.name} stream (ended early)", "decode"
        if a.kind is None:
            failure = response.failure()
            if failure is not None:
                a.kind, a.error, a.transient, _ = self._map_exception(failure, a)
                a.clean = False

    @staticmethod
    def _keep_decoded_prefix(a: _Attempt, exc: DecodeError) -> None:
        a.error, a.kind, a.transient = str(exc), "decode", False
        if exc.partial and a.size < a.cap:
            keep = exc.partial[: a.cap - a.size]
            a.parts.append(keep)
            a.size += len(keep)

    def _result(self, a: _Attempt) -> FetchResult:
        """Count the attempt and freeze it into a FetchResult."""
        parts = a.parts
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        count = self._count
        count["wire_bytes"] += a.wire
        count["body_bytes"] += a.size
        status = a.status
        if status is not None:
            count["responses"] += 1
            classes = self._status_classes
            classes[status // 100] = classes.get(status // 100, 0) + 1
            if status == 429 or 500 <= status < 600:
                a.transient = True
        if a.truncated:
            count["truncated"] += 1
        if a.kind is not None:
            self._kinds[a.kind] = self._kinds.get(a.kind, 0) + 1
        return FetchResult(
            a.url, status, a.headers, body, a.truncated, a.error, a.kind, a.transient,
            a.started, a.headers_at, self._clock.now(), a.peer,
        )  # fmt: skip

    def _failed(
        self, url: str, started: float, kind: str, error: str, transient: bool, ip: str | None = None
    ) -> FetchResult:
        self._kinds[kind] = self._kinds.get(kind, 0) + 1
        return FetchResult(url, None, {}, b"", False, error, kind, transient, started, None, self._clock.now(), ip)

    def _map_exception(self, exc: Exception, a: _Attempt) -> tuple[str, str, bool, str | None]:
        """Map an exception to (error_kind, error, transient, ip).

        ==========================================================  ========  =========  ===========================
        exception                                                   kind      transient  error
        ==========================================================  ========  =========  ===========================
        TransportError (a transport's translation of its library:   its kind  its own    its message
        ConnectError, ConnectTimeout, ConnectionReset,
        ProtocolError, TLSError, NameNotResolved, GuardRefused,
        InvalidURL; see crawler.fetch.aiohttp_transport._translate)
        AddressRefused (DnsCache, socket factory, IP literal)       guard     False      refused by address guard: ..
        DnsLookupError (DnsCache, fresh or negatively cached)       dns       False      dns: name not resolved: ..
        TimeoutError: our deadline on the clock (or a backstop)     timeout   True       timeout after Xs (phase)
          ... but the response reports why the body stalled          (that failure's kind, transient and message)
        ConnectionResetError, BrokenPipeError, ECONNRESET/EPIPE     reset     True       connection reset
        other OSError (e.g. ConnectionRefusedError)                 connect   True       connect: <strerror>
        anything else (a bug): logged with traceback                internal  False      internal error: ...
        asyncio.CancelledError                                      re-raised, never a result
        ==========================================================  ========  =========  ===========================

        5xx and 429 responses are marked transient by :meth:`_result` regardless.
        """
        if isinstance(exc, TransportError):
            return exc.kind, str(exc), exc.transient, exc.ip
        if isinstance(exc, AddressRefused):
            return "guard", str(exc), False, exc.ip
        if isinstance(exc, DnsLookupError):
            return "dns", str(exc), False, None
        if isinstance(exc, TimeoutError):  # before OSError: TimeoutError is one
            stalled = a.response.failure() if a.response is not None else None
            if stalled is not None:
                return stalled.kind, str(stalled), stalled.transient, None
            phase = "connecting or waiting for headers" if a.status is None else "reading body"
            return "timeout", f"timeout after {self._timeout_s}s ({phase})", True, None
        if isinstance(exc, (ConnectionResetError, BrokenPipeError)) or (
            isinstance(exc, OSError) and exc.errno in (errno.ECONNRESET, errno.EPIPE)
        ):
            return "reset", "connection reset", True, None
        if isinstance(exc, OSError):
            return "connect", f"connect: {describe_os_error(exc)}", True, None
        log.error("fetch: unexpected error for %s", a.url, exc_info=exc)
        return "internal", f"internal error: {type(exc).__name__}: {exc}", False, None

    # -- stats ------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Counters: fetches, responses, bytes, truncated, errors by kind, statuses, and the
        transport's (the real one: ``guard_refusals``, ``dns``)."""
        out: dict[str, Any] = dict(self._count)
        out["errors"] = dict(self._kinds)
        out["status_classes"] = {f"{c}xx": n for c, n in self._status_classes.items()}
        out.update(self.transport.stats())
        return out
