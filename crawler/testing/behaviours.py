"""What the hostile server does on each request: one named coroutine per behaviour.

A behaviour gets a :class:`Conn` (the request, the socket writer, byte counting and the
server's settings) and writes raw bytes, well-formed or not. :data:`BEHAVIOURS` names
them all; :class:`~crawler.testing.hostile.HostileServer` picks one per request (by the
``Host`` label or a ``/b/<behaviour>/`` path prefix) and bounds its time.

=============  ============================================================================
behaviour      what it does (N = ``max_body_bytes`` the server was told the crawler uses)
=============  ============================================================================
normal         fast pages: ``/`` links ``/p/1`` .. ``/p/<normal_pages>``
slowloris      headers (Content-Length 10000), then one body byte per ``slowloris_interval_s``
endless        200, no length, 64 KiB chunks until the client leaves (capped in bytes)
oversized      Content-Length ``oversize_factor * N``, all of it sent (client must cut)
lying_length   declares Content-Length 100000, sends 1000 bytes, closes (FIN)
broken_gzip    Content-Encoding gzip: 10 KB of valid deflate, then garbage
bad_chunked    chunked: one good chunk, then a chunk-size line ``ZZZ``
huge_headers   one 1 MiB header line
redirects      ``/`` -> ``/hop/1`` -> ... -> ``/hop/<redirect_chain>`` (302 each, new URL each)
bigrobots      a ``robots_bytes`` (10 MB) robots.txt: ``Disallow: /early/`` at the top,
               ``/middle/`` at 300 KiB, ``/late/`` at 600 KiB (past what RFC 9309 2.5
               says to parse); ``/`` links all three and ``/free``
reset          Content-Length 100000, 1000 bytes, then RST (SO_LINGER 0)
silent         reads the request, never answers (until the client leaves)
bad_status     ``HTTQ/9 banana``
bomb           gzip body inflating to ``bomb_bytes`` (1 GiB) of zeros, ~1 MB on the wire
traversal      HTML full of ``../``, ``%2e%2e/`` and NUL-ish strings; links with ``../``
ssrf           links to :meth:`HostileServer.loopback_targets` (paths under ``/link``) and
               ``/go/<i>`` 302 redirects to them (paths under ``/redirect``)
secret         "you should not see this" (default for unknown hosts, e.g. ``127.0.0.1``)
=============  ============================================================================
"""

from __future__ import annotations

import asyncio
import socket
import struct
import zlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the server imports this module; behaviours only read its settings
    from crawler.testing.hostile import HostileServer

__all__ = [
    "BEHAVIOURS",
    "BIGROBOTS_LATE_OFFSET",
    "BIGROBOTS_MIDDLE_OFFSET",
    "Behaviour",
    "ClientGone",
    "Conn",
    "TRAVERSAL_STRINGS",
    "not_found",
]

_CHUNK = 65536


class ClientGone(Exception):
    """The client closed or reset the connection while we were writing."""


class Conn:
    """What a behaviour gets: the request, the writer, byte counting and the settings."""

    __slots__ = ("server", "reader", "writer", "method", "path", "host", "sent")

    def __init__(self, server: HostileServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 method: str, path: str, host: str) -> None:
        self.server = server
        self.reader = reader
        self.writer = writer
        self.method = method
        self.path = path
        self.host = host
        self.sent = 0

    async def send(self, data: bytes) -> None:
        """Write and drain; raises ClientGone when the peer has left."""
        if self.writer.is_closing():
            raise ClientGone()
        self.writer.write(data)
        self.sent += len(data)
        try:
            await self.writer.drain()
        except (ConnectionError, OSError) as exc:
            raise ClientGone() from exc

    async def respond(self, status: str, body: bytes = b"", headers: dict[str, str] | None = None,
                      content_type: str = "text/html; charset=utf-8") -> None:
        """A complete, well-formed response with Content-Length and Connection: close."""
        h = {"Content-Type": content_type, "Content-Length": str(len(body)), "Connection": "close"}
        h.update(headers or {})
        head = f"HTTP/1.1 {status}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
        await self.send(head.encode("latin-1") + body)

    def reset(self) -> None:
        """Abort with RST instead of FIN (SO_LINGER 0)."""
        sock = self.writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.writer.transport.abort()

    async def wait_client_gone(self) -> None:
        """Return once the client closes its side (EOF or reset)."""
        try:
            while await self.reader.read(4096):
                pass
        except (ConnectionError, OSError):
            pass

    async def pause(self, seconds: float) -> None:
        """Wait ``seconds``, or raise ClientGone as soon as the client hangs up.

        So a stalling behaviour ends (and is logged) when the crawler gives up, not at
        its next write.
        """
        try:
            await asyncio.wait_for(self.wait_client_gone(), seconds)
        except asyncio.TimeoutError:
            return
        raise ClientGone()


Behaviour = Callable[[Conn], Awaitable[None]]

# ------------------------------------------------------------------------ behaviours


def _page(title: str, links: list[str], text: str = "") -> bytes:
    items = "".join(f'<li><a href="{h}">{h}</a></li>' for h in links)
    para = text or f"This is {title}, a page served by the hostile test server."
    return (f"<!doctype html><html><head><title>{title}</title></head><body><h1>{title}</h1>"
            f"<p>{para}</p><ul>{items}</ul></body></html>").encode()


async def normal(c: Conn) -> None:
    """Fast, well-formed pages: ``/`` links every ``/p/<i>``."""
    n = c.server.normal_pages
    if c.path in ("/", ""):
        await c.respond("200 OK", _page("normal root", [f"/p/{i}" for i in range(1, n + 1)]))
    elif c.path.startswith("/p/"):
        await c.respond("200 OK", _page(f"normal page {c.path}", ["/"], f"Normal page number {c.path[3:]} " * 5))
    else:
        await c.respond("404 Not Found", b"not found")


async def slowloris(c: Conn) -> None:
    """Headers at once, then one body byte every ``slowloris_interval_s``."""
    await c.send(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 10000\r\n\r\n")
    for _ in range(10000):
        await c.send(b"x")
        await c.pause(c.server.slowloris_interval_s)


async def endless(c: Conn) -> None:
    """A body without length that never ends (until the client leaves or the byte cap)."""
    await c.send(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nConnection: close\r\n\r\n<html><body>")
    chunk = b"<p>" + b"endless " * (_CHUNK // 8 - 1) + b"</p>"
    while c.sent < c.server.endless_cap_bytes:
        await c.send(chunk)


async def oversized(c: Conn) -> None:
    """A truthful Content-Length far above the crawler's max_body_bytes; all of it is sent."""
    total = c.server.oversize_factor * c.server.max_body_bytes
    await c.send(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nConnection: close\r\n"
                 b"Content-Length: %d\r\n\r\n<html><body>" % total)
    left = total - len(b"<html><body>")
    block = b"<p>" + b"big " * (_CHUNK // 4 - 2) + b"</p>"
    while left > 0:
        piece = block[:left]
        await c.send(piece)
        left -= len(piece)


async def lying_length(c: Conn) -> None:
    """Declares 100000 bytes, sends 1000, closes normally."""
    await c.send(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 100000\r\n\r\n" + b"s" * 1000)


def _broken_gzip_body() -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, 31)
    good = c.compress(_page("broken gzip", ["/"], "compressed " * 1000)) + c.flush(zlib.Z_FULL_FLUSH)
    return good + b"\x07garbage" * 100  # a block of invalid type 3 follows the flush point


_BROKEN_GZIP = _broken_gzip_body()


async def broken_gzip(c: Conn) -> None:
    """Content-Encoding gzip whose stream turns into garbage after a valid prefix."""
    await c.respond("200 OK", _BROKEN_GZIP, {"Content-Encoding": "gzip"})


async def bad_chunked(c: Conn) -> None:
    """Transfer-Encoding chunked with an invalid chunk-size line after the first chunk."""
    await c.send(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nTransfer-Encoding: chunked\r\n\r\n"
                 b"5\r\nhello\r\nZZZ\r\nxx\r\n0\r\n\r\n")
    await c.wait_client_gone()


async def huge_headers(c: Conn) -> None:
    """A 1 MiB header line."""
    await c.send(b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * (1 << 20) + b"\r\nContent-Length: 2\r\n\r\nok")
    await c.wait_client_gone()


async def redirects(c: Conn) -> None:
    """``/`` -> ``/hop/1`` -> ... -> ``/hop/<redirect_chain>``, a new URL at every hop."""
    n = c.server.redirect_chain
    if c.path in ("/", ""):
        hop = 0
    elif c.path.startswith("/hop/") and c.path[5:].isdigit():
        hop = int(c.path[5:])
    else:
        await c.respond("404 Not Found", b"not found")
        return
    if hop >= n:
        await c.respond("200 OK", _page("end of the chain", []))
    else:
        await c.respond("302 Found", b"", {"Location": f"/hop/{hop + 1}"})


#: Where the bigrobots rules sit in the file (bytes from its start): ``/early/`` at the top,
#: ``/middle/`` past a 200 KB page limit but inside the 500 KiB RFC 9309 2.5 says to parse,
#: ``/late/`` beyond it.
BIGROBOTS_MIDDLE_OFFSET = 300 * 1024
BIGROBOTS_LATE_OFFSET = 600 * 1024


async def bigrobots(c: Conn) -> None:
    """A 10 MB robots.txt: only the Disallow lines in its first 500 KiB may apply (RFC 9309 2.5)."""
    if c.path != "/robots.txt":
        if c.path in ("/", ""):
            await c.respond("200 OK", _page("big robots", ["/early/page", "/middle/page", "/late/page", "/free"]))
        else:
            await c.respond("200 OK", _page(f"big robots {c.path}", []))
        return
    total = c.server.robots_bytes
    await c.send(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                 b"Content-Length: %d\r\n\r\n" % total)
    filler = b"# " + b"f" * 1021 + b"\n"  # 1 KiB comment lines
    written = 0

    async def put(data: bytes) -> None:
        nonlocal written
        data = data[: total - written]
        if data:
            await c.send(data)
            written += len(data)

    async def fill_to(offset: int) -> None:
        while written + 64 * len(filler) <= offset:
            await put(filler * 64)
        while written + len(filler) <= offset:
            await put(filler)

    await put(b"User-agent: *\nDisallow: /early/\n")
    await fill_to(BIGROBOTS_MIDDLE_OFFSET)
    await put(b"Disallow: /middle/\n")
    await fill_to(BIGROBOTS_LATE_OFFSET)
    await put(b"Disallow: /late/\n")
    await fill_to(total)
    await put(b"#" * (total - written))


async def reset(c: Conn) -> None:
    """Content-Length 100000, 1000 bytes, then a TCP reset."""
    await c.send(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 100000\r\n\r\n" + b"z" * 1000)
    await c.pause(0.05)
    c.reset()


async def silent(c: Conn) -> None:
    """Accept, read the request, never answer."""
    await c.wait_client_gone()


async def bad_status(c: Conn) -> None:
    """Not HTTP at all."""
    await c.send(b"HTTQ/9 banana\r\n\r\n")
    await c.wait_client_gone()


def _bomb_parts() -> tuple[bytes, bytes, bytes]:
    # With a full flush after each block, every 1 MiB of zeros after the first compresses to
    # the same ~1 KB, so the stream for 1 GiB is built without 1 GiB in memory anywhere.
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = bytes(1 << 20)
    first = comp.compress(block) + comp.flush(zlib.Z_FULL_FLUSH)
    repeat = comp.compress(block) + comp.flush(zlib.Z_FULL_FLUSH)
    return first, repeat, comp.flush()


_BOMB_FIRST, _BOMB_REPEAT, _BOMB_END = _bomb_parts()


async def bomb(c: Conn) -> None:
    """A gzip body of ``bomb_bytes`` zeros (1 GiB by default), about 1 MB on the wire."""
    blocks = max(1, c.server.bomb_bytes >> 20)
    await c.send(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Encoding: gzip\r\n"
                 b"Connection: close\r\n\r\n" + _BOMB_FIRST)
    for _ in range(blocks - 1):
        await c.send(_BOMB_REPEAT)
    await c.send(_BOMB_END)


TRAVERSAL_STRINGS = (
    "../../../../../../etc/passwd",
    "..\\..\\..\\windows\\system32\\config\\sam",
    "%2e%2e%2f%2e%2e%2fetc%2fshadow",
    "....//....//etc/hosts",
    "/etc/passwd\x00.html",
    "blobs/../../../../tmp/pwned.gz",
)


async def traversal(c: Conn) -> None:
    """A page whose text and links look like path traversal (they must stay data)."""
    links = ["../../../../etc/passwd", "/a/../../b/./../c", "..%2f..%2fsecret", "/x/%2e%2e/%2e%2e/y"]
    text = " ".join(TRAVERSAL_STRINGS).replace("\x00", "&#0;")
    body = _page(f"traversal {c.path}", links, text)
    await c.respond("200 OK", body)


async def ssrf(c: Conn) -> None:
    """Links to loopback targets (paths under ``/link``) and ``/go/<i>`` redirects to them
    (paths under ``/redirect``): the crawler must refuse every one."""
    links = c.server.loopback_targets("/link")
    hops = c.server.loopback_targets("/redirect")
    if c.path.startswith("/go/") and c.path[4:].isdigit() and int(c.path[4:]) < len(hops):
        await c.respond("302 Found", b"", {"Location": hops[int(c.path[4:])]})
        return
    if c.path in ("/", ""):
        await c.respond("200 OK", _page("ssrf lure", links + [f"/go/{i}" for i in range(len(hops))] + ["/fine"]))
        return
    await c.respond("200 OK", _page(f"ssrf {c.path}", []))


async def secret(c: Conn) -> None:
    """What an internal service would answer: no crawler may ever request it."""
    await c.respond("200 OK", b"you should not see this", content_type="text/plain")


async def not_found(c: Conn) -> None:
    """A quick 404 (robots.txt of every host but bigrobots)."""
    await c.respond("404 Not Found", b"", content_type="text/plain")


BEHAVIOURS: dict[str, Behaviour] = {
    f.__name__: f
    for f in (
        normal, slowloris, endless, oversized, lying_length, broken_gzip, bad_chunked, huge_headers,
        redirects, bigrobots, reset, silent, bad_status, bomb, traversal, ssrf, secret,
    )
}
"""Every behaviour by name (also the host label that selects it)."""
