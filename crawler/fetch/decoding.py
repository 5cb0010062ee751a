"""Content-Encoding decoding for the fetcher, bounded by the body limit.

The fetcher asks for ``Accept-Encoding: gzip, deflate`` and decodes the body itself
(aiohttp's ``auto_decompress`` is off) so decoded bytes never exceed the caller's budget:
:meth:`Inflater.feed` passes ``max_length`` to ``zlib.decompressobj(...).decompress``, so a
gzip bomb is cut after ``max_body_bytes`` with bounded memory and CPU.

A corrupt stream keeps what decoded before the damage (:class:`DecodeError.partial`);
codings we do not decode ("br", "zstd", stacked codings) are kept encoded with a note,
rather than guessed at.
"""

from __future__ import annotations

import zlib
from typing import Any

from crawler.errors import CrawlError

__all__ = ["ACCEPT_ENCODING", "DecodeError", "Inflater", "decoder_for"]

#: The codings :func:`decoder_for` can undo: the only ones the fetcher asks for.
ACCEPT_ENCODING = "gzip, deflate"


class DecodeError(CrawlError):
    """The compressed body is corrupt; the message is the user-facing reason.

    ``partial`` holds what the failing chunk decoded before the damage.
    """

    def __init__(self, message: str, partial: bytes = b"") -> None:
        super().__init__(message)
        self.partial = partial


class Inflater:
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

        Raises DecodeError on corrupt input. Input left over when the budget is reached
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
                        raise DecodeError(f"broken {self.name} stream (not gzip data)")
                    self._done = True  # garbage after the last member
                    break
                d = self._d
            backup = d.copy()  # ~0.2 us; lets a failure keep what decoded before the damage
            try:
                chunk = d.decompress(data, budget - len(out))
            except zlib.error as exc:
                raise DecodeError(
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


def decoder_for(content_encoding: str | None) -> tuple[Inflater | None, str | None]:
    """(decoder, note) for a Content-Encoding header value.

    No decoder for identity (or no header); a note, and no decoder, for codings we do
    not decode: the body is then kept as the server sent it.
    """
    if not content_encoding:
        return None, None
    codings = [c.strip().lower() for c in content_encoding.split(",")]
    codings = [c for c in codings if c and c != "identity"]
    if not codings:
        return None, None
    if len(codings) == 1:
        coding = codings[0]
        if coding in ("gzip", "x-gzip"):
            return Inflater("gzip"), None
        if coding == "deflate":
            return Inflater("deflate"), None
    # We only ask for gzip/deflate; keep what the server sent rather than guess.
    return None, f"unsupported content-encoding {content_encoding!r}: body kept encoded"
