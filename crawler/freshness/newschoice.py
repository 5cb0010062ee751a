"""Which of a host's news sources to read, and when: one source chosen per host, read at
the host's pace, the others checked in a few of its turns.

A news host often has several sources that list the same articles (a feed, a news
sitemap, a front page). Reading each at the pace of the host's news costs one request per
source per article; reading one costs one. :class:`HostChoice` learns which one to read:

* *reach*: for each source fetch, the newest ``REACH_SAMPLE`` new articles of the host
  that were first revealed (by any source) since that source's previous fetch, and how
  many of them it lists now. A source that lists (nearly) all of them carries the host's
  news completely and on time; one that lists a part (a section page) or lists them late
  (a sitemap rebuilt hourly) does not. A 304 lists what the source listed before.
  Decayed sums (``REACH_DECAY`` per sample), so a source that stops carrying everything
  is noticed within a few samples.
* *choice*: the source with the best reach, at least ``COMPLETE``, after at least
  ``MIN_EXPECTED`` articles were expected of it (ties: a feed, then a news sitemap, then
  a hub; then the one that revealed most articles first). None while nothing qualifies:
  then the sources take turns, as together they carry everything.
* *turns*: the host is read on a grid of slots ``period`` apart
  (crawler.freshness.news.NewsPolicy sets the period from the host's arrival rate). The
  chosen source owns every slot but one in ``CHECK_EVERY``; that one goes to the other
  sources in turn, so checking them costs no extra request (and they reveal articles too
  when they carry them). A source asking for its next read when the chosen one is not
  due within two slots (it failed, or was just chosen while waiting for a far turn)
  takes the next slot itself, so the host is never left unread.

Pure bookkeeping on wall seconds handed in by the caller: no clock, no I/O.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = [
    "CHECK_EVERY",
    "COMPLETE",
    "INCOMPLETE",
    "KIND_RANK",
    "LAGGING_EVERY",
    "MIN_EXPECTED",
    "REACH_DECAY",
    "REACH_SAMPLE",
    "RECENT",
    "HostChoice",
    "Reach",
]

#: New articles of a host remembered with the time they were first revealed.
RECENT = 64
#: The newest articles of a window a source is asked to list (a front page lists ~10).
REACH_SAMPLE = 6
#: Weight of a source's earlier reach samples, per sample.
REACH_DECAY = 0.8
#: Decayed articles expected of a source before its reach counts.
MIN_EXPECTED = 3.0
#: Reach a source needs to be chosen (and keeps, to stay chosen).
COMPLETE = 0.9
#: Reach under which a hub that is not chosen is not worth checking (crawler.freshness.news).
INCOMPLETE = 0.5
#: One slot in this many goes to the other sources, in turn.
CHECK_EVERY = 8
#: A source that lists less than ``COMPLETE`` and is not chosen is read once in this many
#: periods, between two slots (an extra read, so that no slot finds less than it could).
LAGGING_EVERY = 4 * CHECK_EVERY
#: Preference between sources of equal reach: a feed answers a conditional GET with 304.
KIND_RANK = {"feed": 3, "sitemap": 2, "hub": 1, "candidate": 0}


@dataclass(slots=True)
class Reach:
    """What one source showed of the host's new articles."""

    hits: float = 0.0
    expected: float = 0.0
    firsts: float = 0.0  # decayed articles it revealed first
    last_wall: float | None = None  # its previous fetch (the start of its next window)
    listed: frozenset[str] = frozenset()  # the recent articles it listed at its last 200

    def coverage(self) -> float | None:
        """Share of the expected articles it listed; None until ``MIN_EXPECTED``."""
        return self.hits / self.expected if self.expected >= MIN_EXPECTED else None


@dataclass(slots=True)
class HostChoice:
    """One host's recent articles, its sources' reach, the chosen source and the slot grid."""

    recent: OrderedDict[str, float] = field(default_factory=OrderedDict)  # article -> first revealed (wall)
    reach: dict[str, Reach] = field(default_factory=dict)
    chosen: str | None = None
    switches: int = 0
    period: float = 0.0
    grid0: float | None = None

    def observe(self, source: str, now: float, new: Iterable[str], listed: Iterable[str] | None) -> None:
        """A fetch of ``source`` at ``now`` revealed ``new`` articles first and listed
        ``listed`` (None: nothing known of its listing, e.g. it failed)."""
        r = self.reach.setdefault(source, Reach())
        fresh = 0
        for url in new:
            if url not in self.recent:
                self.recent[url] = now
                fresh += 1
                if len(self.recent) > RECENT:
                    self.recent.popitem(last=False)
        r.firsts = REACH_DECAY * r.firsts + fresh
        if listed is not None:
            shown = set(listed)
            if r.last_wall is not None:
                start = r.last_wall
                window = [u for u, t in self.recent.items() if start < t <= now][-REACH_SAMPLE:]
                if window:
                    r.hits = REACH_DECAY * r.hits + sum(u in shown for u in window)
                    r.expected = REACH_DECAY * r.expected + len(window)
            r.listed = frozenset(u for u in shown if u in self.recent)
            r.last_wall = now

    def unchanged(self, source: str, now: float) -> None:
        """A 304: the source lists what it listed at its last full read."""
        r = self.reach.get(source)
        if r is not None and r.last_wall is not None:
            self.observe(source, now, (), r.listed)

    def forget(self, source: str) -> None:
        self.reach.pop(source, None)
        if self.chosen == source:
            self.chosen = None

    def choose(self, members: dict[str, str]) -> str | None:
        """The chosen source among ``members`` (URL -> kind), kept while its reach holds."""
        cur = self.chosen
        if cur is not None and cur in members:
            cov = self.reach[cur].coverage() if cur in self.reach else None
            if cov is None or cov >= COMPLETE:
                return cur
        best: tuple[float, int, float] | None = None
        pick = None
        for url, kind in members.items():
            r = self.reach.get(url)
            cov = r.coverage() if r is not None else None
            if r is None or cov is None or cov < COMPLETE:
                continue
            key = (round(cov, 2), KIND_RANK.get(kind, 0), r.firsts)
            if best is None or key > best:
                best, pick = key, url
        if pick != cur:
            self.switches += cur is not None
            self.chosen = pick
        return pick

    def set_period(self, period: float, now: float) -> None:
        """The host's read period; the grid is stretched about ``now`` so slots already
        handed out stay roughly where they were."""
        if self.grid0 is None or self.period <= 0:
            self.grid0, self.period = now, period
            return
        k = (now - self.grid0) / self.period
        self.grid0, self.period = now - k * period, period

    def slot(self, source: str, members: list[str], start: float, chosen_due: float | None) -> float:
        """The first slot at or after ``start`` that ``source`` owns (module docstring)."""
        assert self.grid0 is not None and self.period > 0
        order = sorted(members)
        j0 = max(0, math.ceil((start - self.grid0) / self.period - 1e-9))
        chosen = self.chosen if self.chosen in order else None
        if chosen is not None and source != chosen and (chosen_due is None or chosen_due > start + 2 * self.period):
            return self.grid0 + j0 * self.period  # stand in for a chosen source that is not due
        if chosen is not None and source != chosen and self._lagging(source):
            # A read that would find less than the chosen one costs the articles of its slot
            # a period: a source known to lag is read between two slots, rarely.
            return self.grid0 + (j0 + LAGGING_EVERY - 0.5) * self.period
        others = [m for m in order if m != chosen and not self._lagging(m)]
        span = CHECK_EVERY * (len(others) + 1) + len(order) + 1
        for j in range(j0, j0 + span):
            if self._owner(j, chosen, order, others) == source:
                return self.grid0 + j * self.period
        return self.grid0 + j0 * self.period

    def _lagging(self, source: str) -> bool:
        r = self.reach.get(source)
        cov = r.coverage() if r is not None else None
        return cov is not None and cov < COMPLETE

    @staticmethod
    def _owner(j: int, chosen: str | None, order: list[str], others: list[str]) -> str | None:
        if chosen is None:
            return order[j % len(order)] if order else None
        if others and j % CHECK_EVERY == 0:
            return others[(j // CHECK_EVERY) % len(others)]
        return chosen
