"""One host's page-budget accounting (:class:`HostAccount`) and the totals over every
host (:class:`BudgetTotals`), shared by crawler.policy.hostbudget.HostBudget, its novelty
rule (crawler.policy.novelty) and its snapshots (crawler.policy.budgetsnapshots).

Invariant kept: the totals are the sums of the accounts they were given; every account
added is dropped again before it is replaced or forgotten (else it would count twice).
"""

from __future__ import annotations

from operator import attrgetter
from typing import Iterable

__all__ = ["BudgetTotals", "HostAccount", "account_values"]


class HostAccount:
    """Accounting for one host. ``window`` holds the last fetches as bits, 1 = duplicate."""

    __slots__ = (
        "admitted", "rejected", "remaining", "fetched", "duplicates",
        "window", "samples", "since_cut_check", "penalty", "cuts",
    )
    # The order of a snapshot's values (crawler.policy.budgetsnapshots).
    FIELDS: tuple[str, ...] = __slots__

    def __init__(self, remaining: int | None) -> None:
        self.admitted = 0
        self.rejected = 0
        self.remaining = remaining
        self.fetched = 0
        self.duplicates = 0
        self.window = 0
        self.samples = 0
        self.since_cut_check = 0
        self.penalty = 1.0
        self.cuts = 0


#: An account's values in :attr:`HostAccount.FIELDS` order.
account_values = attrgetter(*HostAccount.FIELDS)


class BudgetTotals:
    """Running totals over every host's account, for metrics."""

    __slots__ = ("admitted", "rejected", "fetched", "duplicates", "cuts")

    def __init__(self) -> None:
        self.admitted = 0
        self.rejected = 0
        self.fetched = 0
        self.duplicates = 0
        self.cuts = 0

    def add(self, state: HostAccount) -> None:
        """Count an account that joins the table (a host adopted from another shard)."""
        self.admitted += state.admitted
        self.rejected += state.rejected
        self.fetched += state.fetched
        self.duplicates += state.duplicates
        self.cuts += state.cuts

    def drop(self, state: HostAccount) -> None:
        """Stop counting an account that leaves the table."""
        self.admitted -= state.admitted
        self.rejected -= state.rejected
        self.fetched -= state.fetched
        self.duplicates -= state.duplicates
        self.cuts -= state.cuts

    def recount(self, states: Iterable[HostAccount]) -> None:
        """Start again from ``states`` (after a restore or a merge)."""
        hosts = list(states)
        self.admitted = sum(s.admitted for s in hosts)
        self.rejected = sum(s.rejected for s in hosts)
        self.fetched = sum(s.fetched for s in hosts)
        self.duplicates = sum(s.duplicates for s in hosts)
        self.cuts = sum(s.cuts for s in hosts)
