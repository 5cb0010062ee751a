"""Rendering one page in a fresh browser context, with every request answered by the crawler.

The order of one render (CDP methods in brackets):

1. a fresh context [``Target.createBrowserContext``] and tab in it, attached as a
   flattened session: no cookies, cache or storage leak from one page to the next;
2. every request of the tab is paused before it leaves the browser
   [``Fetch.enable`` with the pattern ``*`` at the ``Request`` stage];
3. navigate to the page's URL; the document request is answered from the response the
   crawler already has [``Fetch.fulfillRequest``]: the page is fetched once
   (docs/invariants.md #12). Any later document request is refused: an iframe's, and the
   top frame's own navigations (script, meta refresh, form, ``window.open``), whose
   targets become links of the page (crawler.render.navigation);
4. every other request is handed to ``subfetch`` (the shard's gate: politeness, robots,
   scope, User-Agent, type blocks, caps) and its answer fulfilled, or the request failed
   [``Fetch.failRequest`` ``BlockedByClient``];
5. wait by :class:`~crawler.render.waitrule.WaitRule` (a MutationObserver, installed
   before any page script runs, counts DOM changes; it is read every ``poll_s``), while
   :class:`~crawler.render.budget.BudgetWatch` holds the page to its CPU and memory
   budget (past it, or when its tab crashes alone, the render fails as ``cap``);
6. serialise the DOM [``Runtime.evaluate``] if the top frame still holds the fetched
   document (else the render fails as ``navigated``), and dispose of the context.

The browser is started so that it cannot reach any host itself (crawler.render.browser:
every name resolves to nothing), so a request that escaped step 2 would fail, not leak.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from typing import Any, Awaitable, Callable, Coroutine

from crawler.clock import Clock, within
from crawler.errors import RenderError
from crawler.render.budget import DEFAULT_BUDGET, Budget, BudgetWatch, classify_crash
from crawler.render.cdp import CdpConnection
from crawler.render.jobs import RenderJob, RenderReply, SubRequest, SubResponse
from crawler.render.navigation import TopFrameNavigations
from crawler.render.waitrule import WaitRule

__all__ = ["PageRenderer", "SubFetch"]

log = logging.getLogger(__name__)

#: ``await subfetch(request)`` -> the crawler's answer to one browser request.
SubFetch = Callable[[SubRequest], Awaitable[SubResponse]]

# Counts DOM mutations from before the first page script runs.
_OBSERVER = """(() => { window.__rcMut = 0; const o = new MutationObserver(m => { window.__rcMut += m.length; });
const start = () => o.observe(document, {subtree: true, childList: true, attributes: true, characterData: true});
if (document.documentElement) start(); else document.addEventListener('readystatechange', start, {once: true}); })();"""
_READ_MUT = "window.__rcMut|0"
_SERIALISE = ("(document.doctype ? '<!DOCTYPE ' + document.doctype.name + '>' : '')"
              " + (document.documentElement ? document.documentElement.outerHTML : '')")
# Hop-by-hop and encoding headers of the crawler's response: the body handed over is
# already decoded, and its length is the body's.
_DROP_HEADERS = frozenset({"content-encoding", "content-length", "transfer-encoding", "connection", "keep-alive"})


def _fulfil_headers(headers: tuple[tuple[str, str], ...]) -> list[dict[str, str]]:
    return [{"name": k, "value": v} for k, v in headers if k.lower() not in _DROP_HEADERS]


class PageRenderer:
    """Renders pages on one browser connection (one instance per browser process).

    Args:
        conn: the browser's DevTools connection.
        clock: waits and the wait rule's times.
        quiet_s, max_wait_s: the wait rule.
        poll_s: how often the DOM's mutation count is read.
        user_agent: what ``navigator.userAgent`` says (requests carry the crawler's own
            header anyway: they are sent by the crawler's fetcher).
        budget: each render's CPU and memory budget (crawler.render.budget).
    """

    def __init__(self, conn: CdpConnection, clock: Clock, *, quiet_s: float, max_wait_s: float,
                 poll_s: float = 0.05, user_agent: str = "", budget: Budget = DEFAULT_BUDGET) -> None:
        self.conn = conn
        self.clock = clock
        self.quiet_s, self.max_wait_s, self.poll_s = quiet_s, max_wait_s, poll_s
        self.user_agent = user_agent
        self.budget = budget

    async def render(self, job: RenderJob, subfetch: SubFetch) -> RenderReply:
        """Render ``job`` (never raises except CancelledError: a failure is the reply's reason)."""
        start = self.clock.now()
        state = _Render(self, job, subfetch)
        try:
            html = await within(self.clock, state.guarded(), job.timeout_s)
            return RenderReply(html, "ok", self.clock.now() - start, state.requests, state.rule.why, notes=state.notes,
                               navigations=tuple(state.nav.targets))
        except asyncio.TimeoutError:
            return RenderReply(None, "timeout", self.clock.now() - start, state.requests, f"no page within {job.timeout_s}s",
                               notes=state.notes, navigations=tuple(state.nav.targets))
        except RenderError as exc:
            return RenderReply(None, exc.reason, self.clock.now() - start, state.requests, str(exc), notes=state.notes,
                               navigations=tuple(state.nav.targets))
        finally:
            await state.dispose()


class _Render:
    """One render's state: its context, session, open requests and wait rule."""

    def __init__(self, owner: PageRenderer, job: RenderJob, subfetch: SubFetch) -> None:
        self.o, self.job, self.subfetch = owner, job, subfetch
        self.rule = WaitRule(owner.quiet_s, owner.max_wait_s)
        self.ctx: str | None = None
        self.session: str | None = None
        self.document_served = False
        self.requests = 0
        self.notes: dict[str, int] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.changed = asyncio.Event()
        self.failure: RenderError | None = None
        self.nav = TopFrameNavigations()
        self.loader_id: str | None = None
        self.failed = asyncio.Event()  # set with ``failure``: ends the render even mid-command

    async def guarded(self) -> str:
        """:meth:`run`, ended by the first failure (a budget passed, a tab crash) even while
        it waits on a command a busy page will not answer."""
        run = asyncio.ensure_future(self.run())
        failed = asyncio.ensure_future(self.failed.wait())
        try:
            await asyncio.wait({run, failed}, return_when=asyncio.FIRST_COMPLETED)
            if run.done():
                return run.result()
            raise self.failure or RenderError("protocol", "render failed")
        finally:
            for t in (run, failed):
                t.cancel()
            await asyncio.gather(run, failed, return_exceptions=True)

    def _fail(self, err: RenderError) -> None:
        if self.failure is None:
            self.failure = err
            self.failed.set()

    async def run(self) -> str:
        conn, clock = self.o.conn, self.o.clock
        self.ctx = (await conn.send("Target.createBrowserContext", {"disposeOnDetach": True}))["browserContextId"]
        tid = (await conn.send("Target.createTarget", {"url": "about:blank", "browserContextId": self.ctx}))["targetId"]
        self.session = (await conn.send("Target.attachToTarget", {"targetId": tid, "flatten": True}))["sessionId"]
        conn.listen(self.session, self._event)
        s = self.session
        await conn.send("Fetch.enable", {"patterns": [{"urlPattern": "*", "requestStage": "Request"}]}, s)
        await conn.send("Page.enable", {}, s)
        await conn.send("Page.addScriptToEvaluateOnNewDocument", {"source": _OBSERVER}, s)
        # CPU time in thread ticks: what the page spent, not what it waited for a core.
        await conn.send("Performance.enable", {"timeDomain": "threadTicks"}, s)
        self._spawn(BudgetWatch(conn, s, clock, self.o.budget, self._fail, self._note).run())
        if self.o.user_agent:
            await conn.send("Emulation.setUserAgentOverride", {"userAgent": self.o.user_agent}, s)
        nav = await conn.send("Page.navigate", {"url": self.job.url}, s)
        if nav.get("errorText"):
            raise RenderError("protocol", f"navigation failed: {nav['errorText']}")
        self.loader_id = nav.get("loaderId") or None
        mutations = 0
        while True:
            self._check()
            now = clock.now()
            if self.rule.ready(now):
                break
            if self.rule.loaded_at is not None:
                seen = (await conn.send("Runtime.evaluate", {"expression": _READ_MUT, "returnByValue": True}, s))
                count = int(seen.get("result", {}).get("value") or 0)
                if count != mutations:
                    mutations = count
                    self.rule.dom_changed(clock.now())
                    continue
            self.changed.clear()
            wait = self.rule.next_check(clock.now(), self.o.poll_s)
            try:
                await within(clock, self.changed.wait(), max(wait, 0.001))
            except asyncio.TimeoutError:
                pass  # time to look again
        self.notes["wait_" + self.rule.why] = 1
        self._check_document()
        out = await conn.send("Runtime.evaluate", {"expression": _SERIALISE, "returnByValue": True}, s)
        self._check()
        self._check_document()  # a commit between the check and the evaluation
        return str(out.get("result", {}).get("value") or "")

    def _check_document(self) -> None:
        """Never a browser error page or another document as the page (crawler.render.navigation)."""
        why = self.nav.replaced(self.loader_id)
        if why is not None:
            raise RenderError("navigated", f"render of {self.job.url}: {why}")

    def _check(self) -> None:
        if self.failure is not None:
            raise self.failure

    def _event(self, method: str, params: dict[str, Any]) -> None:
        now = self.o.clock.now()
        if method == "Fetch.requestPaused":
            self._paused(params)
        elif method == "Page.domContentEventFired":
            self.rule.dom_content_loaded(now)
        elif method == "Page.frameNavigated":
            self.nav.committed(params.get("frame", {}))
        elif method == "Page.frameStoppedLoading" and self.nav.stopped_loading(params.get("frameId")):
            # A navigation started while parsing stops the parser: no DOMContentLoaded will come.
            self.rule.dom_content_loaded(now)
        elif method == "Page.windowOpen":
            # The popup opens in a tab without interception, whose requests cannot resolve
            # any name (crawler.render.browser); its URL is a link of this page.
            self._note("navigation_window_open")
            self.nav.attempt(str(params.get("url", "")), "GET")
        elif method == "Inspector.targetCrashed":
            self._spawn(self._tab_crashed())
        elif method == "Connection.closed":
            self._fail(RenderError("crash", f"browser {method}"))
        elif method == "Page.javascriptDialogOpening":
            self.o.conn.post("Page.handleJavaScriptDialog", {"accept": False}, self.session)
        self.changed.set()

    def _paused(self, p: dict[str, Any]) -> None:
        rid, req, rtype = p["requestId"], p.get("request", {}), p.get("resourceType", "Other")
        url = req.get("url", "")
        conn, s = self.o.conn, self.session
        if rtype == "Document" and not self.document_served:
            # The page itself (the fresh tab's first document request is the navigation
            # to job.url, however the browser spells it: default port, IDN, escapes):
            # the crawler's own response, never a second GET.
            self.document_served = True
            self.nav.document_served(p.get("frameId"))
            conn.post("Fetch.fulfillRequest", {
                "requestId": rid, "responseCode": self.job.status,
                "responseHeaders": _fulfil_headers(self.job.headers),
                "body": base64.b64encode(self.job.body).decode("ascii"),
            }, s)
            return
        if rtype == "Document" and self.nav.is_top(p.get("frameId")):
            # The top frame navigating away: refused so that nothing commits (``Aborted``;
            # ``BlockedByClient`` would commit Chromium's error page as the document).
            self._note("navigation_refused")
            self.nav.attempt(url, req.get("method", "GET"))
            conn.post("Fetch.failRequest", {"requestId": rid, "errorReason": "Aborted"}, s)
            return
        if rtype == "Document":  # an iframe's: its error page stays inside the iframe
            self._note("refused_document")
            conn.post("Fetch.failRequest", {"requestId": rid, "errorReason": "BlockedByClient"}, s)
            return
        self.requests += 1
        self.rule.request_started(self.o.clock.now())
        task = asyncio.ensure_future(self._answer(rid, SubRequest(self.job.render_id, url, req.get("method", "GET"), rtype)))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _tab_crashed(self) -> None:
        # This tab's renderer died: alone (out of memory, or killed past its memory budget
        # by crawler.render.browser) it is this page's failure, "cap"; with the whole
        # browser it is "crash", tried again by crawler.render.renderer.
        err = await classify_crash(self.o.conn, self.o.clock)
        if err.reason == "cap":
            self._note("budget_memory")
        self._fail(err)

    async def _answer(self, rid: str, sub: SubRequest) -> None:
        conn, s = self.o.conn, self.session
        try:
            try:
                res = await self.subfetch(sub)
            except Exception as exc:  # noqa: BLE001 - a failed answer fails that one request
                log.warning("render subrequest %s failed: %r", sub.url, exc)
                res = SubResponse(refused="error")
            if res.refused is not None:  # counted by the gate that refused it
                if res.refused == "cap":
                    # Past the per-render cap: the page is incomplete, fall back to raw.
                    self._fail(RenderError("cap", f"render of {self.job.url} went past its request or byte cap"))
                await conn.send("Fetch.failRequest", {"requestId": rid, "errorReason": "BlockedByClient"}, s)
            else:
                self._note("served")
                await conn.send("Fetch.fulfillRequest", {
                    "requestId": rid, "responseCode": res.status, "responseHeaders": _fulfil_headers(res.headers),
                    "body": base64.b64encode(res.body).decode("ascii"),
                }, s)
        except RenderError as exc:
            log.debug("render %s: answering %s: %s", self.job.url, sub.url, exc)
        finally:
            self.rule.request_ended(self.o.clock.now())
            self.changed.set()

    def _note(self, key: str) -> None:
        self.notes[key] = self.notes.get(key, 0) + 1

    async def dispose(self) -> None:
        for t in list(self.tasks):
            t.cancel()
        if self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)
        if self.session is not None:
            self.o.conn.listen(self.session, None)
        if self.ctx is not None and not self.o.conn.closed:
            try:
                await self.o.conn.send("Target.disposeBrowserContext", {"browserContextId": self.ctx})
            except RenderError as exc:
                log.debug("disposing a browser context: %s", exc)
