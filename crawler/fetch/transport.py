"""The transport seam of the fetcher: send one GET, stream its response (httpx's idea).

:class:`crawler.fetch.fetcher.Fetcher` owns HTTP policy: which headers to send, the deadline
on the injected clock, how much body to keep, content decoding, and the outcome of every
failure. A :class:`Transport` owns the wire: connections, DNS, TLS and the SSRF guard.
It sends one request and returns a :class:`Response` as soon as the status line and
headers are in; the fetcher then reads the body chunk by chunk and closes the response.

A transport translates its library's errors at this boundary into the small tree below
(or the resolver's own :class:`~crawler.fetch.dns.DnsLookupError` /
:class:`~crawler.fetch.dns.AddressRefused`), so the fetcher's outcome table never names a
library exception. Implementations: :class:`crawler.fetch.aiohttp_transport.AiohttpTransport`
(the real one) and :class:`crawler.testing.fakes.FakeTransport` (scripted, no sockets).
"""

from __future__ import annotations

import errno
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from yarl import URL

from crawler.errors import CrawlError

__all__ = [
    "ConnectError",
    "ConnectTimeout",
    "ConnectionReset",
    "GuardRefused",
    "InvalidURL",
    "NameNotResolved",
    "ProtocolError",
    "Request",
    "Response",
    "TLSError",
    "Transport",
    "TransportError",
    "describe_os_error",
]


@dataclass(slots=True)
class Request:
    """One GET as the fetcher sends it."""

    url: str  # the URL as given to Fetcher.fetch: what fakes are scripted by
    target: URL  # the same URL parsed (already percent-encoded URLs are kept as they are)
    headers: Mapping[str, str]  # every header the fetcher sends (User-Agent, Accept-Encoding, ...)


class Response(Protocol):
    """A response whose status and headers have arrived; the body is read on demand."""

    status: int
    headers: Collection[tuple[str, str]]  # as received, repeated names kept
    peer: str | None  # the address connected to, when known

    async def read(self) -> bytes:
        """The next chunk of the body as sent (still content-encoded); ``b""`` at its end.

        Raises :class:`TransportError` when the body breaks off (reset, bad framing).
        """

    def failure(self) -> TransportError | None:
        """A failure the connection recorded that :meth:`read` did not raise, or None.

        Asked after a body that looked complete (a reset can end a read-until-close
        body exactly like a clean close) and after a read that hit the fetcher's
        deadline (the parser may have found bad framing and left the reader waiting).
        """

    def close(self, reusable: bool) -> None:
        """Give the connection back: to the pool if ``reusable`` (body read to its end)."""


class Transport(Protocol):
    """Sends requests; see the module docstring."""

    async def send(self, request: Request) -> Response:
        """Send ``request`` and wait for the status line and headers.

        Raises :class:`TransportError`, :class:`~crawler.fetch.dns.DnsLookupError` or
        :class:`~crawler.fetch.dns.AddressRefused`; never follows redirects. May run past any
        deadline: the fetcher cancels it on its own clock.
        """

    async def close(self) -> None:
        """Close every connection. Idempotent."""

    def stats(self) -> dict[str, Any]:
        """Counters merged into :meth:`Fetcher.stats` (the real one: DNS and guard)."""


# --------------------------------------------------------------------------- errors


class TransportError(CrawlError):
    """A request failed below HTTP: carries its ``FetchResult.error_kind`` and whether
    it is worth retrying. Subclasses fix the kind; ``transient`` can be set per error.

    Never escapes :meth:`Fetcher.fetch`: it becomes a result.
    """

    kind = "connect"
    transient = True
    default_message = "transport error"

    def __init__(self, message: str | None = None, *, transient: bool | None = None, ip: str | None = None) -> None:
        super().__init__(message if message is not None else self.default_message)
        if transient is not None:
            self.transient = transient
        self.ip = ip  # the address refused or reached, when it matters to the result


class ConnectError(TransportError):
    """No connection: refused, unreachable, or another socket error."""

    kind, transient, default_message = "connect", True, "connect: connection refused"


class ConnectTimeout(TransportError):
    """The TCP connect timed out (``connect_timeout_s``, a socket concern of the transport)."""

    kind, transient, default_message = "timeout", True, "connect timeout"


class ConnectionReset(TransportError):
    """The peer reset or closed the connection before the response was complete."""

    kind, transient, default_message = "reset", True, "connection reset"


class ProtocolError(TransportError):
    """The response broke HTTP: bad status line, oversized headers, bad framing."""

    kind, transient, default_message = "protocol", False, "invalid response"


class TLSError(TransportError):
    """The TLS handshake or certificate check failed."""

    kind, transient, default_message = "tls", False, "tls: handshake failed"


class NameNotResolved(TransportError):
    """DNS failed in a way the resolver did not report as a DnsLookupError."""

    kind, transient, default_message = "dns", False, "dns: name not resolved"


class GuardRefused(TransportError):
    """The SSRF guard refused the destination (when no single address can be named)."""

    kind, transient, default_message = "guard", False, "refused by address guard"


class InvalidURL(TransportError):
    """The library could not send to this URL."""

    kind, transient, default_message = "url", False, "invalid url"


def describe_os_error(exc: BaseException) -> str:
    """A short lowercase reason for a socket error ("connection refused", ...)."""
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
