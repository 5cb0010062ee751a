"""The real transport: one pooled aiohttp session behind the SSRF guard and the DNS cache.

:class:`AiohttpTransport` owns the ``aiohttp.ClientSession``, its ``TCPConnector``, the
:class:`~crawler.fetch.dns.DnsCache` resolver and the :class:`~crawler.fetch.dns.GuardedSocketFactory`;
:func:`_translate` turns every aiohttp error into the seam's error tree
(:mod:`crawler.fetch.transport`), so nothing aiohttp-specific leaves this module.

Decisions:

* Redirects are not followed (``allow_redirects=False``): the target goes through the
  crawler's normal link path (normalize, scope, seen set, politeness, address guard).
* Bodies are handed over still encoded (``auto_decompress=False``): the fetcher decodes
  them within its size limit (:mod:`crawler.fetch.decoding`).
* The fetcher enforces ``timeout_s`` on its own clock. ``backstop_s`` keeps aiohttp's
  total timeout as well, for a fetcher whose clock is not the event loop's (a test's
  MockClock that nobody advances must not let a real connection hang forever). Under
  the system clock the fetcher's deadline already is a loop timer, and aiohttp's would
  cost about as much CPU again per request (``benchmarks/fetch_cpu.py``), so it is off.
  ``connect_timeout_s`` bounds the TCP connect here (a socket concern).
* IP-literal URLs skip the resolver in aiohttp, so :meth:`AiohttpTransport.send` checks
  them against the guard before sending (a literal is never "via override").
* ``source_address`` binds every outgoing connection to that local address (aiohttp's
  ``local_addr``): on a machine with several addresses, the node's own one (the address
  guard still checks the *remote* address, whatever the local one).
* Cookies are never stored (they would leak across the web and grow without bound) and
  proxies from the environment are never used.

Known aiohttp limitation (3.14): an invalid chunk-size line arriving *after* the first
body bytes leaves aiohttp's payload reader waiting; the fetch then ends at its deadline
and :meth:`AiohttpResponse.failure` reads the parser's error back from the connection's
protocol, so it is reported as "invalid chunked encoding", not as a timeout.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
from collections.abc import Callable, Collection, Iterable, Mapping
from types import MappingProxyType
from typing import Any

import aiohttp
from aiohttp import client_exceptions as cexc
from aiohttp import http_exceptions as hexc

from crawler.clock import SYSTEM_CLOCK, Clock
from crawler.fetch.addrguard import AddressGuard, AddressRefused, GuardedSocketFactory
from crawler.fetch.dns import DnsCache, DnsLookupError
from crawler.errors import ConfigError
from crawler.fetch.transport import (
    ConnectError,
    ConnectionReset,
    ConnectTimeout,
    GuardRefused,
    InvalidURL,
    NameNotResolved,
    ProtocolError,
    Request,
    TLSError,
    TransportError,
    describe_os_error,
)

__all__ = ["AiohttpResponse", "AiohttpTransport"]


def _protocol_of(resp: aiohttp.ClientResponse) -> Any:
    """The connection protocol (aiohttp's ``ResponseHandler``) behind ``resp``, or None.

    The one private aiohttp attribute in the project, and why it cannot be avoided: a
    body that arrived with the headers is already at EOF when ``session.get`` returns,
    and aiohttp has released its connection (``resp.connection`` is None by then). The
    response keeps the protocol only as ``_protocol``. We need it for the peer address
    and for errors the parser recorded without raising them (see
    :meth:`AiohttpResponse.failure`). ``tests/unit/test_aiohttp_transport.py`` fails
    loudly if aiohttp renames or drops it.
    """
    proto = getattr(resp, "_protocol", None)
    if proto is None and resp.connection is not None:
        proto = resp.connection.protocol
    return proto


class AiohttpResponse:
    """:class:`crawler.fetch.transport.Response` over an ``aiohttp.ClientResponse``."""

    __slots__ = ("status", "headers", "peer", "_resp", "_content", "_proto", "_eof")

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self._resp = resp
        self.status: int = resp.status
        self.headers: Collection[tuple[str, str]] = resp.headers.items()
        proto = self._proto = _protocol_of(resp)
        # Its transport is gone only if the connection was closed already.
        transport = getattr(proto, "transport", None)
        peername = transport.get_extra_info("peername") if transport is not None else None
        self.peer: str | None = str(peername[0]) if peername else None
        self._content = resp.content
        self._eof = False

    async def read(self) -> bytes:
        """The next chunk as received; ``b""`` at the end. Raises TransportError."""
        try:
            chunk = await self._content.readany()
        except Exception as exc:  # CancelledError (the fetcher's deadline) is not caught
            err = _translate(exc, self._proto)
            if err is exc:
                raise
            raise err from exc
        if not chunk:
            self._eof = True
        return chunk

    def failure(self) -> TransportError | None:
        """See :meth:`crawler.fetch.transport.Response.failure`."""
        proto = self._proto
        if proto is None:
            return None
        pexc = proto.exception()
        if self._eof:
            # A read-until-close body (no length, not chunked) cut by a reset looks like
            # a clean end to the parser; the protocol still holds the error.
            if isinstance(pexc, OSError) and pexc.errno == errno.ECONNRESET:
                return ConnectionReset()
            return None
        parse_error = _describe_protocol_error(pexc)
        return ProtocolError(parse_error) if parse_error is not None else None

    def close(self, reusable: bool) -> None:
        """Release the connection to the pool, or close it (unread or broken body)."""
        if reusable:
            self._resp.release()
        else:
            self._resp.close()


class AiohttpTransport:
    """:class:`crawler.fetch.transport.Transport` with one pooled aiohttp session.

    ``resolve`` maps host names (``*.suffix`` wildcards allowed) to IP literals, like
    ``curl --resolve``; such names skip DNS and may reach private/loopback addresses.
    ``ssrf_guard=False`` disables the address guard entirely; ``allow_networks`` lets
    chosen networks through it. ``base_resolver`` replaces aiohttp's threaded
    ``getaddrinfo`` resolver (tests inject a fake). ``connector_factory`` is called with
    the keyword arguments the transport would give ``aiohttp.TCPConnector`` and must
    return an ``aiohttp.BaseConnector``: tests use it to install a socket factory that
    records the address it was asked to reach and refuses, so no packet is sent.

    The session is created lazily inside the running loop; use one transport per loop.
    ``session_headers`` are headers the caller sends with (nearly) every request; a
    request whose ``headers`` is that very mapping sends them as the session's defaults.
    ``keepalive_s`` bounds how long an idle connection is kept: with one request per
    host per second, a short keep-alive still reuses the connection for the next request
    to the same host, while bounding idle sockets to about ``pages/s * keepalive_s``
    (file descriptors are the limiting resource). ``source_address`` (an IP literal of this
    machine) is the local address connections are made from; None lets the system choose.
    """

    def __init__(
        self,
        *,
        connect_timeout_s: float = 5.0,
        backstop_s: float | None = None,
        session_headers: Mapping[str, str] | None = None,
        resolve: Mapping[str, str] = MappingProxyType({}),
        dns_ttl_s: float = 300,
        dns_negative_ttl_s: float = 60,
        ssrf_guard: bool = True,
        allow_networks: Iterable[str] = (),
        max_connections: int = 512,
        keepalive_s: float = 5.0,
        clock: Clock = SYSTEM_CLOCK,
        base_resolver: aiohttp.abc.AbstractResolver | None = None,
        connector_factory: Callable[..., aiohttp.BaseConnector] | None = None,
        source_address: str | None = None,
    ) -> None:
        if not connect_timeout_s > 0:
            raise ConfigError(f"fetch.connect_timeout_s must be > 0 (got {connect_timeout_s})")
        if max_connections < 1:
            raise ConfigError(f"fetch.max_connections must be >= 1 (got {max_connections})")
        self._connect_timeout_s = float(connect_timeout_s)
        self._backstop_s = backstop_s
        self._session_headers = session_headers
        self._max_connections = int(max_connections)
        self._keepalive_s = float(keepalive_s)
        self._clock = clock
        self._connector_factory = connector_factory
        if source_address is not None:
            try:
                source_address = str(ipaddress.ip_address(source_address))
            except ValueError as exc:
                raise ConfigError(f"fetch.source_address: expected an IP address of this machine, got {source_address!r}") from exc
        self.source_address = source_address
        self.guard = AddressGuard(ssrf_guard, allow_networks)
        # Built now so a bad ``resolve`` entry fails at construction (ConfigError).
        self.dns = DnsCache(
            resolve,
            ttl_s=dns_ttl_s,
            negative_ttl_s=dns_negative_ttl_s,
            clock=clock,
            base=base_resolver,
            guard=self.guard,
        )
        self._session: aiohttp.ClientSession | None = None

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
        if self.source_address is not None:
            kwargs["local_addr"] = (self.source_address, 0)  # port 0: any free local port
        factory = self._connector_factory or aiohttp.TCPConnector
        self._session = aiohttp.ClientSession(
            connector=factory(**kwargs),
            timeout=aiohttp.ClientTimeout(total=self._backstop_s, sock_connect=self._connect_timeout_s),
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            headers=self._session_headers,
            trust_env=False,
            raise_for_status=False,
            max_line_size=16384,
            max_field_size=32768,
        )
        return self._session

    async def send(self, request: Request) -> AiohttpResponse:
        """GET ``request.target`` without following redirects; see the module docstring."""
        # raw_host: the ASCII form (an IP literal reads the same); URL.host decodes every
        # name through the idna package, ~1% of a crawl's CPU (crawler.fetch.fetcher).
        host = request.target.raw_host or ""
        if self.guard.enabled and _is_ip_literal(host):
            reason = self.guard.check(host, False)  # a literal is never "via override"
            if reason is not None:
                raise AddressRefused(host, reason)
        session = self._session or self._open_session()
        # Headers that are exactly the session's defaults are not passed again: aiohttp
        # merges its defaults for less than it costs to copy a per-request mapping.
        headers = None if request.headers is self._session_headers else request.headers
        try:
            resp = await session.get(request.target, headers=headers, allow_redirects=False)
        except Exception as exc:  # CancelledError (the fetcher's deadline) is not caught
            err = _translate(exc, None, connect_timeout_s=self._connect_timeout_s)
            if err is exc:
                raise
            raise err from exc
        return AiohttpResponse(resp)

    async def close(self) -> None:
        """Close the session, its connections and the DNS cache. Idempotent."""
        session, self._session = self._session, None
        if session is not None:
            await session.close()
        await self.dns.close()

    def stats(self) -> dict[str, Any]:
        """``guard_refusals`` and the DNS cache's counters (``dns``)."""
        return {"guard_refusals": self.guard.refusals, "dns": self.dns.stats()}


def _is_ip_literal(host: str) -> bool:
    """True if ``host`` is an IPv4/IPv6 literal (aiohttp will not resolve it)."""
    if ":" not in host and not host[-1:].isdigit():
        return False  # fast path for ordinary names
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False  # e.g. "127.1": aiohttp rejects such legacy forms itself
    return True


# ---------------------------------------------------------------------- translation


def _translate(exc: Exception, proto: Any, *, connect_timeout_s: float | None = None) -> Exception:
    """The seam's error for an aiohttp (or socket) error; ``exc`` itself if it is none.

    ======================================================  =================  =========  =============================
    exception (aiohttp 3.14)                                becomes            transient  message
    ======================================================  =================  =========  =============================
    ClientConnectorError carrying AddressRefused             AddressRefused     False      refused by address guard: ..
    (from DnsCache or GuardedSocketFactory)
    ... carrying an OSError whose message says so            GuardRefused       False      refused by address guard: ..
    (happy-eyeballs merges the errors of all addresses)
    ClientConnectorError carrying DnsLookupError             DnsLookupError     False      dns: name not resolved: ..
    ClientConnectorDNSError (other)                          NameNotResolved    False      dns: name not resolved (..)
    ClientConnectorCertificateError, ClientSSLError          TLSError           False      tls: ...
    asyncio.TimeoutError, but the protocol holds a parse     ProtocolError      False      invalid chunked encoding
      error (invalid chunk mid-body: aiohttp never wakes
      the reader)
    ConnectionTimeoutError (sock_connect)                    ConnectTimeout     True       connect timeout after Xs
    asyncio.TimeoutError / ServerTimeoutError (backstop)     TimeoutError       (the fetcher names its deadline)
    ClientConnectorError with ECONNRESET                     ConnectionReset    True       connection reset
    ClientConnectorError (refused, unreachable, ...)         ConnectError       True       connect: <strerror>
    ClientPayloadError mentioning a reset                    ConnectionReset    True       connection reset
    ClientPayloadError, protocol holds a chunk parse error   ProtocolError      False      invalid chunked encoding
    ClientPayloadError <- ContentLengthError                 ProtocolError      True       content-length mismatch
    ClientPayloadError <- TransferEncodingError              ProtocolError      True       truncated chunked body
      ("not enough data": server closed mid-chunk)
    ClientPayloadError <- ContentEncodingError/other         ProtocolError      False      incomplete body: ...
    ServerDisconnectedError (closed before/while headers)    ConnectionReset    True       server closed the connection
    ClientResponseError <- LineTooLong / "Too many headers"  ProtocolError      False      header too large
    ClientResponseError <- BadStatusLine                     ProtocolError      False      invalid status line
    ClientResponseError mentioning "chunk"                   ProtocolError      False      invalid chunked encoding
    ClientResponseError / HttpProcessingError (other)        ProtocolError      False      invalid response: ...
    InvalidURL, NonHttpUrlClientError, ValueError            InvalidURL         False      invalid url: ...
    ConnectionResetError, BrokenPipeError, ECONNRESET/EPIPE  ConnectionReset    True       connection reset
    other ClientConnectionError / ClientOSError / OSError    ConnectError       True       connection error: ...
    other ClientError                                        ProtocolError      False      http client error: ...
    anything else (a bug): returned as is                    (the fetcher logs it as "internal")
    ======================================================  =================  =========  =============================
    """
    os_error = getattr(exc, "os_error", None) if isinstance(exc, cexc.ClientConnectorError) else None
    # guard and dns: fresh copies, so the error does not point back at ``exc`` in a cycle
    if isinstance(os_error, AddressRefused):
        return AddressRefused(os_error.ip, os_error.reason)
    if isinstance(exc, (AddressRefused, DnsLookupError, TransportError)):
        return exc
    if isinstance(os_error, OSError) and "refused by address guard" in str(os_error):
        return GuardRefused(f"refused by address guard: {os_error}")
    if isinstance(os_error, DnsLookupError):
        return DnsLookupError(os_error.host, os_error.detail)
    if isinstance(exc, cexc.ClientConnectorDNSError):
        return NameNotResolved(f"dns: name not resolved ({os_error or exc})")
    if isinstance(exc, (cexc.ClientSSLError, cexc.ClientConnectorCertificateError)):
        return TLSError(f"tls: {os_error or exc}")
    # timeouts
    if isinstance(exc, asyncio.TimeoutError):  # includes aiohttp's ServerTimeoutError
        parse_error = _describe_protocol_error(proto.exception() if proto is not None else None)
        if parse_error is not None:
            return ProtocolError(parse_error)
        if isinstance(exc, cexc.ConnectionTimeoutError) and connect_timeout_s is not None:
            return ConnectTimeout(f"connect timeout after {connect_timeout_s}s")
        return TimeoutError(str(exc) or "timed out")
    # connect
    if isinstance(exc, cexc.ClientConnectorError):
        err = os_error if isinstance(os_error, OSError) else exc
        if getattr(err, "errno", None) == errno.ECONNRESET:
            return ConnectionReset()
        return ConnectError(f"connect: {describe_os_error(err)}")
    # body and response
    if isinstance(exc, cexc.ClientPayloadError):
        text = str(exc)
        if "ConnectionResetError" in text or "Connection reset" in text:
            return ConnectionReset()
        parse_error = _describe_protocol_error(proto.exception() if proto is not None else None)
        if parse_error is not None:
            return ProtocolError(parse_error)
        cause = exc.__cause__
        if isinstance(cause, hexc.ContentLengthError):
            return ProtocolError(f"content-length mismatch ({cause.message})", transient=True)
        if isinstance(cause, hexc.TransferEncodingError):
            return ProtocolError("truncated chunked body (server closed mid-chunk)", transient=True)
        return ProtocolError(f"incomplete body: {cause or exc}")
    if isinstance(exc, cexc.ServerDisconnectedError):
        return ConnectionReset("server closed the connection without a complete response")
    if isinstance(exc, (cexc.ClientResponseError, hexc.HttpProcessingError)):
        return ProtocolError(_describe_parse_error(exc))
    if isinstance(exc, (cexc.InvalidURL, cexc.NonHttpUrlClientError, ValueError)):
        return InvalidURL(f"invalid url: {exc}")
    if isinstance(exc, (ConnectionResetError, BrokenPipeError)) or (
        isinstance(exc, OSError) and exc.errno in (errno.ECONNRESET, errno.EPIPE)
    ):
        return ConnectionReset()
    if isinstance(exc, (cexc.ClientConnectionError, OSError)):
        return ConnectError(f"connection error: {describe_os_error(exc)}")
    if isinstance(exc, cexc.ClientError):
        return ProtocolError(f"http client error: {type(exc).__name__}: {exc}")
    return exc


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


def _describe_protocol_error(pexc: BaseException | None) -> str | None:
    """The parse error aiohttp left on a connection's protocol, described, if any."""
    if isinstance(pexc, hexc.HttpProcessingError):
        return _describe_parse_error(pexc)
    return None
