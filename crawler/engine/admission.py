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
``budget_cut``), and so does an operator's ``max_pages`` (:meth:`Admission.limit`, counted
``host_limit``). Every one of these is in the URL ledger (crawler.session.ledger).

The decisions that limit fetching are as durable as the admissions they govern
(docs/invariants.md #11). Steps 1-3 are one store commit and one journal batch
(crawler.frontier.store.FrontierStore.admit): the URLs new to the store, the ones refused
or dropped, and the accounting of every host whose budget changed since the last
commit (an admission spends it, a cut or an operator's limit shrinks it). A cut or a
limit goes with the URLs it trims (:meth:`trim`, :meth:`limit`); a robots.txt verdict
is written when it is fetched, with the URLs it refuses (:meth:`robots_verdict`). So a
store rebuilt from OUT after the node is lost never holds admissions without the budget
they spent, and :meth:`restore_decisions` brings budgets and verdicts back over the
checkpoint, which reaches OUT only every ``runtime.state_ship_interval_s``: a restarted
shard neither refunds a budget nor asks robots.txt again before it may refuse.

The cost is per host and batch, not per URL: a batch writes one row of decisions, with
four numbers per host it touched, and its drops go in its one commit
(benchmarks/durable_limits.py measures the CPU per admitted URL).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Mapping, Sequence

from crawler.frontier.frontier import Frontier
from crawler.frontier.urlitem import UrlItem
from crawler.frontier.store import Decisions, FrontierStore, Verdicts
from crawler.robots import RobotsCache
from crawler.policy.hostbudget import HostBudget
from crawler.urls import origin
from crawler.counters import DropReason

#: Decision kinds (crawler.frontier.store.Decisions): hosts' budgets, origins' rules.
BUDGET, ROBOTS = "budget", "robots"


class Admission:
    """Steps 1-3 of the module docstring for one shard, and the durability of the
    decisions behind them (a :class:`crawler.engine.checkpoint.DecisionSource`)."""

    def __init__(
        self,
        store: FrontierStore | None,
        robots: RobotsCache,
        host_budget: HostBudget,
        frontier: Frontier,
        *,
        respect_robots: bool,
        dropped: Counter[DropReason],
    ) -> None:
        self.store = store
        self.robots = robots
        self.host_budget = host_budget
        self.frontier = frontier
        self.respect_robots = respect_robots
        self.dropped = dropped

    def take(self, items: Sequence[UrlItem]) -> tuple[list[UrlItem], list[UrlItem]]:
        """(URLs to queue, URLs refused by cached robots rules: record their rows)."""
        if self.store is None:
            keep, refused, _ = self._judge(items)
            return keep, refused
        judged: list[tuple[list[UrlItem], list[UrlItem]]] = []

        def decide(fresh: list[UrlItem]) -> Verdicts:
            keep, refused, over_budget = self._judge(fresh)
            judged.append((keep, refused))
            return Verdicts([i.url for i in refused], over_budget, self.pending())

        fresh = self.store.admit(items, decide)
        if len(fresh) != len(items):
            self.dropped["duplicate_delivery"] += len(items) - len(fresh)
        return judged[0] if judged else ([], [])

    def _judge(self, items: Sequence[UrlItem]) -> tuple[list[UrlItem], list[UrlItem], list[str]]:
        """Steps 2 and 3: (to queue, refused by robots, URLs over their host's budget)."""
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
        return keep, refused, over_budget

    def trim(self, host: str, drop: int) -> int:
        """A budget cut: the host's queue shrinks to its new plan. Returns URLs dropped."""
        dropped = self._trim({host: drop})
        self.dropped["budget_cut"] += dropped
        return dropped

    def limit(self, drops: Mapping[str, int]) -> int:
        """An operator's ``max_pages``: each host's queue shrinks by its count in ``drops``
        (counted ``host_limit``). Returns URLs dropped."""
        dropped = self._trim(drops)
        self.dropped["host_limit"] += dropped
        return dropped

    def _trim(self, drops: Mapping[str, int]) -> int:
        """Trim the queues, and make the budgets that shrank durable in the same commit."""
        urls: list[str] = []
        for host, drop in drops.items():
            if drop > 0:
                urls.extend(self.frontier.trim(host, drop))
        if self.store is not None:
            self.store.drop(urls, self.pending())
        return len(urls)

    def robots_verdict(self, origin_: str, refused: Sequence[str]) -> None:
        """The rules just fetched for ``origin_`` are in force: durable with the queued
        URLs they refuse (claimed: their rows follow), so a restarted shard refuses
        without fetching robots.txt again."""
        if self.store is None:
            return
        decisions = dict(self.pending())
        entry = self.robots.entry(origin_)
        if entry is not None:
            decisions[ROBOTS] = {origin_: entry}
        self.store.claim(refused, decisions)

    def pending(self) -> Decisions:
        """The budgets changed since the last commit that carried them, as decisions."""
        changed = self.host_budget.take_changed()
        return {BUDGET: changed} if changed else {}

    def restore_decisions(self) -> None:
        """After the checkpoint was restored: the decisions made since it, in order (the
        newest per host or origin wins; crawler.engine.checkpoint)."""
        if self.store is None:
            return
        budgets: dict[str, object] = {}
        verdicts: list[dict[str, Any]] = []
        for kind, key, value in self.store.decisions.read():
            if kind == BUDGET:
                budgets[key] = value
            elif kind == ROBOTS:
                verdicts.append(value)
        self.host_budget.merge(budgets)
        self.robots.restore(verdicts)
