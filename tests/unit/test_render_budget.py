"""A render's budget (crawler.render.budget): the meter's decisions and the watch's
commands, on a mock clock and a scripted DevTools connection; no browser."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from crawler.clock import MockClock
from crawler.errors import RenderError
from crawler.render.budget import MB, Budget, BudgetMeter, BudgetWatch, classify_crash, over_memory

BUDGET = Budget(cpu_s=3.0, heap_mb=256, max_nodes=200_000, poll_s=0.1)


def metrics(cpu: float = 0.1, heap_mb: float = 2.0, nodes: int = 50) -> dict[str, float]:
    return {"TaskDuration": cpu, "JSHeapUsedSize": heap_mb * MB, "Nodes": float(nodes), "Timestamp": 1.0}


@pytest.mark.parametrize(("seen", "over"), [
    (metrics(), None),
    (metrics(cpu=2.99), None),
    (metrics(cpu=3.0), "cpu"),
    (metrics(heap_mb=255.9), None),
    (metrics(heap_mb=256), "heap"),
    (metrics(nodes=199_999), None),
    (metrics(nodes=200_000), "nodes"),
    (metrics(cpu=5, heap_mb=900, nodes=10**6), "cpu"),  # the first named is the one reported
    ({}, None),  # a renderer that reports nothing spends nothing
])
def test_meter_names_the_budget_passed(seen, over):
    m = BudgetMeter(BUDGET)
    m.asked(0.0)
    assert m.observed(0.01, seen) == over
    assert m.over == over and (over is None) == (m.detail == "")


def test_an_unanswered_probe_spends_the_cpu_budget():
    # A renderer busy outside JavaScript (the layout of a huge DOM) answers no probe.
    m = BudgetMeter(BUDGET)
    m.asked(10.0)
    assert m.overdue(12.99) is None
    assert m.overdue(13.0) == "cpu" and "unresponsive" in m.detail
    # Answered in time: nothing outstanding, nothing overdue however late it is asked.
    m2 = BudgetMeter(BUDGET)
    m2.asked(10.0)
    m2.observed(10.5, metrics())
    assert m2.overdue(100.0) is None


def test_the_first_budget_passed_is_kept_with_its_peaks():
    m = BudgetMeter(BUDGET)
    m.observed(0.1, metrics(heap_mb=300))
    m.observed(0.2, metrics(cpu=4.0))
    assert m.over == "heap" and "300 MB" in m.detail
    assert m.peak == {"cpu_s": 4.0, "heap_mb": 300.0, "nodes": 50.0}


def test_budget_backstops_follow_the_heap_budget():
    assert (BUDGET.v8_heap_mb, BUDGET.renderer_rss_mb) == (512, 1024)
    assert over_memory({11: 1023 * MB, 12: 1025 * MB, 13: 5 * MB, 10: 2000 * MB}, 1024 * MB) == [10, 12]
    assert over_memory({}, 1) == []


class FakeConn:
    """Answers ``Performance.getMetrics`` from a script of replies (None: never answers),
    logs every command; ``Browser.getVersion`` answers unless ``browser_down``."""

    def __init__(self, clock: MockClock, replies: list[dict[str, float] | None], *, browser_down: bool = False) -> None:
        self.clock, self.replies, self.browser_down = clock, replies, browser_down
        self.sent: list[tuple[float, str]] = []
        self.closed = False

    async def send(self, method: str, params: dict[str, Any] | None = None, session_id: str | None = None) -> dict[str, Any]:
        self.sent.append((self.clock.now(), method))
        if method == "Performance.getMetrics":
            reply = self.replies.pop(0) if self.replies else metrics()
            if reply is None:
                await asyncio.Event().wait()  # a renderer that never answers
            return {"metrics": [{"name": k, "value": v} for k, v in (reply or {}).items()]}
        if method == "Browser.getVersion" and self.browser_down:
            await asyncio.Event().wait()
        return {}


def watch(clock: MockClock, conn: FakeConn) -> tuple[BudgetWatch, list[RenderError], dict[str, int]]:
    failures: list[RenderError] = []
    notes: dict[str, int] = {}
    w = BudgetWatch(conn, "s1", clock, BUDGET, failures.append,  # type: ignore[arg-type]
                    lambda k: notes.__setitem__(k, notes.get(k, 0) + 1))
    return w, failures, notes


def test_watch_stops_a_page_at_its_cpu_budget_then_fails_it_as_cap():
    async def go() -> tuple[float, FakeConn, list[RenderError], dict[str, int]]:
        clock = MockClock()
        # CPU climbs 0.5 s per look: the 6th answer (probe sent at 0.5 s, read at 0.6 s) passes 3 s.
        conn = FakeConn(clock, [metrics(cpu=0.5 * k) for k in range(1, 20)])
        w, failures, notes = watch(clock, conn)
        task = asyncio.ensure_future(w.run())
        t = await clock.run_until(task.done)
        return t, conn, failures, notes

    t, conn, failures, notes = asyncio.run(go())
    probes = [at for at, m in conn.sent if m == "Performance.getMetrics"]
    assert probes == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4, 0.5])  # one look per poll_s
    assert t == pytest.approx(0.6)
    assert [m for _, m in conn.sent][-2:] == ["Runtime.terminateExecution", "Emulation.setScriptExecutionDisabled"]
    assert [(f.reason, "cpu budget" in str(f)) for f in failures] == [("cap", True)]
    assert notes == {"budget_cpu": 1}


def test_watch_fails_a_renderer_that_answers_no_probe_within_the_cpu_budget():
    async def go() -> tuple[float, list[RenderError], dict[str, int]]:
        clock = MockClock()
        conn = FakeConn(clock, [metrics(), None])
        w, failures, notes = watch(clock, conn)
        task = asyncio.ensure_future(w.run())
        t = await clock.run_until(task.done)
        return t, failures, notes

    t, failures, notes = asyncio.run(go())
    # The second probe, sent at 0.1 s, is never answered: 3 s later (one look's rounding)
    # the CPU budget is spent.
    assert t == pytest.approx(3.1, abs=0.101)
    assert notes == {"budget_cpu": 1} and failures[0].reason == "cap" and "unresponsive" in str(failures[0])


@pytest.mark.parametrize(("down", "closed", "reason"), [(False, False, "cap"), (True, False, "crash"), (False, True, "crash")])
def test_a_tab_crash_is_the_pages_cap_unless_the_browser_went_down(down, closed, reason):
    async def go() -> RenderError:
        clock = MockClock()
        conn = FakeConn(clock, [], browser_down=down)
        conn.closed = closed
        task = asyncio.ensure_future(classify_crash(conn, clock))  # type: ignore[arg-type]
        await clock.run_until(task.done)
        return task.result()

    assert asyncio.run(go()).reason == reason
