"""The records that cross between a host shard and a render worker.

A shard hands a :class:`RenderJob` over (the page's own response: it is never fetched
again, docs/invariants.md #12) and gets a :class:`RenderReply` back. While the page
renders, every request the browser makes comes back to the shard as a
:class:`SubRequest` and is answered with a :class:`SubResponse`: the shard owns the
host, so its politeness gate, robots rules, scope and User-Agent decide (crawler.render.gate).
All four are plain picklable dataclasses, so the same records cross a Ray call.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["RenderJob", "RenderReply", "SubRequest", "SubResponse", "FAIL_REASONS"]

#: Why a render gave no page (counted as ``render_fallback_<reason>``; the raw page is stored).
#: ``navigated``: the top frame holds another document than the fetched one (crawler.render.navigation).
FAIL_REASONS = ("timeout", "crash", "cap", "protocol", "launch", "not_html", "unavailable", "navigated")


@dataclass(frozen=True, slots=True)
class RenderJob:
    """One page to render: its URL, the crawler's response to it, and a time budget."""

    render_id: str
    url: str
    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes
    timeout_s: float


@dataclass(frozen=True, slots=True)
class SubRequest:
    """A request the browser made while rendering (``resource_type`` as CDP names it:
    Document, Script, XHR, Fetch, Image, Stylesheet, Font, Media, Other...)."""

    render_id: str
    url: str
    method: str
    resource_type: str


@dataclass(frozen=True, slots=True)
class SubResponse:
    """The crawler's answer: a response to fulfil the request with, or ``refused`` (the
    reason it was not sent: robots, scope, offhost, blocked_type, cap, method, error)."""

    status: int = 0
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    refused: str | None = None


@dataclass(slots=True)
class RenderReply:
    """What a render produced: the DOM serialised (None: failed, ``reason`` says why)."""

    html: str | None
    reason: str  # "ok" or one of FAIL_REASONS
    elapsed_s: float = 0.0
    requests: int = 0  # browser requests the shard was asked to answer
    detail: str = ""
    browser_rss: int = 0  # bytes, of the browser that rendered it (0: unknown)
    notes: dict[str, int] = field(default_factory=dict)
    #: (url, method) the top frame tried to navigate to, refused (crawler.render.navigation).
    navigations: tuple[tuple[str, str], ...] = ()
