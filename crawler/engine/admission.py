"""What a shard takes into its queue, and what leaves it without a fetch.

A batch of URLs delivered to a shard (its hosts' discovered links and seeds) passes, in
order:

1. the durable store: a URL it already holds is not queued again (a batch delivered
   twice, the links of a page fetched again after a crash), counted
   ``duplicate_delivery``; the rest is committed before the sender hears back;
2. cached robots rules: a refused URL gets its ``robots_blocked`` row at once and takes
   no queue space; it is *claimed* in the store in the same step, so it never looks like
   a URL waiting in the frontier (queued means exactly that: crawler.frontier.store);
3. the host's page budget (crawler.policy.hostbudget.HostBudget): a URL over it is dropped, counted
   ``host_budget``, finished in the store with no row.

A budget cut later trims the host's queue the same way (:meth:`Admission.trim`, counted
``budget_cut``). Every one of these is in the URL ledger (crawler.session.ledger).
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

from crawler.frontier.frontier import Frontier
from crawler.frontier.urlitem import UrlItem
from crawler.frontier.store import FrontierStore
from crawler.robots import RobotsCache
from crawler.policy.hostbudget import HostBudget
from crawler.urls import origin


class Admission:
    """Steps 1-3 of the module docstring for one shard."""

    def __init__(
        self,
        store: FrontierStore | None,
        robots: RobotsCache,
        host_budget: HostBudget,
        frontier: Frontier,
        *,
        respect_robots: bool,
        dropped: Counter[str],
    ) -> None:
        self.store = store
        self.robots = robots
        self.host_budget = host_budget
        self.frontier = frontier
        self.respect_robots = respect_robots
        self.dropped = dropped

    def take(self, items: Sequence[UrlItem]) -> tuple[list[UrlItem], list[UrlItem]]:
        """(URLs to queue, URLs refused by cached robots rules: record their rows)."""
        if self.store is not None:
            fresh = self.store.add(items)
            if len(fresh) != len(items):
                self.dropped["duplicate_delivery"] += len(items) - len(fresh)
            items = fresh
        keep: list[UrlItem] = []
        refused: list[UrlItem] = []
        over_budget: list[str] = []
        for item in items:
            if self.respect_robots and self.robots.allowed(item.url, origin(item.url)) is False:
                refused.append(item)
            elif not self.host_budget.admit(item.host):
                self.dropped["host_budget"] += 1
                over_budget.append(item.url)
            else:
                keep.append(item)
        if self.store is not None:
            self.store.claim([i.url for i in refused])
            self.store.drop(over_budget)
        return keep, refused

    def trim(self, host: str, drop: int) -> int:
        """A budget cut: the host's queue shrinks to its new plan. Returns URLs dropped."""
        urls = self.frontier.trim(host, drop)
        if self.store is not None:
            self.store.drop(urls)
        self.dropped["budget_cut"] += len(urls)
        return len(urls)
