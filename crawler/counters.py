"""A shard's counters, as one typed record.

A shard keeps two counts that several modules write and others read back:

* :class:`ShardCounters`: what the shard did (rows by outcome, requests, bytes,
  duplicates, sitemaps, renders...). Written by the dispatcher, its gates and handler, the page pipeline, the
  sitemap reader, the renderer and its gate, and the shard builder; one object shared by
  all of them. Every name fixed in the source is a field, so a misspelt name is a type
  error, not a silent zero. Only names built at run time (``f"dup_{kind}"``,
  ``"render_refused_" + reason``, the render page's notes) go to its ``families``
  Counter, under one of the :data:`FAMILIES` prefixes.
* ``dropped``, a ``Counter[DropReason]``: discovered or admitted URLs that end with no
  fetch and no row, by reason (links not followed, budget cuts). Written by the link
  policy, the pipeline, admission and the handler.

Both cross to the driver in :class:`crawler.engine.status.ShardStatus`;
:meth:`ShardCounters.as_dict` is their JSON (``stats.json``, ``GET /stats``) and their
checkpoint, and :meth:`ShardCounters.restore` reads either back.

Counted elsewhere, in their parts' own Counters (named here so the names live in one place):

* regions (crawler.placement.handover, shown under ``status().regions``):
  ``region_forwarded`` URLs passed on to the shard that owns their host now (as its home,
  or by a tombstone); ``region_measurements`` hosts timed from every region (first contact,
  or re-measurement); ``region_probes`` robots.txt requests that timed a host from one
  region; ``region_probe_failures`` timings another region could not answer (that region
  is not chosen); ``region_moves_out`` / ``region_moves_in`` hosts handed to / taken over
  from another shard; ``region_move_failures`` moves that failed (the host stayed and was
  fetched here).
* news sources (crawler.freshness.news.NewsPolicy, in no status or stats.json yet):
  ``news_credits_dropped`` new-URL credits cleared because their table passed its bound;
  ``news_candidates_skipped`` pages not tracked as hub candidates (their host had its
  maximum); ``news_sources_forgotten`` sources forgotten (the oldest) to stay within
  news.max_sources; ``news_sources_settled`` hubs no longer tracked (they settled at a
  slow interval, or list too few of their host's new articles); ``news_source_switches``
  hosts whose chosen source stopped carrying all their news and was replaced
  (crawler.freshness.newschoice).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, TypeGuard, get_args

FAMILIES: Mapping[str, str] = MappingProxyType({
    "dup_": "+ a duplicate kind (crawler.output.DUP_KINDS): duplicates by kind (dup_exact, dup_near)",
    "render_decision_": "+ the reason of a render decision (crawler.render.decide)",
    "render_fallback_": "+ why a page decided for rendering was stored raw (timeout, crash, cap...)",
    "render_refused_": "+ why the render gate refused a subrequest (scope, robots, deadline...)",
    "render_wait_": "+ the rule that ended a render's wait for the page to settle",
    "render_navigation_": "+ what a rendered page's top frame tried to navigate to (crawler.render.navigation): "
                          "refused (each attempt), window_open, link (a GET target, followed as a link), post "
                          "(any other method, never sent)",
    "render_budget_": "+ the budget a runaway page passed (crawler.render.budget): cpu, heap, nodes, memory",
    "render_": "+ a note from the render page (crawler.render.page): render_served (subrequests "
               "answered to the browser), render_refused_document (an iframe's document, refused), "
               "render_wait_*, render_navigation_*",
})
"""Prefixes of counter names built at run time: prefix -> what the rest names."""

#: The trap rules' names (crawler.policy.traprules.TrapRules.check): drop reasons too.
TrapRule = Literal["depth", "url_length", "query_params", "path_repeats"]

DropReason = Literal[
    # -- links not followed (crawler.policy.links.LinkPolicy), counted on the page's shard
    "unresolvable",  # links whose href could not be resolved against the page
    "unsupported_scheme",  # links to a scheme other than http(s) (mailto:, javascript:...)
    "invalid",  # http(s) links that do not normalize (bad host, port...)
    "meta_nofollow",  # links of a page whose robots meta says nofollow
    "nofollow",  # rel=nofollow links (unless urls.follow_rel_nofollow)
    "scope",  # links (and redirect targets) outside the crawl's scope
    "duplicate_on_page",  # links repeated on the same page
    # -- trap rules (crawler.policy.traprules.TrapRules)
    "depth",  # links past limits.max_depth
    "url_length",  # links longer than limits.max_url_length
    "query_params",  # links with more than limits.max_query_params query parameters
    "path_repeats",  # links repeating a path segment more than limits.max_path_repeats times
    # -- admitted URLs that leave with no row (crawler.engine.admission, crawler.engine.handler)
    "duplicate_delivery",  # URLs delivered again that the shard's store already held
    "host_budget",  # URLs over their host's page budget
    "budget_cut",  # queued URLs cut when a host's budget shrank (low novelty)
    "host_limit",  # queued URLs cut by an operator's max_pages for the host
]
"""Why a URL was dropped (``ShardStatus.dropped``): mypy checks every literal write."""

DROP_REASONS: frozenset[str] = frozenset(get_args(DropReason))

_OUTCOMES = ("fetched", "redirect", "not_modified", "http_error", "failed", "robots_blocked")  # crawler.output.OUTCOMES


def drop_reason(reason: str) -> DropReason:
    """``reason`` (from a part that answers a plain ``str``, such as the trap rules) as a
    :data:`DropReason`; an undeclared one is a bug, and raises rather than counting a new name."""
    if not _declared_reason(reason):
        raise ValueError(f"undeclared drop reason: {reason!r}")
    return reason


def _declared_reason(reason: str) -> TypeGuard[DropReason]:
    return reason in DROP_REASONS


def restore_dropped(dropped: Counter[DropReason], saved: Mapping[str, Any]) -> None:
    """Add a checkpoint's dropped counts (``dict(dropped)`` of any earlier version) to ``dropped``."""
    for reason, n in saved.items():
        dropped[drop_reason(reason)] += int(n)


@dataclass(slots=True)
class ShardCounters:
    """What one shard did, by name (see the module docstring); zeros for a new shard."""

    # -- rows, one per fetch of an admitted URL, by outcome (crawler.output.OUTCOMES)
    #: rows of pages fetched (2xx)
    fetched: int = 0
    #: rows of redirects (3xx), followed or not
    redirect: int = 0
    #: rows of refetches the server answered 304 Not Modified
    not_modified: int = 0
    #: rows of 4xx/5xx answers, after retries
    http_error: int = 0
    #: rows of fetches with no usable response (network, robots.txt unreachable, internal error)
    failed: int = 0
    #: rows of URLs robots.txt disallows (never requested)
    robots_blocked: int = 0
    # -- the dispatcher, its gates and handler
    #: URLs this shard queued from delivered batches and seeds (after admission)
    accepted: int = 0
    #: HTTP requests sent: pages, robots.txt and sitemaps (not the renderer's subrequests)
    requests: int = 0
    #: robots.txt requests (redirects included)
    robots_requests: int = 0
    #: robots.txt fetches that failed (timeout, reset, 5xx) and were asked again before the
    #: host counted as unreachable
    robots_retries: int = 0
    #: fetches retried after a transient failure
    retries: int = 0
    #: bugs hit while processing a URL (each logged with its traceback; the URL is tried
    #: again, up to fetch.attempts times, then a failed row): should stay 0
    internal_errors: int = 0
    #: URLs put back in the frontier because a service could not answer now (content
    #: index, page budget, state store)
    deferred: int = 0
    #: rows of refetches of known URLs (recrawl)
    refresh_fetches: int = 0
    #: refetches whose content had changed
    changes_found: int = 0
    # -- parse fallbacks (logged at debug, counted here)
    #: bodies whose HTML sniffing raised (treated as not HTML)
    html_sniff_failed: int = 0
    #: pages whose main-content extraction raised (the whole text is used)
    main_text_failed: int = 0
    # -- the page pipeline
    #: body bytes of fetched pages (the rendered DOM for rendered pages)
    bytes: int = 0
    #: pages the HTML parser could not read completely (said in the row's error)
    parse_errors: int = 0
    #: RSS/Atom feeds read as link sources (pages and sitemaps)
    feeds_read: int = 0
    #: feeds read with a parse error (what could be read was used)
    feeds_malformed: int = 0
    #: feeds a page announced (<link rel=alternate>) and that are followed
    feeds_linked: int = 0
    # -- sitemaps (crawler.freshness.sitemaps)
    #: sitemap files read
    sitemaps_read: int = 0
    #: sitemap fetches without a 200
    sitemaps_failed: int = 0
    #: sitemap files with a parse error
    sitemaps_malformed: int = 0
    #: sitemap files cut at the URL or byte limit
    sitemaps_truncated: int = 0
    #: sitemaps robots.txt listed on another host (not read)
    sitemaps_other_host: int = 0
    #: sitemaps not read: the host's files-per-run limit was reached
    sitemaps_over_limit: int = 0
    #: /sitemap.xml probes made (robots.txt named no sitemap; crawler.freshness.sitemapprobe)
    sitemap_probes: int = 0
    #: probes that found a sitemap listing URLs
    sitemap_probes_found: int = 0
    #: URLs taken from sitemaps (in scope, past the trap rules)
    sitemap_urls: int = 0
    #: URLs listed with <news:news> in news sitemaps
    news_sitemap_urls: int = 0
    # -- a shard rebuilt from its output (crawler.recovery.statefiles)
    #: starts of this shard from the state in OUT (its local store was lost)
    restarts_from_out: int = 0
    #: URLs marked done from rows written after the last snapshot
    restored_done_from_rows: int = 0
    # -- rendering (crawler.render): stats.json's "render" part
    #: pages handed to the browser
    render_started: int = 0
    #: pages rendered (their DOM is the page)
    rendered: int = 0
    #: rendered pages that gained links or text over the raw page
    render_gained: int = 0
    #: renders tried again after the browser died under them
    render_retried_crash: int = 0
    #: subrequests of rendered pages fetched (politely)
    render_requests: int = 0
    #: bytes of those subrequests
    render_bytes: int = 0
    #: scripts served from the script cache
    render_script_cache_hits: int = 0
    #: cached scripts revalidated with the server
    render_script_cache_revalidated: int = 0
    #: names built at run time, each under a :data:`FAMILIES` prefix (dup_exact, render_decision_*...)
    families: Counter[str] = field(default_factory=Counter)

    def count_outcome(self, outcome: str) -> None:
        """One row more of ``outcome`` (one of crawler.output.OUTCOMES, which rows are checked against)."""
        if outcome not in _OUTCOMES:
            raise ValueError(f"not a row outcome: {outcome!r}")
        setattr(self, outcome, getattr(self, outcome) + 1)

    def outcome(self, outcome: str) -> int:
        """Rows of ``outcome`` (one of crawler.output.OUTCOMES) so far."""
        if outcome not in _OUTCOMES:
            raise ValueError(f"not a row outcome: {outcome!r}")
        n: int = getattr(self, outcome)
        return n

    def as_dict(self) -> dict[str, int]:
        """Name -> count, only the names counted (nonzero), families flat: the JSON and
        checkpoint shape a ``Counter[str]`` of every name had."""
        out = {name: n for name in _FIELDS if (n := getattr(self, name))}
        out.update((k, v) for k, v in self.families.items() if v)
        return out

    def restore(self, saved: Mapping[str, Any]) -> None:
        """Add a checkpoint's counts (:meth:`as_dict`, or ``dict(counter)`` of a version that
        kept one Counter): a field's name to the field, any other name to ``families``."""
        for name, n in saved.items():
            if name in _FIELDS:
                setattr(self, name, getattr(self, name) + int(n))
            else:
                self.families[name] += int(n)

    def copy(self) -> ShardCounters:
        """A snapshot that later counting does not change (for a status)."""
        return dataclasses.replace(self, families=Counter(self.families))

    def __add__(self, other: ShardCounters) -> ShardCounters:
        total = ShardCounters(**{name: getattr(self, name) + getattr(other, name) for name in _FIELDS})
        total.families = self.families + other.families
        return total

    @classmethod
    def merged(cls, parts: Iterable[ShardCounters]) -> ShardCounters:
        """The sum of ``parts`` (an iterable of ShardCounters): the crawl's counts."""
        total = cls()
        for p in parts:
            total = total + p
        return total


_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(ShardCounters) if f.name != "families")
