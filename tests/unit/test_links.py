"""LinkPolicy.follow against LinkPolicy.decide on pages that repeat their links."""

from __future__ import annotations

from collections import Counter

from crawler.config.settings import from_dict
from crawler.parse import parse_page
from crawler.engine.partbuilders import build_link_policy

PAGE_URL = "http://a.test/dir/page"


def _policy():
    cfg = from_dict({"seeds": [PAGE_URL], "scope": "host", "limits": {"max_depth": 3}})
    return build_link_policy(cfg, [PAGE_URL])


def test_repeated_links_are_counted_as_if_each_were_decided() -> None:
    # The same href several times, once with rel=nofollow, spelled differently, out of
    # scope twice, unresolvable twice: follow() reuses the verdict of a string it has
    # already decided on this page, and must count exactly what decide() reports.
    links = ['<a href="/x">x</a>', '<a href="/x" rel="nofollow">x</a>', '<a href="/x">x</a>',
             '<a href="HTTP://A.TEST/x">x</a>', '<a href="http://b.test/">b</a>',
             '<a href="http://b.test/">b</a>', '<a href="http://[::1">bad</a>',
             '<a href="http://[::1">bad</a>', '<a href="mailto:a@b">m</a>', '<a href="/x" rel="nofollow">x</a>']
    page = parse_page(("<html><body>" + "".join(links) + "</body></html>").encode(), PAGE_URL, "text/html")
    policy = _policy()
    decisions = policy.decide(page, 1)
    counts: Counter[str] = Counter()
    assert policy.follow(page, 1, counts) == ["http://a.test/x"]
    assert counts == Counter(d.reason for d in decisions if not d.followed)
    assert counts == Counter({"duplicate_on_page": 2, "nofollow": 2, "scope": 2, "invalid": 2, "unsupported_scheme": 1})


def test_a_page_with_robots_nofollow_follows_nothing_however_often_a_link_repeats() -> None:
    body = b'<html><head><meta name="robots" content="nofollow"></head><body>' + b'<a href="/x">x</a>' * 5 + b"</body></html>"
    page = parse_page(body, PAGE_URL, "text/html")
    counts: Counter[str] = Counter()
    assert _policy().follow(page, 1, counts) == []
    assert counts == Counter({"meta_nofollow": 5})
