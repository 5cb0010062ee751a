"""When to render a page: signals in its HTML, what renders of its host found, spot checks.

Rendering costs a browser about a second of CPU per page; most pages do not need it.
In ``auto`` mode a page is rendered when:

1. **its HTML says so** (the signals StormCrawler's detector reads): a framework marker
   (``ng-version``, ``data-reactroot``, ``__NEXT_DATA__``, ``__NUXT__``,
   ``data-svelte-h``), a ``<noscript>`` asking to enable JavaScript, an empty app root
   (``#root``, ``#app``, ``#__next``), or little text and few links next to scripts;
2. **its host's renders paid off**: after ``host_min_renders`` renders of a host, the
   host's estimate (the share of its renders that found more links or text than the
   raw HTML, Laplace-smoothed) decides for pages without a signal (render when it is
   at least ``host_threshold``) and can overrule signals that never paid off there
   (markers on server-rendered pages);
3. **a spot check** picks it: ``spot_check_share`` of the pages not rendered otherwise,
   drawn from the injected ``random.Random``. Spot checks teach step 2 about hosts whose
   HTML shows no signal (crawlee's adaptive crawler keeps ~10% such checks).

``always`` renders every HTML page, ``never`` none. Each decision has a reason, counted
by the caller as ``render_decision_<reason>``. The per-host table is bounded
(least recently used hosts are forgotten first). Pure logic: tested without a browser.
"""

from __future__ import annotations

import random
import re
from collections import OrderedDict
from dataclasses import dataclass

from crawler.parse import ParsedPage

__all__ = ["Decision", "RenderDecider", "page_signals", "render_gained"]

_SCAN_BYTES = 256 * 1024  # markers sit in the head or the first screen of markup

_FRAMEWORK = re.compile(rb"ng-version=|data-reactroot|__next_data__|__nuxt__|data-svelte-h|data-server-rendered")
_NOSCRIPT = re.compile(rb"<noscript[^>]*>(?:(?!</noscript).){0,400}?(?:enable|requires?|need|turn on)[^<]{0,40}javascript"
                       rb"|<noscript[^>]*>(?:(?!</noscript).){0,400}?javascript[^<]{0,60}(?:required|enabled|disabled)", re.S)
_EMPTY_ROOT = re.compile(rb"<(?:div|main|section|app-root)[^>]*\bid\s*=\s*[\"']?(?:root|app|__next|__nuxt)[\"']?[^>]*>\s*</")
_SCRIPT = re.compile(rb"<script\b")

#: A page with a script and less visible text than this (characters) and fewer links
#: than THIN_LINKS is "thin": its content probably comes from the script.
THIN_TEXT = 200
THIN_LINKS = 3


def page_signals(body: bytes, parsed: ParsedPage) -> list[str]:
    """The reasons in ``body`` to think a page needs its scripts run (empty: none)."""
    head = body[:_SCAN_BYTES].lower()
    if not _SCRIPT.search(head):
        return []  # no script, nothing a browser would add
    out = []
    if _FRAMEWORK.search(head):
        out.append("framework")
    if _NOSCRIPT.search(head):
        out.append("noscript")
    if _EMPTY_ROOT.search(head):
        out.append("empty_root")
    if len(parsed.text) < THIN_TEXT and len(parsed.links) < THIN_LINKS:
        out.append("thin")
    return out


def render_gained(raw: ParsedPage, rendered: ParsedPage) -> bool:
    """Did the rendered page find more than the raw HTML: a link the raw page lacks, or
    at least 50% (and 200 characters) more visible text?"""
    before = {link.resolved for link in raw.links}
    if any(link.resolved not in before for link in rendered.links if link.resolved):
        return True
    return len(rendered.text) >= 1.5 * len(raw.text) + THIN_TEXT


@dataclass(frozen=True, slots=True)
class Decision:
    """Render or not, and why (``signal_<name>``, ``host_gain``, ``host_no_gain``,
    ``spot_check``, ``plain``, ``always``, ``not_html``)."""

    render: bool
    reason: str
    signals: tuple[str, ...] = ()


class RenderDecider:
    """The ``auto`` policy of one shard (see the module docstring).

    Args:
        mode: ``never`` | ``auto`` | ``always``.
        rng: draws the spot checks (seeded per shard: a crawl's decisions are repeatable).
        spot_check_share, host_min_renders, host_threshold: from ``render``.
        max_hosts: hosts whose estimate is kept.
    """

    def __init__(self, mode: str, rng: random.Random, *, spot_check_share: float = 0.05, host_min_renders: int = 3,
                 host_threshold: float = 0.5, max_hosts: int = 100_000) -> None:
        self.mode = mode
        self.rng = rng
        self.spot_check_share = spot_check_share
        self.host_min_renders = host_min_renders
        self.host_threshold = host_threshold
        self.max_hosts = max_hosts
        self._hosts: OrderedDict[str, list[int]] = OrderedDict()  # host -> [renders, gains]

    def decide(self, host: str, body: bytes, parsed: ParsedPage | None) -> Decision:
        """Whether to render this fetched page (``parsed``: its raw HTML parsed; None: not HTML)."""
        if self.mode == "never":
            return Decision(False, "never")
        if parsed is None or not parsed.is_html:
            return Decision(False, "not_html")
        if self.mode == "always":
            return Decision(True, "always")
        signals = tuple(page_signals(body, parsed))
        estimate = self.estimate(host)
        if signals:
            if estimate is not None and estimate < self.host_threshold:
                return self._spot(Decision(False, "host_no_gain", signals))
            return Decision(True, "signal_" + signals[0], signals)
        if estimate is not None and estimate >= self.host_threshold:
            return Decision(True, "host_gain")
        return self._spot(Decision(False, "plain"))

    def _spot(self, no: Decision) -> Decision:
        if self.spot_check_share > 0 and self.rng.random() < self.spot_check_share:
            return Decision(True, "spot_check", no.signals)
        return no

    def learn(self, host: str, gained: bool) -> None:
        """A render of ``host`` found more than its raw HTML (``gained``) or not."""
        st = self._hosts.get(host)
        if st is None:
            st = self._hosts[host] = [0, 0]
            if len(self._hosts) > self.max_hosts:
                self._hosts.popitem(last=False)
        else:
            self._hosts.move_to_end(host)
        st[0] += 1
        st[1] += bool(gained)

    def estimate(self, host: str) -> float | None:
        """The share of ``host``'s renders that gained (Laplace-smoothed), or None before
        ``host_min_renders`` renders."""
        st = self._hosts.get(host)
        if st is None or st[0] < self.host_min_renders:
            return None
        return (st[1] + 1) / (st[0] + 2)

    def snapshot(self) -> dict[str, list[int]]:
        """The per-host table (checkpointed with the shard's other policies)."""
        return {h: list(v) for h, v in self._hosts.items()}

    def restore(self, state: dict[str, list[int]]) -> None:
        for host, v in dict(state).items():
            if isinstance(v, (list, tuple)) and len(v) == 2 and all(isinstance(x, int) and x >= 0 for x in v):
                self._hosts[str(host)] = [int(v[0]), min(int(v[1]), int(v[0]))]
