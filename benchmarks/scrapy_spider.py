"""The Scrapy spider of ``benchmarks/scrapy_compare.py`` (run with ``scrapy runspider``).

A reasonably configured breadth-first crawl of the bench web: LinkExtractor over
``a``/``area`` links restricted to ``bench.test`` hosts, robots.txt obeyed, one request
in flight per host with ``DOWNLOAD_DELAY`` between them, many hosts in parallel. Every
``*.bench.test`` name resolves to 127.0.0.1 through :class:`LoopbackResolver` (the
equivalent of the crawler's ``fetch.resolve``). Settings come from
:mod:`benchmarks.scrapy_compare`; this file only counts pages and stops at ``pages``.
"""

from __future__ import annotations

from typing import Any

import scrapy
from scrapy.exceptions import CloseSpider
from scrapy.linkextractors import LinkExtractor
from twisted.internet import defer
from twisted.internet.interfaces import IResolverSimple
from zope.interface import implementer

from benchmarks import common


@implementer(IResolverSimple)
class LoopbackResolver:
    """DNS_RESOLVER: ``*.bench.test`` (and anything else) -> 127.0.0.1, no lookups."""

    def __init__(self, reactor: Any) -> None:
        self.reactor = reactor

    @classmethod
    def from_crawler(cls, crawler: Any, reactor: Any) -> LoopbackResolver:
        return cls(reactor)

    def install_on_reactor(self) -> None:
        self.reactor.installResolver(self)

    def getHostByName(self, name: str, timeout: Any = ()) -> defer.Deferred:
        return defer.succeed("127.0.0.1")


class BenchSpider(scrapy.Spider):
    """Follow every bench.test link breadth-first until ``pages`` pages were parsed."""

    name = "bench"

    def __init__(self, seeds: str = "", pages: str = "1000", child: str = "0", **kw: Any) -> None:
        super().__init__(**kw)
        self.start_urls = [s for s in seeds.split(",") if s]
        self.limit = int(pages)
        self.child = child == "1"
        self.pages = 0
        # allow_domains compares the netloc *with* its port ("h1.bench.test:18080"), so it
        # never matches on this web; a URL pattern does the same job.
        self.links = LinkExtractor(allow=(r"^https?://[a-z0-9.-]+\.bench\.test(:\d+)?/",), tags=("a", "area"),
                                   attrs=("href",))

    async def start(self):  # Scrapy >= 2.13
        if self.child:
            common.mark("start")
        for url in self.start_urls:
            yield scrapy.Request(url, callback=self.parse)

    def parse(self, response: scrapy.http.Response):
        if self.pages >= self.limit:
            return
        self.pages += 1
        if self.pages == self.limit:
            if self.child:
                common.mark("end", sync=True)
                common.emit_result({"pages": self.pages})
            raise CloseSpider("page limit")
        for link in self.links.extract_links(response):
            yield scrapy.Request(link.url, callback=self.parse)
