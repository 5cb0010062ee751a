"""Shared pieces of the seen-set tests: the backends to run and a URL stream."""

from __future__ import annotations

import pytest

from crawler.seen import SeenSet

try:
    import rbloom  # noqa: F401 - only asking whether the optional backend is importable
except ImportError:
    HAVE_RBLOOM = False
else:
    HAVE_RBLOOM = True

RBLOOM_MISSING = "rbloom not installed: pip install -e '.[rbloom]'"

# rbloom is an optional extra: its cases skip (not fail) where it is not installed.
BACKENDS = ["pybloom", pytest.param("rbloom", marks=pytest.mark.skipif(not HAVE_RBLOOM, reason=RBLOOM_MISSING))]


def make_urls(n: int, tag: str = "") -> list[str]:
    """n distinct URLs spread over 97 hosts (``tag`` makes another distinct set)."""
    return [f"https://h{i % 97}.example/{tag}p/{i}?x={i * 7}" for i in range(n)]


def numbers(s: SeenSet) -> dict[str, float]:
    """``s.stats()`` without its one text field (``path``): the counts, rates and flags a
    test compares as numbers."""
    return {k: v for k, v in s.stats().items() if not isinstance(v, str)}


def feed(s: SeenSet, urls: list[str], batch: int = 100) -> list[bool]:
    """``s.check_and_add`` over ``urls`` in batches; the verdicts in order."""
    out: list[bool] = []
    for i in range(0, len(urls), batch):
        out += s.check_and_add(urls[i : i + batch])
    return out
