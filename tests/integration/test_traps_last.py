"""Traps as the last work left: a budget cut trims the host's queue, and a demoted host is
not slowed, so the crawl ends a bounded number of fetches after the cut.

A session-id trap serves the same page under endless URLs, each linking to new ones.
Judged from the server's log: the trap host's requests stay within the bound derived
from the budget rules (crawler.policy.hostbudget.HostBudget), and while it is the only work left it
is fetched at its politeness interval, not at a penalty multiple of it.
"""

from __future__ import annotations

import statistics

from crawler.config import settings as config
from crawler.session.inprocess import local_session
from crawler.testing.server import WebServer
from crawler.testing.trapweb import NORMAL_PAGES, TrapWeb

from tests.integration import checks

BUDGET = 120  # limits.max_pages_per_host
WINDOW = 20  # dedup.novelty_window
CUT = 0.5  # HostBudget's cut_factor
INTERVAL = 0.05


def test_trap_hosts_as_the_last_work_end_within_the_budget_bound(tmp_path):
    server = WebServer(TrapWeb())  # type: ignore[arg-type]
    server.start()
    try:
        web = server.web
        cfg = config.from_dict(
            {
                "seeds": [web.url("normal.test"), web.url("trap.test", "/list?sid=1")],
                "scope": "host",
                "politeness": {"interval_s": INTERVAL},
                "limits": {"max_pages_per_host": BUDGET, "max_query_params": 12},
                "dedup": {"novelty_window": WINDOW, "novelty_threshold": 0.5},
                "fetch": {"resolve": {"*.test": "127.0.0.1"}},
                "output": {"path": str(tmp_path / "out")},
            }
        )
        stats = __import__("asyncio").run(local_session(cfg).run())
        log = sorted(server.requests(), key=lambda r: r.start)
    finally:
        server.stop()
    assert stats["finished"] is True
    checks.check_ledger(stats)
    pages = [r for r in log if r.path_qs not in ("/robots.txt", "/sitemap.xml")]
    trap = [r for r in pages if r.host.startswith("trap.")]
    normal = [r for r in pages if r.host.startswith("normal.")]
    assert len(normal) == NORMAL_PAGES
    # The bound, from the rules: the first window (WINDOW fetches, all but the first page
    # duplicates) ends in a cut that keeps CUT x what was still planned, at most
    # BUDGET - WINDOW; later cuts only shrink it. The queue is cut with the budget.
    bound = WINDOW + int(CUT * (BUDGET - WINDOW))
    assert len(trap) <= bound, (len(trap), bound)
    assert stats["dropped"].get("budget_cut", 0) > 0  # URLs were queued, and trimmed
    # Demoted, not slowed: once the trap host is the only work, it is fetched at about its
    # politeness interval (a novelty penalty once made that up to 8x).
    alone = [r.start for r in trap if r.start > normal[-1].end]
    if len(alone) >= 3:
        gaps = [b - a for a, b in zip(alone, alone[1:])]
        assert statistics.median(gaps) < 3 * INTERVAL, gaps
