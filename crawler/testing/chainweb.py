"""A small web served with no socket at all, and the crash image of a crawl of it.

For crashes and damaged state in one process (``tests/integration/test_damaged_resume.py``,
``benchmarks/damaged_resume.py``): :data:`PAGES` is a few hosts of chained pages (page i
links to the next three, a host's first page to the next host's), so a crawl is a long
run of link deliveries, each one admissions a crash can lose. :class:`SiteFetcher` answers
as a :class:`crawler.fetch.fetcher.Fetcher` does, records every page it serves and calls a
hook with their count: :func:`copy_output` there copies the output folder at that instant
(rows, then bodies, events and state: every part copied has its bodies, every ack its
part), the way a machine that stops leaves it.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from typing import Mapping
from collections.abc import Callable

from crawler.clock import SYSTEM_CLOCK
from crawler.fetch.fetcher import FetchResult

HOSTS = tuple(f"h{i}.test" for i in range(4))
PER_HOST = 40


def _site() -> dict[str, list[str]]:
    pages = {}
    for n, host in enumerate(HOSTS):
        for i in range(PER_HOST):
            links = [f"http://{host}/p{j}" for j in (i + 1, i + 2, i + 3) if j < PER_HOST]
            if i == 0:
                links.append(f"http://{HOSTS[(n + 1) % len(HOSTS)]}/p0")
            pages[f"http://{host}/p{i}"] = links
    return pages


#: Every page of the web and its links.
PAGES = _site()
#: Where a crawl of it starts.
SEED = f"http://{HOSTS[0]}/p0"


class SiteFetcher:
    """Serves :data:`PAGES` (404 for anything else: robots.txt, sitemaps); records each
    page fetch in :attr:`fetched` and calls ``on_fetch(len(fetched))`` before answering."""

    def __init__(self, on_fetch: Callable[[int], None] | None = None) -> None:
        self.fetched: list[str] = []
        self.on_fetch = on_fetch

    async def fetch(self, url: str, headers: Mapping[str, str] | None = None, *,
                    max_body_bytes: int | None = None) -> FetchResult:
        now = SYSTEM_CLOCK.now()
        links = PAGES.get(url)
        if links is None:
            return FetchResult(url, 404, {}, b"", False, None, None, False, now, now, now, "127.0.0.1")
        self.fetched.append(url)
        if self.on_fetch is not None:
            self.on_fetch(len(self.fetched))
        await asyncio.sleep(0.002)
        body = (f"<html><body><p>{url}: words of this page alone, {url[::-1]}</p>"
                + "".join(f'<a href="{link}">{link}</a>' for link in links) + "</body></html>").encode()
        return FetchResult(url, 200, {"content-type": "text/html"}, body, False, None, None, False, now, now, now, "127.0.0.1")

    async def close(self) -> None:
        return None


def copy_output(out: str, image: str) -> None:
    """Copy a local output folder as it is now to ``image``, without its lease (the run
    that held it is gone)."""
    for name in ("pages", "blobs", "events", "state"):
        if os.path.exists(os.path.join(out, name)):
            shutil.copytree(os.path.join(out, name), os.path.join(image, name))
    lease = os.path.join(image, "state", "lease.json")
    if os.path.exists(lease):
        os.remove(lease)
    shutil.rmtree(os.path.join(image, "state", "epochs"), ignore_errors=True)  # the claims too
