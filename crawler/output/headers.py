"""The ``response_headers`` column: a response's header fields as stored with its row.

WARC export (crawler.output.warc) rebuilds the HTTP response from the row, its blob and
these headers, so they are kept as they arrived: in order, names lowercased, a repeated
name's values joined with ", " (RFC 9110 section 5.3, as :class:`crawler.fetch.fetcher.FetchResult`
holds them). They are stored as a JSON array of ``[name, value]`` pairs, so any value
(quotes, commas, non-ASCII) round-trips and a reader needs nothing but ``json``.

Headers come from the web: a server may send a megabyte of them. The stored text is cut
at :data:`MAX_HEADER_BYTES` (whole fields are dropped from the end, and a last
``x-raycrawl-headers-cut`` field says how many), so one hostile response costs one
bounded cell (docs/invariants.md #7).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

__all__ = ["CUT_FIELD", "MAX_HEADER_BYTES", "decode_headers", "encode_headers"]

MAX_HEADER_BYTES = 16_384
"""Largest stored header text (JSON), in characters. Real responses carry ~0.3-2 KB."""

CUT_FIELD = "x-raycrawl-headers-cut"
"""Added as the last field when some were dropped: ``"<n> fields not stored"``."""

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def encode_headers(headers: Mapping[str, str] | None) -> str | None:
    """The column value for ``headers`` (None for no response)."""
    if headers is None:
        return None
    text = _dumps(list(headers.items()))
    if len(text) <= MAX_HEADER_BYTES:
        return text
    kept: list[tuple[str, str]] = []
    size = 2 + 64  # the brackets and room for the cut field
    for name, value in headers.items():
        item = len(_dumps([name, value])) + 1
        if size + item > MAX_HEADER_BYTES:
            break
        kept.append((name, value))
        size += item
    kept.append((CUT_FIELD, f"{len(headers) - len(kept)} fields not stored"))
    return _dumps(kept)


def decode_headers(text: str | None) -> list[tuple[str, str]] | None:
    """The ``[(name, value), ...]`` stored by :func:`encode_headers` (None if none).

    A value this module did not write raises ValueError naming the problem.
    """
    if text is None:
        return None
    try:
        pairs = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"response_headers is not JSON: {text[:80]!r}") from exc
    if not isinstance(pairs, list) or not all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p) for p in pairs
    ):
        raise ValueError(f"response_headers is not a list of [name, value] pairs: {text[:80]!r}")
    return [(name, value) for name, value in pairs]
