"""The names of a shard's counters, declared once.

A shard keeps two ``collections.Counter`` objects that several modules write and others
read back by name (``status()["counters"]`` and ``["dropped"]``, then ``stats.json``,
progress lines and metrics):

* :data:`COUNTERS`: what the shard did (rows by outcome, requests, bytes, duplicates,
  sitemaps, renders...). Written by the scheduler, the page pipeline, the sitemap reader,
  the renderer and its gate, and the shard builder; one Counter shared by all of them.
* :data:`DROPPED`: discovered or admitted URLs that end with no fetch and no row, by
  reason (links not followed, budget cuts). Written by the link policy, the pipeline,
  admission and the scheduler.

Counters are read with ``.get(name, 0)``, so a misspelt name reads 0 in silence. Every
name written or read must therefore be declared here; ``tests/unit/test_counters.py``
scans the source for string keys used on these counters and fails on any that is not.
A name built at run time (``f"dup_{kind}"``, ``"render_refused_" + reason``) must start
with a declared :data:`FAMILIES` prefix.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

COUNTERS: Mapping[str, str] = MappingProxyType({
    # -- rows, one per fetch of an admitted URL, by outcome (crawler.output.OUTCOMES)
    "fetched": "rows of pages fetched (2xx)",
    "redirect": "rows of redirects (3xx), followed or not",
    "not_modified": "rows of refetches the server answered 304 Not Modified",
    "http_error": "rows of 4xx/5xx answers, after retries",
    "failed": "rows of fetches with no usable response (network, robots.txt unreachable, internal error)",
    "robots_blocked": "rows of URLs robots.txt disallows (never requested)",
    # -- the scheduler
    "accepted": "URLs this shard queued from delivered batches and seeds (after admission)",
    "requests": "HTTP requests sent: pages, robots.txt and sitemaps (not the renderer's subrequests)",
    "robots_requests": "robots.txt requests (redirects included)",
    "robots_retries": "robots.txt fetches that failed (timeout, reset, 5xx) and were asked again before the host counted as unreachable",
    "retries": "fetches retried after a transient failure",
    "internal_errors": "bugs hit while processing a URL (each logged with its traceback; the URL is tried again, up to fetch.attempts times, then a failed row): should stay 0",
    "deferred": "URLs put back in the frontier because a service could not answer now (content index, page budget, state store)",
    "refresh_fetches": "rows of refetches of known URLs (recrawl)",
    # -- parse fallbacks (logged at debug, counted here)
    "html_sniff_failed": "bodies whose HTML sniffing raised (treated as not HTML)",
    "main_text_failed": "pages whose main-content extraction raised (the whole text is used)",
    # -- regions (crawler.placement.handover; a Regions part's own Counter, shown under status().regions)
    "region_forwarded": "URLs passed on to the shard that owns their host now (as its home, or by a tombstone)",
    "region_measurements": "hosts timed from every region (first contact, or re-measurement)",
    "region_probes": "robots.txt requests that timed a host from one region",
    "region_probe_failures": "timings another region could not answer (that region is not chosen)",
    "region_moves_out": "hosts this shard handed to another shard",
    "region_moves_in": "hosts this shard took over from another shard",
    "region_move_failures": "moves that failed (the host stayed and was fetched here)",
    "changes_found": "refetches whose content had changed",
    # -- the page pipeline
    "bytes": "body bytes of fetched pages (the rendered DOM for rendered pages)",
    "parse_errors": "pages the HTML parser could not read completely (said in the row's error)",
    "dup_exact": "pages whose body equals stored content",
    "dup_near": "pages whose SimHash is within the near-duplicate distance of stored content",
    "feeds_read": "RSS/Atom feeds read as link sources (pages and sitemaps)",
    "feeds_malformed": "feeds read with a parse error (what could be read was used)",
    "feeds_linked": "feeds a page announced (<link rel=alternate>) and that are followed",
    # -- sitemaps (crawler.freshness.sitemaps)
    "sitemaps_read": "sitemap files read",
    "sitemaps_failed": "sitemap fetches without a 200",
    "sitemaps_malformed": "sitemap files with a parse error",
    "sitemaps_truncated": "sitemap files cut at the URL or byte limit",
    "sitemaps_other_host": "sitemaps robots.txt listed on another host (not read)",
    "sitemaps_over_limit": "sitemaps not read: the host's files-per-run limit was reached",
    "sitemap_urls": "URLs taken from sitemaps (in scope, past the trap rules)",
    "news_sitemap_urls": "URLs listed with <news:news> in news sitemaps",
    # -- news sources: crawler.freshness.news.NewsPolicy's own Counter (in no status or stats.json yet)
    "news_credits_dropped": "new-URL credits cleared because their table passed its bound",
    "news_candidates_skipped": "pages not tracked as hub candidates: their host had its maximum",
    "news_sources_forgotten": "sources forgotten (the oldest) to stay within news.max_sources",
    "news_sources_settled": "hubs no longer tracked: they settled at a slow interval",
    # -- a shard rebuilt from its output (crawler.recovery.statefiles)
    "restarts_from_out": "starts of this shard from the state in OUT (its local store was lost)",
    "restored_done_from_rows": "URLs marked done from rows written after the last snapshot",
    # -- rendering (crawler.render): stats.json's "render" part
    "render_started": "pages handed to the browser",
    "rendered": "pages rendered (their DOM is the page)",
    "render_gained": "rendered pages that gained links or text over the raw page",
    "render_retried_crash": "renders tried again after the browser died under them",
    "render_requests": "subrequests of rendered pages fetched (politely)",
    "render_bytes": "bytes of those subrequests",
    "render_served": "subrequests answered to the browser",
    "render_script_cache_hits": "scripts served from the script cache",
    "render_script_cache_revalidated": "cached scripts revalidated with the server",
    "render_refused_document": "navigations away from the page the browser attempted (refused)",
})
"""Shard counters (``status()["counters"]``): name -> what it counts."""

FAMILIES: Mapping[str, str] = MappingProxyType({
    "dup_": "+ a duplicate kind (crawler.output.DUP_KINDS): duplicates by kind",
    "render_decision_": "+ the reason of a render decision (crawler.render.decide)",
    "render_fallback_": "+ why a page decided for rendering was stored raw (timeout, crash, cap...)",
    "render_refused_": "+ why the render gate refused a subrequest (scope, robots, deadline...)",
    "render_wait_": "+ the rule that ended a render's wait for the page to settle",
    "render_": "+ a note from the render page (crawler.render.page: served, refused_document, wait_*)",
})
"""Prefixes of counter names built at run time: prefix -> what the rest names."""

DROPPED: Mapping[str, str] = MappingProxyType({
    # -- links not followed (crawler.policy.links.LinkPolicy), counted on the page's shard
    "unresolvable": "links whose href could not be resolved against the page",
    "unsupported_scheme": "links to a scheme other than http(s) (mailto:, javascript:...)",
    "invalid": "http(s) links that do not normalize (bad host, port...)",
    "meta_nofollow": "links of a page whose robots meta says nofollow",
    "nofollow": "rel=nofollow links (unless urls.follow_rel_nofollow)",
    "scope": "links (and redirect targets) outside the crawl's scope",
    "duplicate_on_page": "links repeated on the same page",
    # -- trap rules (crawler.policy.traprules.TrapRules)
    "depth": "links past limits.max_depth",
    "url_length": "links longer than limits.max_url_length",
    "query_params": "links with more than limits.max_query_params query parameters",
    "path_repeats": "links repeating a path segment more than limits.max_path_repeats times",
    # -- admitted URLs that leave with no row (crawler.engine.admission, crawler.engine.scheduler)
    "duplicate_delivery": "URLs delivered again that the shard's store already held",
    "host_budget": "URLs over their host's page budget",
    "budget_cut": "queued URLs cut when a host's budget shrank (low novelty)",
    "host_limit": "queued URLs cut by an operator's max_pages for the host",
})
"""Dropped URLs (``status()["dropped"]``): reason -> what was dropped."""


def declared(name: str, names: Mapping[str, str] = COUNTERS) -> bool:
    """Whether ``name`` is a declared counter (or, for :data:`COUNTERS`, of a declared family)."""
    return name in names or (names is COUNTERS and any(name.startswith(p) for p in FAMILIES))
