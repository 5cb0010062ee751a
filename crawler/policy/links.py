"""Which links of a parsed page the crawler follows, and why not the others.

One policy object decides per link: resolve (done by the parser), normalize, nofollow,
scope, then the static trap rules (depth, URL length, query parameters, path repeats).
The engine uses the fast path :meth:`LinkPolicy.follow`; ``crawl links`` prints every
decision through :meth:`LinkPolicy.decide`, so the debugging command and the crawl
cannot disagree.

Per-host budgets and robots rules are *not* decided here: they belong to the shard that
owns the target host (docs/invariants.md #1).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

from crawler.parse import ParsedPage
from crawler.counters import DropReason
from crawler.policy.traprules import TrapRules
from crawler.urls import Scope

# A link's normalized URL (None if it has none) and why it is not followed (None: it is);
# the URL is never None when the reason is.
_Verdict = tuple[str | None, DropReason | None]


@dataclass(frozen=True, slots=True)
class LinkDecision:
    """The crawler's verdict on one link of a page (one ``crawl links`` line)."""

    raw: str
    resolved: str | None
    url: str | None
    nofollow: bool
    followed: bool
    reason: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "raw": self.raw,
            "resolved": self.resolved,
            "nofollow": self.nofollow,
            "followed": self.followed,
            "reason": self.reason,
        }


class LinkPolicy:
    """Normalize, scope and trap-check the links of a page."""

    def __init__(
        self,
        normalizer: Callable[[str], str | None],
        scope: Scope,
        traps: TrapRules,
        *,
        follow_rel_nofollow: bool = False,
    ) -> None:
        self.normalizer = normalizer
        self.scope = scope
        self.traps = traps
        self.follow_rel_nofollow = follow_rel_nofollow

    def _verdicts(self, meta_nofollow: bool, depth: int) -> Callable[[str | None, bool], _Verdict]:
        """The verdict on a link of a page with this robots-meta nofollow and link depth:
        ``verdict(resolved, nofollow)`` gives (normalized url or None, reason it is not
        followed or None). One function per page, its collaborators bound once: it runs
        per link."""
        normalizer = self.normalizer
        allows = self.scope.allows
        check = self.traps.check
        drop_nofollow = not self.follow_rel_nofollow

        def verdict(resolved: str | None, nofollow: bool) -> _Verdict:
            if resolved is None:
                return None, "unresolvable"
            url = normalizer(resolved)
            if url is None:
                scheme = resolved.split(":", 1)[0].lower() if ":" in resolved else ""
                return None, ("unsupported_scheme" if scheme not in ("http", "https") else "invalid")
            if meta_nofollow:
                return url, "meta_nofollow"
            if nofollow and drop_nofollow:
                return url, "nofollow"
            if not allows(url):
                return url, "scope"
            return url, check(url, depth)

        return verdict

    def follow(self, page: ParsedPage, depth: int, counts: Counter[DropReason]) -> list[str]:
        """Unique URLs to follow from ``page`` (links are at ``depth``); drops counted by reason.

        A link whose resolved string (and nofollow flag) already came up on this page
        reuses that verdict: the verdict depends on nothing else (the depth and the
        page's robots meta are the page's), so only the first occurrence is normalized
        and checked, and the counts stay those of deciding every link.
        """
        out: list[str] = []
        seen: set[str] = set()
        meta = page.meta_nofollow
        # One dict per nofollow flag: no tuple key to build per link.
        verdicts: tuple[dict[str | None, _Verdict], dict[str | None, _Verdict]] = ({}, {})
        verdict = self._verdicts(meta, depth)
        for link in page.links:
            resolved = link.resolved
            nofollow = link.nofollow and not meta
            known = verdicts[nofollow]
            found = known.get(resolved)
            if found is None:
                found = known[resolved] = verdict(resolved, nofollow)
            url, reason = found
            if reason is not None:
                counts[reason] += 1
            elif url in seen:
                counts["duplicate_on_page"] += 1
            elif url is not None:  # always, when there is no reason (see verdict)
                seen.add(url)
                out.append(url)
        return out

    def follow_urls(self, urls: list[str], depth: int, counts: Counter[DropReason]) -> list[tuple[str, str]]:
        """(normalized, as given) for the absolute URLs of a non-HTML source (a feed's
        entries) that pass the same rules as a page's links; drops counted by reason."""
        out: list[tuple[str, str]] = []
        seen: set[str] = set()
        verdict = self._verdicts(False, depth)
        for raw in urls:
            url, reason = verdict(raw, False)
            if reason is not None:
                counts[reason] += 1
            elif url in seen:
                counts["duplicate_on_page"] += 1
            elif url is not None:  # always, when there is no reason (see verdict)
                seen.add(url)
                out.append((url, raw))
        return out

    def decide(self, page: ParsedPage, depth: int) -> list[LinkDecision]:
        """Every link of the page with its verdict, in document order."""
        out: list[LinkDecision] = []
        seen: set[str] = set()
        meta = page.meta_nofollow
        verdict = self._verdicts(meta, depth)
        for link in page.links:
            url, reason = verdict(link.resolved, link.nofollow and not meta)
            if reason is None and url in seen:
                reason = "duplicate_on_page"
            elif reason is None and url is not None:  # url is never None without a reason
                seen.add(url)
            out.append(LinkDecision(link.raw, link.resolved, url, link.nofollow or meta, reason is None, reason))
        return out
