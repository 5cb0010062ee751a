"""The shard's side of rendering: decide, hand the page over, take the DOM or fall back.

The :class:`~crawler.engine.pipeline.PagePipeline` calls :meth:`Renderer.render` for each
fetched HTML page after parsing its raw HTML. The renderer asks the
:class:`~crawler.render.decide.RenderDecider`; to render, it opens the page's account
at the :class:`~crawler.render.gate.RenderGate` and hands a
:class:`~crawler.render.jobs.RenderJob` (URL, status, headers, body, time budget) to a
:class:`RenderService`: the local :class:`~crawler.render.browser.BrowserPool`, or on
Ray a render actor (actors/render.py) that sends the browser's requests back here.

The shard's event loop never waits on a browser: the URL's own task awaits the reply
while the loop dispatches other hosts. The page's host stays held by the frontier for
that time (its task has not ended), which is what lets the gate spend the host's
allowance on the render's requests without racing the frontier.

A render whose browser (or render actor) crashed is tried once more (the pool starts a
fresh browser; on Ray another actor may take it). Whatever happens to the render
(deadline, browser or actor crash, cap, protocol error), the page is not lost: :meth:`render` returns a :class:`RenderedPage` with
``html`` None and the reason, counted as ``render_fallback_<reason>``, and the pipeline
stores the raw response as it would have without rendering.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from dataclasses import dataclass
from typing import Awaitable, Callable, Protocol, TYPE_CHECKING

from crawler.clock import Clock, within
from crawler.fetch.fetcher import FetchResult
from crawler.parse import ParsedPage, parse_page
from crawler.render.decide import Decision, RenderDecider, render_gained
from crawler.render.gate import RenderGate
from crawler.render.jobs import RenderJob, RenderReply, SubRequest, SubResponse
from crawler.render.navigation import with_navigations

if TYPE_CHECKING:
    from crawler.counters import ShardCounters

__all__ = ["NoRenderService", "RenderService", "RenderedPage", "Renderer"]

log = logging.getLogger(__name__)

#: Extra time the shard gives a render service past the render's own budget (a reply
#: in transit) before it falls back with ``timeout``.
GRACE_S = 5.0


class RenderService(Protocol):
    """Renders a job, sending each browser request to ``subfetch`` (never raises but
    CancelledError and, for remote services, the transport's errors)."""

    async def render(self, job: RenderJob, subfetch: Callable[[SubRequest], Awaitable[SubResponse]]) -> RenderReply: ...


class NoRenderService:
    """The service of a crawl that renders nothing although ``render.mode`` asks for it
    (on Ray: no render actor could be placed, actors/placement.py): every render falls
    back at once as ``unavailable``, counted, and the raw page is stored."""

    def __init__(self, why: str) -> None:
        self.why = why

    async def render(self, job: RenderJob, subfetch: Callable[[SubRequest], Awaitable[SubResponse]]) -> RenderReply:
        return RenderReply(None, "unavailable", detail=self.why)


@dataclass(slots=True)
class RenderedPage:
    """What rendering gave: the DOM (``body``, ``parsed``) or ``None`` and why not."""

    decision: Decision
    body: bytes | None = None
    parsed: ParsedPage | None = None  # the DOM's; on a fallback, the raw page's plus its navigations' targets
    fallback: str | None = None  # reason the raw page is stored although rendering was decided
    gained: bool = False


class Renderer:
    """One shard's renderer (see the module docstring)."""

    def __init__(self, shard_id: str, decider: RenderDecider, gate: RenderGate, service: RenderService, clock: Clock,
                 *, timeout_s: float, counters: ShardCounters, user_agent_token: str, max_links: int) -> None:
        self.shard_id = shard_id
        self.decider, self.gate, self.service, self.clock = decider, gate, service, clock
        self.timeout_s = timeout_s
        self.counters = counters
        self._ua_token, self._max_links = user_agent_token, max_links
        self._ids = itertools.count(1)
        self.render_times: list[float] = []  # seconds, of successful renders (bounded)

    async def render(self, host: str, url: str, res: FetchResult, parsed: ParsedPage | None) -> RenderedPage:
        """Decide for one fetched page; render it if so (see the module docstring)."""
        decision = self.decider.decide(host, res.body, parsed)
        self.counters.families["render_decision_" + decision.reason] += 1
        if not decision.render or parsed is None:
            return RenderedPage(decision)
        self.counters.render_started += 1
        reply = await self._attempt(host, url, res)
        if reply.reason == "crash":
            # The browser or its actor died under this page (maybe for another page's
            # sake): once more, on a fresh one, before falling back.
            self.counters.render_retried_crash += 1
            reply = await self._attempt(host, url, res)
        self._count_navigations(reply)
        if reply.html is None:
            self.counters.families["render_fallback_" + reply.reason] += 1
            # Where the page tried to go is still a link of it (crawler.render.navigation).
            kept = with_navigations(parsed, reply.navigations, None) if reply.navigations else None
            return RenderedPage(decision, parsed=kept, fallback=reply.reason)
        body = reply.html.encode("utf-8", "replace")
        headers = {k: v for k, v in res.headers.items() if k != "content-type"}
        headers["content-type"] = "text/html; charset=utf-8"  # the DOM is serialised as UTF-8
        page = parse_page(body, url, headers["content-type"], headers, user_agent_token=self._ua_token,
                          max_links=self._max_links)
        page = with_navigations(page, reply.navigations, parsed)
        gained = render_gained(parsed, page)
        self.decider.learn(host, gained)
        self.counters.rendered += 1
        self.counters.render_gained += gained
        if len(self.render_times) < 10_000:
            self.render_times.append(reply.elapsed_s)
        return RenderedPage(decision, body, page, gained=gained)

    def _count_navigations(self, reply: RenderReply) -> None:
        """A GET target is followed as a link; any other method is counted, never sent."""
        for _url, method in reply.navigations:
            self.counters.families["render_navigation_" + ("link" if method == "GET" else "post")] += 1

    async def _attempt(self, host: str, url: str, res: FetchResult) -> RenderReply:
        """One hand-over to the service, within the render's budget (plus transit grace)."""
        render_id = f"{self.shard_id}:{next(self._ids)}"
        job = RenderJob(render_id, url, res.status or 200, tuple(res.headers.items()), res.body, self.timeout_s)
        self.gate.open(render_id, host, self.timeout_s)
        try:
            reply = await within(self.clock, self.service.render(job, self.gate.answer), self.timeout_s + GRACE_S)
        except asyncio.TimeoutError:
            reply = RenderReply(None, "timeout", detail="no reply from the render service")
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a dead render actor costs the render, not the page
            log.warning("render of %s failed in its service: %r", url, exc)
            reply = RenderReply(None, "crash", detail=repr(exc))
        finally:
            # Its requests still in flight end first (each is bounded by the fetch timeout).
            await self.gate.close(render_id)
        for key, n in reply.notes.items():
            self.counters.families["render_" + key] += n
        return reply
