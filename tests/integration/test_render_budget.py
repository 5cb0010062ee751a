"""A hostile page costs itself only (crawler.render.budget), with the real Chromium.

Pages are handed to the pool as a shard would (crawler.render.jobs.RenderJob); no web
server is needed: the page itself is the job's body and every subrequest is refused.
"""

from __future__ import annotations

import asyncio
import time

from crawler.render.browser import BrowserPool, PoolSettings, find_browser
from crawler.render.budget import DEFAULT_BUDGET
from crawler.render.jobs import RenderJob, RenderReply, SubRequest, SubResponse

from tests.integration.chromium import NEEDS_CHROMIUM

pytestmark = NEEDS_CHROMIUM

HTML = (("content-type", "text/html"),)
BUSY = b"<html><body><p>spin</p><script>while (true) {}</script></body></html>"
# ArrayBuffers live outside the JS heap: only the renderer's resident memory shows them.
GROW = (b"<html><body><script>const a = []; for (;;) { a.push(new Uint8Array(32 << 20).fill(1)); }"
        b"</script></body></html>")
PLAIN = (b'<html><body><div id="root"></div><script>'
         b'document.getElementById("root").innerHTML = "<a href=/drawn>drawn by script</a>";</script></body></html>')
# Far above what the runaways need with the shipped budget (3 CPU s: about 4 s here; on
# a machine loaded 15 times over its cores much more: the CPU budget counts CPU seconds,
# not seconds waited).
TIMEOUT_S = 45.0
HANDED_AFTER_S = 0.4


async def _refuse(req: SubRequest) -> SubResponse:
    return SubResponse(refused="blocked_type")


def test_runaway_pages_fail_alone_within_their_budget_while_a_plain_page_renders():
    budget = DEFAULT_BUDGET  # render's defaults (configs/default.yaml): a renderer killed past 1,024 MB resident

    async def scenario() -> tuple[dict[str, RenderReply], dict[str, float], dict]:
        pool = BrowserPool(PoolSettings(find_browser(None), processes=1, tabs=3, quiet_s=0.1, max_wait_s=2.0,
                                        budget=budget))
        replies: dict[str, RenderReply] = {}
        took: dict[str, float] = {}

        async def one(name: str, body: bytes, delay: float) -> None:
            await asyncio.sleep(delay)
            t0 = time.monotonic()
            replies[name] = await pool.render(RenderJob(name, f"http://{name}.test/", 200, HTML, body, TIMEOUT_S),
                                              _refuse)
            took[name] = time.monotonic() - t0

        try:
            # The plain page is handed over while both runaways are running on the same browser.
            await asyncio.gather(one("busy", BUSY, 0.0), one("grow", GROW, 0.0), one("plain", PLAIN, HANDED_AFTER_S))
            status = pool.status()
        finally:
            await pool.close()
        return replies, took, status

    replies, took, status = asyncio.run(scenario())
    busy, grow, plain = replies["busy"], replies["grow"], replies["plain"]
    # The busy loop fails as "cap" on its CPU budget, far inside its render's deadline.
    assert busy.reason == "cap" and busy.notes.get("budget_cpu") == 1, (busy.reason, busy.detail, busy.notes)
    assert "CPU s on the main thread" in busy.detail
    # The ArrayBuffer page: its renderer killed past its memory budget, the tab alone
    # crashed: "cap" (not "crash": that would be retried), or its CPU budget came first.
    assert grow.reason == "cap", (grow.reason, grow.detail, grow.notes)
    assert grow.notes.get("budget_memory", 0) + grow.notes.get("budget_cpu", 0) == 1, grow.notes
    # The plain page rendered on the same browser at the same time, script run, and done
    # while the busy loop still spun: not queued behind it, not sharing its renderer
    # (a shared main thread would have run its script only after the loop's end).
    assert plain.reason == "ok" and plain.html is not None and "drawn by script" in plain.html, plain.detail
    assert HANDED_AFTER_S + took["plain"] < took["busy"], took
    assert status["crashed"] == 0 and status["launched"] == 1  # the browser itself never went down
