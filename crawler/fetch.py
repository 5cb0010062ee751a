"""The HTTP fetcher: one aiohttp session, bounded bodies, every failure turned into a result.

:meth:`Fetcher.fetch` never raises (except ``asyncio.CancelledError``, which must reach
the caller so shutdown works): a timeout, a reset, a lying server or a guard refusal
becomes a :class:`FetchResult` with ``error`` / ``error_kind`` / ``transient`` set, and
:func:`classify` turns a result into the crawler's outcome.

Decisions (see also the mapping table in :func:`_map_exception`):

* Redirects are not followed (``allow_redirects=False``): the target goes through the
  crawler's normal link path (normalize, scope, seen set, politeness, address guard).
* Bodies are decompressed here, not by aiohttp (``auto_decompress=False``), with
  ``zlib.decompressobj(...).decompress(data, max_length)`` so decoded bytes never exceed
  ``max_body_bytes + 1``: a gzip bomb is cut after ``max_body_bytes`` with bounded memory
  and CPU. Bytes read from the wire are capped at ``max_body_bytes`` too.
* One total timeout (aiohttp's ``ClientTimeout.total``) covers DNS, connect, headers and
  the whole body, so a server trickling one byte a second is cut at ``timeout_s``
  (aiohttp rounds timeouts above 5 s up to the next whole second of loop time, so the
  default 10 s ends within 10-11 s).
* A body cut short by a reset, a timeout or a content-length mismatch keeps the status,
  the headers and the bytes received so far (useful for diagnostics), with ``error`` set
  and ``transient=True``; :func:`classify` returns "transient" for it, so a partial page is
  never stored as fetched.
* The SSRF guard (:mod:`crawler.dns`) refuses private, loopback, link-local, multicast...
  destinations, for names (in the resolver) and IP-literal URLs (here, before sending),
  unless a ``resolve`` override or ``allow_networks`` says otherwise.

Known aiohttp limitation (3.14): an invalid chunk-size line arriving *after* the first
body bytes leaves aiohttp's payload reader waiting; the fetch then ends at ``timeout_s``
and is reported as "invalid chunked encoding" (the parser's error is read back from the
connection's protocol), not as a timeout.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import logging
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import aiohttp
from aiohttp import client_exceptions as cexc
from aiohttp import http_exceptions as hexc
from yarl import URL

from crawler.dns import (
    AddressGuard,
    AddressRefused,
    Clock,
    DnsCache,
    DnsLookupError,
    GuardedSocketFactory,
)
from crawler.clock import SYSTEM_CLOCK
from crawler.robots import ROBOTS_MAX_BYTES
from crawler.errors import ConfigError

log = logging.getLogger(__name__)

__all__ = ["FetchResult", "Fetcher", "classify", "ERROR_KINDS"]

#: Machine categories of ``FetchResult.error_kind``.
ERROR_KINDS = ("timeout", "connect", "dns", "reset", "protocol", "decode", "guard", "tls", "url", "internal")

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_READ_CHUNK = 65536


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


# ------------------------------------------------------------------------ decoding


class _DecodeError(Exception):
    """The compressed body is corrupt; the message is the user-facing reason.

    ``partial`` holds what the failing chunk decoded before the damage.
    """

    def __init__(self, message: str, partial: bytes = b"") -> None:
        super().__init__(message)
        self.partial = partial


class _Inflater:
    """Incremental gzip/deflate decoder whose output never exceeds the caller's budget."""

    __slots__ = ("name", "_gzip", "_d", "_head", "_done", "_fed")

    def __init__(self, name: str) -> None:
        self.name = name  # "gzip" or "deflate"
        self._gzip = name == "gzip"
        self._d: Any = None  # created when the first bytes arrive
        self._head = b""  # a too-short prefix kept until the next chunk
        self._done = False  # stream ended; trailing bytes are ignored (as browsers do)
        self._fed = False

    def _start(self, data: bytes) -> bool:
        """Open a decompressor for ``data``'s stream; False if ``data`` starts none."""
        if self._gzip:
            if not data.startswith(b"\x1f\x8b"):
                return False
            self._d = zlib.decompressobj(31)  # 16 + MAX_WBITS: gzip header and trailer
        else:
            # RFC 9110 8.4.1.2: "deflate" is zlib-wrapped (RFC 1950), but many servers send
            # raw RFC 1951 data; the zlib header (CM=8, FCHECK) tells them apart.
            cmf, flg = data[0], data[1]
            wrapped = (cmf & 0x0F) == 8 and ((cmf << 8) | flg) % 31 == 0
            self._d = zlib.decompressobj(15 if wrapped else -15)
        return True

    def feed(self, data: bytes, budget: int) -> bytes:
        """Decode ``data``; return at most ``budget`` bytes (``budget >= 1``).

        Raises _DecodeError on corrupt input. Input left over when the budget is reached
        is dropped: the caller truncates the body there.
        """
        out = b""
        if data:
            self._fed = True
        if self._head:
            data = self._head + data
            self._head = b""
        while data and not self._done:
            d = self._d
            if d is None or d.eof:
                if d is not None and not self._gzip:
                    self._done = True  # one deflate stream per body
                    break
                if len(data) < 2:
                    self._head = data
                    break
                if not self._start(data):
                    if d is None:
                        raise _DecodeError(f"broken {self.name} stream (not gzip data)")
                    self._done = True  # garbage after the last member
                    break
                d = self._d
            backup = d.copy()  # ~0.2 us; lets a failure keep what decoded before the damage
            try:
                chunk = d.decompress(data, budget - len(out))
            except zlib.error as exc:
                raise _DecodeError(
                    f"broken {self.name} stream ({exc})", out + _salvage(backup, data, budget - len(out))
                ) from None
            out = chunk if not out else out + chunk
            if len(out) >= budget:
                break
            # Concatenated gzip members (RFC 1952 2.2) form one body: go on with the rest.
            data = d.unused_data if d.eof else b""
        return out

    def finished(self) -> bool:
        """True if the compressed stream ended properly (or there was no body at all)."""
        if not self._fed:
            return True  # e.g. a 304 or HEAD that carries Content-Encoding but no body
        return self._done or (self._d is not None and self._d.eof and not self._head)


def _salvage(d: Any, data: bytes, budget: int) -> bytes:
    """Decode ``data`` with ``d`` up to the damage; return the output before it.

    Error path only: steps of 512 bytes, narrowed down to single bytes around the error
    (each attempt on a copy of the decompressor, since a failed call spoils it).
    """
    parts: list[bytes] = []
    got = 0
    pos = 0
    step = 512
    view = memoryview(data)
    while pos < len(data) and got < budget and not d.eof:
        saved = d.copy()
        try:
            piece = d.decompress(view[pos : pos + step], budget - got)
        except zlib.error:
            if step == 1:
                break
            d = saved
            step = max(1, step // 8)
            continue
        parts.append(piece)
        got += len(piece)
        pos += step
    return b"".join(parts)


def _decoder_for(content_encoding: str | None) -> tuple[_Inflater | None, str | None]:
    """(decoder, note): no decoder for identity; a note for codings we do not decode."""
    if not content_encoding:
        return None, None
    codings = [c.strip().lower() for c in content_encoding.split(",")]
    codings = [c for c in codings if c and c != "identity"]
    if not codings:
        return None, None
    if len(codings) == 1:
        coding = codings[0]
        if coding in ("gzip", "x-gzip"):
            return _Inflater("gzip"), None
        if coding == "deflate":
            return _Inflater("deflate"), None
    # We only ask for gzip/deflate; keep what the server sent rather than guess.
    return None, f"unsupported content-encoding {content_encoding!r}: body kept encoded"


# ------------------------------------------------------------------------- fetcher


def _is_ip_literal(host: str) -> bool:
    """True if ``host`` is an IPv4/IPv6 literal (aiohttp will not resolve it)."""
    if ":" not in host and not host[-1:].isdigit():
        return False  # fast path for ordinary names
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False  # e.g. "127.1": aiohttp rejects such legacy forms itself
    return True


class Fetcher:
    """Fetches URLs with one pooled aiohttp session; see the module docstring.

    ``resolve`` maps host names (``*.suffix`` wildcards allowed) to IP literals, like
    ``curl --resolve``; such names skip DNS and may reach private/loopback addresses.
    ``ssrf_guard=False`` disables the address guard entirely; ``allow_networks`` lets
    chosen networks through it. ``base_resolver`` replaces aiohttp's threaded
    ``getaddrinfo`` resolver (tests inject a fake). ``connector_factory`` is called with
    the keyword arguments the fetcher would give ``aiohttp.TCPConnector`` and must
    return an ``aiohttp.BaseConnector``: tests use it to install a socket factory that
    records the address it was asked to reach and refuses, so no packet is sent.

    The session is created lazily inside the running loop; use one Fetcher per loop.
    ``keepalive_s`` bounds how long an idle connection is kept: with one request per
    host per second, a short keep-alive still reuses the connection for the next
    request to the same host, while bounding idle sockets to about
    ``pages/s * keepalive_s`` (file descriptors are the limiting resource).
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
    ) -> None:
        if not isinstance(user_agent, str) or not user_agent.strip():
            raise ConfigError("fetch.user_agent must be a non-empty string naming the crawler")
        if any(c in user_agent for c in "\r\n"):
            raise ConfigError("fetch.user_agent must be one line (no CR/LF)")
        if not timeout_s > 0 or not connect_timeout_s > 0:
            raise ConfigError(f"fetch timeouts must be > 0 (timeout_s={timeout_s}, connect_timeout_s={connect_timeout_s})")
        if max_body_bytes < 1:
            raise ConfigError(f"fetch.max_body_bytes must be >= 1 (got {max_body_bytes})")
        if max_connections < 1:
            raise ConfigError(f"fetch.max_connections must be >= 1 (got {max_connections})")
        self._ua = user_agent
        self._timeout_s = float(timeout_s)
        self._connect_timeout_s = float(connect_timeout_s)
        self._max_body = int(max_body_bytes)
        self._max_connections = int(max_connections)
        self._keepalive_s = float(keepalive_s)
        self._clock: Clock = clock if clock is not None else SYSTEM_CLOCK
        self._connector_factory = connector_factory
        self.guard = AddressGuard(ssrf_guard, allow_networks)
        # Built now so a bad ``resolve`` entry fails at construction (ConfigError).
        self.dns = DnsCache(
            resolve,
            ttl_s=dns_ttl_s,
            negative_ttl_s=dns_negative_ttl_s,
            clock=self._clock,
            base=base_resolver,
            guard=self.guard,
        )
        self._session: aiohttp.ClientSession | None = None
        self._closed = False
        self._count: dict[str, int] = {
            "fetches": 0,
            "responses": 0,
            "body_bytes": 0,
            "wire_bytes": 0,
            "truncated": 0,
        }
        self._kinds: dict[str, int] = {}
        self._status_classes: dict[str, int] = {}

    # -- session ----------------------------------------------------------------------

    def _open_session(self) -> aiohttp.ClientSession:
        socket_factory = GuardedSocketFactory(self.guard, self.dns.override_addresses())
        kwargs: dict[str, Any] = {
            "limit": self._max_connections,
            "limit_per_host": 0,  # the frontier already keeps one request in flight per host
            "resolver": self.dns,
            "use_dns_cache": False,  # DnsCache caches; a second cache would hide re-checks
            "keepalive_timeout": self._keepalive_s,
            "socket_factory": socket_factory,
        }
        factory = self._connector_factory or aiohttp.TCPConnector
        connector = factory(**kwargs)
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=self._timeout_s, sock_connect=self._connect_timeout_s),
            auto_decompress=False,
            # Cookies would leak across the web and grow without bound.
            cookie_jar=aiohttp.DummyCookieJar(),
            headers={"User-Agent": self._ua, "Accept-Encoding": "gzip, deflate"},
            trust_env=False,  # never route through proxies from the environment
            raise_for_status=False,
            max_line_size=16384,
            max_field_size=32768,
        )
        return self._session

    async def close(self) -> None:
        """Close the session, its connections and the DNS cache. Idempotent."""
        self._closed = True
        session, self._session = self._session, None
        if session is not None:
            await session.close()
        await self.dns.close()

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
        clock = self._clock
        started = clock.now()
        self._count["fetches"] += 1
        # -- URL and literal-address checks (aiohttp skips the resolver for literals)
        try:
            if url.isascii() and url.isprintable() and " " not in url:
                u = URL(url, encoded=True)  # normalized URLs are already percent-encoded
            else:
                u = URL(url)
            scheme = u.scheme
            host = u.host
        except (ValueError, TypeError, AttributeError) as exc:
            return self._failed(url, started, "url", f"invalid url: {exc}", False)
        if scheme not in ("http", "https") or not host:
            return self._failed(url, started, "url", f"invalid url: not an http(s) URL with a host: {url!r}", False)
        if self.guard.enabled and _is_ip_literal(host):
            reason = self.guard.check(host, False)  # a literal is never "via override"
            if reason is not None:
                return self._failed(url, started, "guard", f"refused by address guard: {reason}", False, host)

        if self._closed:
            # A fetch racing shutdown: report it as retryable so the URL is not lost.
            return self._failed(url, started, "internal", "fetcher is closed", True)
        resp: aiohttp.ClientResponse | None = None
        proto: Any = None
        headers_at: float | None = None
        status: int | None = None
        hdrs: dict[str, str] = {}
        parts: list[bytes] = []
        size = 0
        truncated = False
        peer: str | None = None
        if max_body_bytes is not None:
            cap = max(1, int(max_body_bytes))
        elif u.raw_path == "/robots.txt":
            # RFC 9309 2.5: robots.txt is parsed to 500 KiB (ROBOTS_MAX_BYTES), so read exactly
            # that much whatever the page limit: all the parser needs when pages are capped
            # lower, and no 10 MB download when they are capped higher.
            cap = ROBOTS_MAX_BYTES
        else:
            cap = self._max_body
        error: str | None = None
        kind: str | None = None
        transient = False
        clean = False  # body read to its end: the connection may go back to the pool
        wire = 0
        try:
            session = self._session or self._open_session()
            resp = await session.get(u, headers=headers, allow_redirects=False)
            headers_at = clock.now()
            status = resp.status
            for k, v in resp.headers.items():
                lk = k.lower()
                prev = hdrs.get(lk)
                hdrs[lk] = v if prev is None else f"{prev}, {v}"
            # A body that arrived with the headers is already at EOF and its connection
            # released (resp.connection is None by now), so ask the protocol, which the
            # response keeps; its transport is gone only if the connection was closed.
            proto = getattr(resp, "_protocol", None)
            if proto is None and resp.connection is not None:
                proto = resp.connection.protocol
            transport = getattr(proto, "transport", None)
            if transport is not None:
                pn = transport.get_extra_info("peername")
                if pn:
                    peer = str(pn[0])
            decoder, note = _decoder_for(hdrs.get("content-encoding"))
            if note is not None:
                error, kind = note, "decode"
            content = resp.content
            while True:
                chunk = await content.readany()
                if not chunk:
                    break
                wire += len(chunk)
                if decoder is not None:
                    chunk = decoder.feed(chunk, cap + 1 - size)
                n = len(chunk)
                if size + n > cap:
                    parts.append(chunk[: cap - size])
                    size = cap
                    truncated = True
                    break
                if n:
                    parts.append(chunk)
                    size += n
                if wire > cap:  # compressed input that decodes to little: still bounded
                    truncated = True
                    break
            if not truncated:
                clean = True
                if decoder is not None and not decoder.finished():
                    error, kind = f"broken {decoder.name} stream (ended early)", "decode"
                if proto is not None and kind is None:
                    # A read-until-close body (no length, not chunked) cut by a reset looks
                    # like a clean end to the parser; the protocol still holds the error.
                    pexc = proto.exception()
                    if isinstance(pexc, OSError) and pexc.errno == errno.ECONNRESET:
                        error, kind, transient, clean = "connection reset", "reset", True, False
        except _DecodeError as exc:
            error, kind, transient = str(exc), "decode", False
            if exc.partial and size < cap:
                keep = exc.partial[: cap - size]
                parts.append(keep)
                size += len(keep)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # every failure becomes a result (table in _map_exception)
            kind, error, transient, guard_ip = self._map_exception(exc, url, status, proto, started)
            if guard_ip is not None:
                peer = guard_ip
        finally:
            if resp is not None:
                if clean:
                    resp.release()
                else:
                    resp.close()  # unread or broken body: the connection cannot be reused
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        self._count["wire_bytes"] += wire
        if status is not None:
            self._count["responses"] += 1
            sc = f"{status // 100}xx"
            self._status_classes[sc] = self._status_classes.get(sc, 0) + 1
            if not transient and (status == 429 or 500 <= status < 600):
                transient = True
        self._count["body_bytes"] += size
        if truncated:
            self._count["truncated"] += 1
        if kind is not None:
            self._kinds[kind] = self._kinds.get(kind, 0) + 1
        return FetchResult(
            url, status, hdrs, body, truncated, error, kind, transient, started, headers_at, clock.now(), peer
        )

    def _failed(
        self, url: str, started: float, kind: str, error: str, transient: bool, ip: str | None = None
    ) -> FetchResult:
        self._kinds[kind] = self._kinds.get(kind, 0) + 1
        return FetchResult(url, None, {}, b"", False, error, kind, transient, started, None, self._clock.now(), ip)

    def _map_exception(
        self, exc: Exception, url: str, status: int | None, proto: Any, started: float
    ) -> tuple[str, str, bool, str | None]:
        """Map an exception to (error_kind, error, transient, refused_ip).

        ======================================================  ========  =========  ============================
        exception (aiohttp 3.14)                                kind      transient  error
        ======================================================  ========  =========  ============================
        ClientConnectorError carrying AddressRefused             guard     False      refused by address guard: ..
        (from DnsCache or GuardedSocketFactory), or an OSError
        whose message says so (happy-eyeballs merges errors)
        ClientConnectorDNSError / DnsLookupError                 dns       False      dns: name not resolved ...
        ClientConnectorCertificateError, ClientSSLError,         tls       False      tls: ...
        ssl.SSLError
        ConnectionTimeoutError (sock_connect)                     timeout   True       connect timeout after Xs
        asyncio.TimeoutError / ServerTimeoutError (total timer)   timeout   True       timeout after Xs (phase)
          ... but the protocol holds a parse error (invalid       protocol  False      invalid chunked encoding
          chunk mid-body: aiohttp never wakes the reader)
        ClientConnectorError (refused, unreachable, ...)          connect   True       connect: <strerror>
        ClientConnectionResetError, ClientOSError/OSError with    reset     True       connection reset
        ECONNRESET/EPIPE, ClientPayloadError mentioning a reset
        ServerDisconnectedError (closed before/while headers)     reset     True       server closed the connection
        ClientPayloadError <- ContentLengthError                  protocol  True       content-length mismatch
        ClientPayloadError <- TransferEncodingError               protocol  True       truncated chunked body
          ("not enough data": server closed mid-chunk)
        ClientPayloadError, protocol holds a chunk parse error    protocol  False      invalid chunked encoding
        ClientPayloadError <- ContentEncodingError/other          protocol  False      incomplete body: ...
        ClientResponseError <- LineTooLong / "Too many headers"   protocol  False      header too large
        ClientResponseError <- BadStatusLine                      protocol  False      invalid status line
        ClientResponseError mentioning "chunk"                    protocol  False      invalid chunked encoding
        ClientResponseError / HttpProcessingError (other)         protocol  False      invalid response: ...
        InvalidURL, NonHttpUrlClientError, ValueError             url       False      invalid url: ...
        other ClientConnectionError / ClientOSError / OSError     connect   True       connection error: ...
        other ClientError                                         protocol  False      http client error: ...
        anything else (a bug): logged with traceback              internal  False      internal error: ...
        asyncio.CancelledError                                    re-raised, never a result
        ======================================================  ========  =========  ============================

        5xx and 429 responses are marked transient by the caller regardless of the above.
        """
        # guard ----------------------------------------------------------------------
        os_error = getattr(exc, "os_error", None) if isinstance(exc, cexc.ClientConnectorError) else None
        if isinstance(os_error, AddressRefused):
            return "guard", str(os_error), False, os_error.ip
        if isinstance(exc, AddressRefused):
            return "guard", str(exc), False, exc.ip
        if isinstance(os_error, OSError) and "refused by address guard" in str(os_error):
            return "guard", f"refused by address guard: {os_error}", False, None
        # dns ------------------------------------------------------------------------
        if isinstance(os_error, DnsLookupError):
            return "dns", str(os_error), False, None
        if isinstance(exc, cexc.ClientConnectorDNSError):
            return "dns", f"dns: name not resolved ({os_error or exc})", False, None
        # tls ------------------------------------------------------------------------
        if isinstance(exc, (cexc.ClientSSLError, cexc.ClientConnectorCertificateError)):
            return "tls", f"tls: {os_error or exc}", False, None
        # timeouts ---------------------------------------------------------------------
        if isinstance(exc, asyncio.TimeoutError):  # includes aiohttp's ServerTimeoutError
            parse_error = _protocol_parse_error(proto)
            if parse_error is not None:
                return "protocol", parse_error, False, None
            elapsed = self._clock.now() - started
            if isinstance(exc, cexc.ConnectionTimeoutError) and elapsed < self._timeout_s * 0.95:
                return "timeout", f"connect timeout after {self._connect_timeout_s}s", True, None
            phase = "connecting or waiting for headers" if status is None else "reading body"
            return "timeout", f"timeout after {self._timeout_s}s ({phase})", True, None
        # connect ----------------------------------------------------------------------
        if isinstance(exc, cexc.ClientConnectorError):
            err = os_error if isinstance(os_error, OSError) else exc
            if getattr(err, "errno", None) == errno.ECONNRESET:
                return "reset", "connection reset", True, None
            return "connect", f"connect: {_strerror(err)}", True, None
        # body / response --------------------------------------------------------------
        if isinstance(exc, cexc.ClientPayloadError):
            text = str(exc)
            if "ConnectionResetError" in text or "Connection reset" in text:
                return "reset", "connection reset", True, None
            parse_error = _protocol_parse_error(proto)
            if parse_error is not None:
                return "protocol", parse_error, False, None
            cause = exc.__cause__
            if isinstance(cause, hexc.ContentLengthError):
                return "protocol", f"content-length mismatch ({cause.message})", True, None
            if isinstance(cause, hexc.TransferEncodingError):
                return "protocol", "truncated chunked body (server closed mid-chunk)", True, None
            return "protocol", f"incomplete body: {cause or exc}", False, None
        if isinstance(exc, cexc.ServerDisconnectedError):
            return "reset", "server closed the connection without a complete response", True, None
        if isinstance(exc, (cexc.ClientResponseError, hexc.HttpProcessingError)):
            return "protocol", _describe_parse_error(exc), False, None
        if isinstance(exc, (cexc.InvalidURL, cexc.NonHttpUrlClientError, ValueError)):
            return "url", f"invalid url: {exc}", False, None
        if isinstance(exc, (ConnectionResetError, BrokenPipeError)) or (
            isinstance(exc, OSError) and exc.errno in (errno.ECONNRESET, errno.EPIPE)
        ):
            return "reset", "connection reset", True, None
        if isinstance(exc, (cexc.ClientConnectionError, OSError)):
            return "connect", f"connection error: {_strerror(exc)}", True, None
        if isinstance(exc, cexc.ClientError):
            return "protocol", f"http client error: {type(exc).__name__}: {exc}", False, None
        log.error("fetch: unexpected error for %s", url, exc_info=exc)
        return "internal", f"internal error: {type(exc).__name__}: {exc}", False, None

    # -- stats ------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Counters: fetches, responses, bytes, truncated, errors by kind, statuses, dns, guard."""
        out: dict[str, Any] = dict(self._count)
        out["errors"] = dict(self._kinds)
        out["status_classes"] = dict(self._status_classes)
        out["guard_refusals"] = self.guard.refusals
        out["dns"] = self.dns.stats()
        return out


def _walk(exc: BaseException | None) -> Iterable[BaseException]:
    seen = 0
    while exc is not None and seen < 8:
        yield exc
        exc = exc.__cause__ or exc.__context__
        seen += 1


def _describe_parse_error(exc: BaseException) -> str:
    for e in _walk(exc):
        if isinstance(e, hexc.LineTooLong):
            return "header too large"
        if isinstance(e, hexc.BadStatusLine):
            return "invalid status line"
    text = str(getattr(exc, "message", "") or exc)
    low = text.lower()
    if "too many headers" in low or "got more than" in low:
        return "header too large"
    if "chunk" in low:
        return "invalid chunked encoding"
    if "status line" in low:
        return "invalid status line"
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return f"invalid response: {first[:200]}"


def _protocol_parse_error(proto: Any) -> str | None:
    """The parse error aiohttp left on the connection's protocol, described, if any."""
    if proto is None:
        return None
    try:
        pexc = proto.exception()
    except Exception:  # noqa: BLE001 - best effort on aiohttp internals
        return None
    if isinstance(pexc, hexc.HttpProcessingError):
        return _describe_parse_error(pexc)
    return None


def _strerror(exc: BaseException) -> str:
    code = getattr(exc, "errno", None)
    if code == errno.ECONNREFUSED:
        return "connection refused"
    if code == errno.EHOSTUNREACH:
        return "host unreachable"
    if code == errno.ENETUNREACH:
        return "network unreachable"
    strerror = getattr(exc, "strerror", None)
    if strerror:
        return str(strerror).lower()
    text = str(exc)
    return text if text else type(exc).__name__
