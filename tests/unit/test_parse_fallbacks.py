"""The parse layer's guarded fallbacks are logged and counted, not swallowed.

Web input never raises out of parsing (docs/invariants.md #7). When a guarded step breaks
anyway (a bug meeting odd markup), the page goes on with a safe answer, and the crawl's
counters say how often that happened: ``html_sniff_failed`` (the body was taken for not
HTML, so its links were not followed) and ``main_text_failed`` (the whole text stood in for
the main content in the near-duplicate fingerprint).
"""

from __future__ import annotations

import asyncio
import logging

from crawler.config import settings as config

from crawler.content import maincontent
from crawler.clock import MockClock
from crawler.frontier.urlitem import UrlItem
from crawler.parse import html as parse_html
from crawler.parse import is_html, parse_page
from crawler.engine.pipeline import PagePipeline
from crawler.frontier.recrawl import RecrawlPolicy
from crawler.engine.partbuilders import build_link_policy
from crawler.counters import ShardCounters

from tests.unit.doubles import ContentTable, response

SEED = "http://a.test/"
PAGE = ("<html><body><nav>home about</nav><article><p>" + " ".join(f"w{i}" for i in range(80))
        + '</p><a href="/next">next</a></article></body></html>').encode()


def _pipeline() -> PagePipeline:
    cfg = config.from_dict({"seeds": [SEED], "scope": "host", "limits": {"max_depth": 3}})
    return PagePipeline(
        "shard-000", build_link_policy(cfg, [SEED]), ContentTable(), MockClock(), user_agent_token="raycrawl",
        max_links_per_page=100, min_text_tokens=5, max_body_bytes=1 << 20, store_bodies=False,
        recrawl=RecrawlPolicy(min_interval_s=60.0, max_interval_s=86400.0, initial_interval_s=3600.0,
                              grow_factor=2.0, shrink_factor=0.5, fingerprint_distance=3),
    )


def _broken(*args, **kwargs):
    raise IndexError("a bug meets odd markup")


def test_a_broken_main_content_step_keeps_the_page_and_is_counted(monkeypatch, caplog):
    clean = parse_page(PAGE, SEED, "text/html")
    assert not clean.main_text_failed and "home about" not in clean.main_text

    monkeypatch.setattr(maincontent, "_choose_root", _broken)
    caplog.set_level(logging.DEBUG, logger="crawler.content.maincontent")
    page = parse_page(PAGE, SEED, "text/html")
    assert page.main_text_failed and page.error is None
    assert page.main_text == page.text and "home about" in page.main_text  # the whole text stands in
    assert [link.resolved for link in page.links] == ["http://a.test/next"]  # links are unaffected
    assert "main-content extraction failed (IndexError('a bug meets odd markup'))" in caplog.text

    pipe = _pipeline()

    async def crawl() -> None:
        for _ in range(2):
            await pipe.page(UrlItem(SEED, 0), response(SEED, body=PAGE, ctype="text/html"))

    asyncio.run(crawl())
    assert pipe.counters.main_text_failed == 2


def test_a_broken_sniff_is_not_html_and_is_counted(monkeypatch, caplog):
    sniffless = b"<!DOCTYPE html><html><body><a href='/x'>x</a></body></html>"
    assert is_html(None, sniffless)

    monkeypatch.setattr(parse_html, "_sniff_html", _broken)
    caplog.set_level(logging.DEBUG, logger="crawler.parse.html")
    counters = ShardCounters()
    assert is_html(None, sniffless, counters) is False
    assert counters.as_dict() == {"html_sniff_failed": 1}
    assert "HTML sniffing failed (IndexError('a bug meets odd markup')): treated as not HTML" in caplog.text
    # Without a counter at hand the answer is the same (the parse layer's own callers).
    assert is_html(None, sniffless) is False
    # A Content-Type decides without sniffing: nothing to fail, nothing counted.
    assert is_html("text/html", sniffless, counters) and counters.as_dict() == {"html_sniff_failed": 1}

    pipe = _pipeline()
    asyncio.run(pipe.page(UrlItem(SEED, 0), response(SEED, body=sniffless, ctype=None)))
    assert pipe.counters.html_sniff_failed == 1
    assert pipe.links_from(SEED, 0, None, sniffless) == []
    assert pipe.counters.html_sniff_failed == 2
