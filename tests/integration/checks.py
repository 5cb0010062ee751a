"""Assertions about a finished crawl of the synthetic web, from the server's own log.

Shared by the single-process and the Ray end-to-end tests, so both are held to the
same ground truth (crawler.testing.web).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from crawler.config.settings import CrawlConfig
from crawler.output import read_pages
from crawler.testing.server import WebServer
from crawler.testing.web import canonical_path_qs


def requests_by_url(server: WebServer) -> Counter:
    return Counter(server.request_counts())


def check_exactly_once(server: WebServer, cfg: CrawlConfig) -> None:
    """Every reachable allowed page fetched exactly once; retried URLs as classified."""
    web = server.web
    counts = requests_by_url(server)
    missing = sorted(u for u in web.must_fetch() if counts.get(u, 0) == 0)
    assert not missing, f"{len(missing)} reachable pages never fetched, e.g. {missing[:5]}"
    twice = sorted((u, counts[u]) for u in web.must_fetch() if counts[u] != 1)
    assert not twice, f"pages fetched more than once: {twice[:5]}"
    for url, kind in web.failure_urls().items():
        expected = web.expected_requests(url, cfg.fetch.attempts)
        assert counts.get(url, 0) == expected, f"{kind} {url}: {counts.get(url, 0)} requests, expected {expected}"


def check_never_requested(server: WebServer) -> None:
    """No disallowed, out-of-scope, non-canonical or unreachable request reached the server."""
    web = server.web
    bad = []
    for r in server.requests():
        reason = web.must_not_fetch(r.host, r.path_qs)
        if reason is not None:
            bad.append((r.host, r.path_qs, reason))
    assert not bad, f"{len(bad)} requests that must never happen, e.g. {bad[:5]}"


def check_politeness(server: WebServer, cfg: CrawlConfig, slack_s: float = 0.0) -> None:
    """Per host: starts >= interval apart (crawl-delay as floor), never overlapping."""
    web = server.web
    by_host: dict[str, list] = defaultdict(list)
    for r in server.requests():
        by_host[r.host].append(r)
    delays = web.robots_delay_hosts()
    violations: list[tuple[Any, ...]] = []
    for host, recs in by_host.items():
        recs.sort(key=lambda r: r.start)
        floor = max(cfg.politeness.interval_s, delays.get(host, 0.0))
        for a, b in zip(recs, recs[1:]):
            if b.start < a.end:
                violations.append((host, "overlap", a.path_qs, b.path_qs))
            # Crawl-delay applies once robots.txt is known, i.e. after the first request.
            need = floor if a.path_qs != "/robots.txt" or host not in delays else cfg.politeness.interval_s
            if b.start - a.start < need - slack_s:
                violations.append((host, round(b.start - a.start, 4), need, a.path_qs, b.path_qs))
    assert not violations, f"politeness violations: {violations[:5]}"


def check_retry_after(server: WebServer) -> None:
    web = server.web
    for url, _kind in web.failure_urls().items():
        wait = web.retry_after(url)
        if wait is None:
            continue
        parts = web.split(url)
        assert parts is not None, url
        host, path = parts
        recs = sorted((r for r in server.requests(host) if canonical_path_qs(r.path_qs) == path), key=lambda r: r.start)
        assert len(recs) == 2 and recs[1].start - recs[0].end >= wait - 0.05, f"Retry-After not honoured for {url}"


def check_traps_bounded(server: WebServer, cfg: CrawlConfig) -> None:
    web = server.web
    counts = Counter(r.host for r in server.requests())
    budget = cfg.limits.max_pages_per_host
    for host, kind in web.trap_hosts().items():
        # +2 for robots.txt and /sitemap.xml
        assert budget is not None, "a crawl of trap hosts sets limits.max_pages_per_host"
        assert counts[host] <= budget + 2, f"trap {kind} on {host}: {counts[host]} requests > budget {budget}"


def check_rows(server: WebServer, cfg: CrawlConfig, *, duplicates: bool = True) -> Any:
    """One outcome row per URL; outcomes as the ground truth says; duplicates flagged.

    ``duplicates=False`` leaves out the duplicate flags: after a crash on a remote output
    the content index restarts from its last copy in OUT and misses duplicates of pages
    indexed since (README, "Losing a machine loses nothing"), a documented cost."""
    web = server.web
    table = read_pages(cfg.output.path, dict(cfg.output.storage_options) or None, dedupe=False)
    rows = table.to_pylist()
    per_url = Counter(r["url"] for r in rows)
    dup_rows = [u for u, n in per_url.items() if n > 1]
    assert not dup_rows, f"URLs with more than one row: {dup_rows[:5]}"
    by_url = {r["url"]: r for r in rows}
    # Every requested page URL (not robots.txt, not a sitemap) has a row.
    requested = {u for u in server.request_counts() if not u.endswith(("/robots.txt", "/robots-real.txt", "/sitemap.xml"))}
    no_row = sorted(requested - set(by_url))
    assert not no_row, f"requested URLs without an outcome row: {no_row[:5]}"
    # Every reachable URL robots.txt forbids (the ground truth knows which: those linked
    # from a fetched page) ends as a robots_blocked row: a refusal is recorded, never
    # swallowed (docs/invariants.md #5).
    if cfg.politeness.respect_robots:
        blocked = web.robots_blocked_urls(follow_rel_nofollow=cfg.urls.follow_rel_nofollow)
        not_blocked = sorted((u, by_url.get(u, {}).get("outcome")) for u in blocked
                             if by_url.get(u, {}).get("outcome") != "robots_blocked")
        assert not not_blocked, f"robots-blocked URLs without a robots_blocked row (url, outcome): {not_blocked[:5]}"
    wrong = []
    for url in web.must_fetch() | set(web.failure_urls()):
        exp = web.expected_outcome(url)
        got = by_url.get(url, {}).get("outcome")
        if exp is not None and got != exp:
            wrong.append((url, exp, got, by_url.get(url, {}).get("error")))
    assert not wrong, f"wrong outcomes: {wrong[:5]}"
    if not duplicates:
        return table
    for a, b in web.mirror_pairs():
        kinds = {by_url[a]["dup_kind"], by_url[b]["dup_kind"]}
        assert "exact" in kinds, f"mirror pair not flagged: {a} {b}"
    for group in web.near_duplicate_groups():
        flagged = [u for u in group if by_url[u]["dup_kind"] in ("near", "exact")]
        assert len(flagged) == len(group) - 1, f"near duplicates: {len(flagged)} of {len(group)} flagged"
    # Copies that differ only in chrome (footer timestamp, request id, nav, aside): the
    # main-content fingerprint sees through it (crawler.content.maincontent).
    for group in web.chrome_duplicate_groups():
        flagged = [u for u in group if by_url[u]["dup_kind"] in ("near", "exact")]
        assert len(flagged) == len(group) - 1, f"chrome-only copies: {len(flagged)} of {len(group)} flagged: {sorted(group)}"
    return table


def check_ledger(stats: dict[str, Any], internal_errors: int = 0) -> None:
    """URLs the seen filter admitted = rows + URLs dropped by a counted rule + URLs still
    queued, and nothing queued in a crawl that says it finished (crawler.session.ledger); and no
    URL cost by an internal error (but the ``internal_errors`` a test provokes)."""
    led = stats.get("ledger")
    assert led is not None, "the run wrote no URL ledger"
    assert led["balanced"], f"URL ledger does not balance: {led['problems']} ({led})"
    assert stats.get("internal_errors", 0) == internal_errors, f"{stats['internal_errors']} URLs hit an internal error (see the log)"


def check_all(server: WebServer, cfg: CrawlConfig) -> Any:
    check_never_requested(server)
    check_exactly_once(server, cfg)
    check_politeness(server, cfg)
    check_retry_after(server)
    check_traps_bounded(server, cfg)
    return check_rows(server, cfg)
