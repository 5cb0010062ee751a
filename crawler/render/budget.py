"""Each render's CPU and memory budget, and the watch that holds a page to it.

A hostile page (``while(true){}``, a JS heap grown until out of memory, a million-node
DOM, ArrayBuffers grown without end) must cost its own render only: fail as ``cap``
within its budget, never slow the other renders of the browser or push the browser out
of memory. How:

* **One renderer process per render.** Each render has its own browser context
  (crawler.render.page), and Chromium never shares a renderer process between two
  contexts: a page's busy main thread or its memory is its own process's, and killing that
  process leaves the other tabs running (tests/integration/test_render_budget.py).
* **The page is watched while it runs.** Chromium dispatches some DevTools methods to a
  busy renderer by interrupting its JavaScript (blink's InspectorTaskRunner):
  ``Performance.getMetrics`` answers within milliseconds even inside ``while(true){}``,
  with the main thread's CPU time (``TaskDuration``, counted in thread ticks by
  ``Performance.enable {timeDomain: threadTicks}``: CPU spent, not time waited under
  contention), the JS heap (``JSHeapUsedSize``) and the DOM size (``Nodes``).
  :class:`BudgetWatch` asks every ``poll_s``; :class:`BudgetMeter` decides. A probe left
  unanswered for ``cpu_s`` means the main thread is busy outside JavaScript (the layout
  of a huge DOM): that too spends the CPU budget.
* **At the budget** the page's JavaScript is stopped (``Runtime.terminateExecution``,
  also dispatched by interrupt; ``Emulation.setScriptExecutionDisabled``), the render
  fails as ``cap`` with the note ``budget_<cpu|heap|nodes>``, and disposing of its
  context kills its renderer process.
* **Backstops between two looks**: V8's old space is capped per renderer at
  :attr:`Budget.v8_heap_mb` (``--js-flags``): past it the renderer dies of OOM; and the
  browser kills a renderer process whose resident memory passes
  :attr:`Budget.renderer_rss_mb` (crawler.render.browser; ArrayBuffers and the DOM live
  outside the JS heap). Either shows as ``Inspector.targetCrashed`` for that tab only:
  :func:`classify_crash` makes it the render's ``cap`` (note ``budget_memory``, not
  retried), unless the whole browser is gone (``crash``, retried once by
  crawler.render.renderer).

:class:`BudgetMeter` is pure logic over the times and numbers it is told, tested with a
mock clock (tests/unit/test_render_budget.py).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from crawler.clock import Clock, within
from crawler.errors import RenderError
from crawler.render.cdp import CdpConnection

__all__ = ["DEFAULT_BUDGET", "Budget", "BudgetMeter", "BudgetWatch", "classify_crash", "over_memory"]

log = logging.getLogger(__name__)

MB = 1024 * 1024
#: How long stopping a page's script may wait for each of its two commands.
STOP_WAIT_S = 0.5


@dataclass(frozen=True)
class Budget:
    """One render's budget (``render.cpu_budget_s``, ``heap_budget_mb``, ``max_dom_nodes``)."""

    cpu_s: float = 3.0  # main-thread CPU seconds of the page's renderer
    heap_mb: int = 256  # JS heap in use
    max_nodes: int = 200_000  # DOM nodes
    poll_s: float = 0.1  # how often the page's metrics are read

    @property
    def v8_heap_mb(self) -> int:
        """V8's own old-space cap per renderer: twice the budget, so the watch fails the
        render first and V8's out-of-memory is only the backstop between two looks."""
        return 2 * self.heap_mb

    @property
    def renderer_rss_mb(self) -> int:
        """Resident memory past which a renderer process is killed: the V8 cap plus room
        for the DOM, layout and ArrayBuffers a fair page holds outside the JS heap."""
        return self.v8_heap_mb + 512


#: The budget of ``render``'s defaults (configs/default.yaml).
DEFAULT_BUDGET = Budget()


class BudgetMeter:
    """Whether a render went past its budget, from the metrics it is shown.

    Feed :meth:`asked` when a metrics probe is sent and :meth:`observed` with its answer;
    :meth:`overdue` says whether an unanswered probe has itself spent the CPU budget.
    Each returns the budget passed (``"cpu"``, ``"heap"``, ``"nodes"``) or None; the
    first passed stays in :attr:`over` with a line in :attr:`detail`.
    """

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.asked_at: float | None = None
        self.over: str | None = None
        self.detail = ""
        self.peak: dict[str, float] = {"cpu_s": 0.0, "heap_mb": 0.0, "nodes": 0.0}

    def asked(self, now: float) -> None:
        """A probe was sent at ``now``."""
        self.asked_at = now

    def observed(self, now: float, metrics: Mapping[str, float]) -> str | None:
        """The answer to the last probe (CDP ``Performance.getMetrics``, by name)."""
        self.asked_at = None
        cpu = float(metrics.get("TaskDuration", 0.0))
        heap = float(metrics.get("JSHeapUsedSize", 0.0)) / MB
        nodes = float(metrics.get("Nodes", 0.0))
        self.peak = {"cpu_s": max(self.peak["cpu_s"], cpu), "heap_mb": max(self.peak["heap_mb"], heap),
                     "nodes": max(self.peak["nodes"], nodes)}
        b = self.budget
        if cpu >= b.cpu_s:
            return self._over("cpu", f"{cpu:.2f} CPU s on the main thread (budget {b.cpu_s} s)")
        if heap >= b.heap_mb:
            return self._over("heap", f"{heap:.0f} MB of JS heap (budget {b.heap_mb} MB)")
        if nodes >= b.max_nodes:
            return self._over("nodes", f"{nodes:.0f} DOM nodes (budget {b.max_nodes})")
        return None

    def overdue(self, now: float) -> str | None:
        """A probe unanswered for ``cpu_s``: the main thread is busy outside JavaScript."""
        if self.asked_at is not None and now - self.asked_at >= self.budget.cpu_s:
            return self._over("cpu", f"main thread unresponsive for {now - self.asked_at:.2f} s "
                                     f"(budget {self.budget.cpu_s} s)")
        return None

    def _over(self, which: str, detail: str) -> str:
        if self.over is None:
            self.over, self.detail = which, detail
        return which


def over_memory(rss_by_pid: Mapping[int, int], limit_bytes: int) -> list[int]:
    """The renderer processes (pid -> resident bytes) past ``limit_bytes``."""
    return sorted(pid for pid, rss in rss_by_pid.items() if rss > limit_bytes)


class BudgetWatch:
    """Reads one tab's metrics every ``poll_s`` and stops the page at its budget.

    Args:
        conn, session: the browser connection and the tab's flattened session.
        fail: called once with the render's failure (``cap``) when a budget is passed.
        note: counts ``budget_<which>`` in the render's notes.
    """

    def __init__(self, conn: CdpConnection, session: str, clock: Clock, budget: Budget,
                 fail: Callable[[RenderError], None], note: Callable[[str], None]) -> None:
        self.conn, self.session, self.clock = conn, session, clock
        self.meter = BudgetMeter(budget)
        self._fail, self._note = fail, note

    async def run(self) -> None:
        """Watch until a budget is passed or the session is gone (then the render's own
        path reports why); cancelled when the render ends."""
        probe: asyncio.Future[dict[str, Any]] | None = None
        try:
            while True:
                now = self.clock.now()
                over: str | None = None
                if probe is not None and probe.done():
                    try:
                        res = probe.result()
                    except RenderError:
                        return
                    probe = None
                    metrics = {m.get("name", ""): float(m.get("value", 0.0)) for m in res.get("metrics", [])}
                    over = self.meter.observed(now, metrics)
                elif probe is not None:
                    over = self.meter.overdue(now)
                if over is not None:
                    await self._stop(over)
                    return
                if probe is None:
                    self.meter.asked(now)
                    probe = asyncio.ensure_future(self.conn.send("Performance.getMetrics", {}, self.session))
                await self.clock.sleep(self.meter.budget.poll_s)
        finally:
            if probe is not None and not probe.done():
                probe.cancel()

    async def _stop(self, which: str) -> None:
        # Both are dispatched by interrupting the page's JavaScript (a renderer busy outside
        # it may not answer: then the context's disposal at the render's end, which kills
        # the renderer process, is what stops it).
        for method, params in (("Runtime.terminateExecution", {}), ("Emulation.setScriptExecutionDisabled", {"value": True})):
            try:
                await within(self.clock, self.conn.send(method, params, self.session), STOP_WAIT_S)
            except (RenderError, asyncio.TimeoutError) as exc:
                log.debug("stopping a page past its budget: %s: %r", method, exc)
        self._note("budget_" + which)
        self._fail(RenderError("cap", f"past its {which} budget: {self.meter.detail}"))


async def classify_crash(conn: CdpConnection, clock: Clock, settle_s: float = 0.2) -> RenderError:
    """The failure of a render whose tab crashed (``Inspector.targetCrashed``): ``cap``
    (its renderer died alone: out of memory, or killed past its memory budget) when the
    browser still answers after ``settle_s``, else ``crash`` (the whole browser went down,
    its renderers first)."""
    await clock.sleep(settle_s)
    if not conn.closed:
        try:
            await within(clock, conn.send("Browser.getVersion"), 2.0)
            return RenderError("cap", "the page's renderer died alone: out of memory or killed past its memory budget")
        except (RenderError, asyncio.TimeoutError) as exc:
            log.debug("browser did not answer after a tab crash: %r", exc)
    return RenderError("crash", "the browser went down under the page")
