"""The per-host page budget: what one host may cost in all (the second layer against
spider traps, after :class:`crawler.policy.traprules.TrapRules`).

* :class:`HostBudget` bounds what one host can cost in total. Each host has a page
  budget; the budget is cut every time a full window of the host's fetches turns out to
  be mostly duplicates of stored content, so a trap that survives the shape rules still
  stops after a logarithmic number of windows (see :class:`HostBudget`), and the host's
  politeness interval is stretched by :meth:`HostBudget.penalty` meanwhile.

What a host has spent and been cut to bounds what it may still be admitted, so it is as
durable as those admissions (docs/invariants.md #11): every change to it (an admission or
a refusal, a cut, an operator's limit, a host adopted) marks the host *changed*, and
crawler.engine.admission writes the changed hosts' spending (:meth:`HostBudget.take_changed`:
admitted, rejected, remaining, cuts) in the same store commit and journal batch as the
URLs it admitted or dropped. Novelty samples bound nothing until they make a cut, and
change on every fetch: they stay in the periodic checkpoint (:meth:`HostBudget.snapshot`).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from crawler.policy.budgetlimits import BudgetLimits
from crawler.policy.budgetsnapshots import BudgetSnapshots
from crawler.policy.hostaccount import BudgetTotals, HostAccount
from crawler.policy.novelty import NoveltyRule
from crawler.policy.traprules import check_limit

__all__ = ["HostBudget"]


class HostBudget:
    """Per-host page budget with a novelty-driven cut and a demotion penalty.

    * :meth:`admit` is called when a URL of a host is about to enter the frontier: it
      spends one page of the host's budget, or returns False when none is left (the
      caller drops the URL and counts rule ``"host_budget"``).
    * :meth:`record_fetch` is called after each fetched page is fingerprinted, with
      ``duplicate=True`` for an exact or near duplicate of stored content, and the number
      of the host's URLs still queued; it returns how many of those to drop.
    * :meth:`novelty` is the share of non-duplicates among the host's last
      ``novelty_window`` fetches (1.0 until ``novelty_min_samples`` fetches are known).
    * :meth:`penalty` (>= 1.0): above 1.0 the host is demoted (it yields to every other
      due host; crawler.frontier.frontier), never slowed: politeness is about what a host can
      take, not what it is worth to us. On every fetch, once there are ``novelty_min_samples`` samples, it is
      multiplied by ``2 ** (1 / novelty_window)`` while novelty is below
      ``novelty_threshold`` (so it doubles per window of low novelty, up to
      ``max_penalty``) and divided by the same factor otherwise (down to 1.0).
    * Budget cut: fetches are grouped in consecutive, non-overlapping windows of
      ``novelty_window``. At the end of each window whose novelty is below the
      threshold, the host's planned work (URLs queued plus pages it may still be
      admitted) is multiplied by ``cut_factor`` and rounded down; queued URLs beyond it
      are dropped (the caller counts them as ``budget_cut``: no row, since a trap's
      URLs are not pages anyone asked for), and the rest is what may still be admitted.
      With no per-host limit (``max_pages_per_host=None``), the first cut plans
      ``cut_factor`` x (queued + the pages admitted so far). Cuts are never undone: a
      host that served a window of duplicates has shown what its URL space is worth.
      ``novelty_threshold=0`` disables cuts and penalties.

    Bound (proved by tests/unit/test_traps.py): if every fetched page of a host is a
    duplicate, its planned work after k cuts is at most ``B * cut_factor**k``, so it is
    0 after ``K = floor(log(B) / log(1/cut_factor)) + 1`` cuts, i.e. after
    ``K * novelty_window`` fetches. If each fetched page yields at most ``f`` new links,
    the host is admitted at most ``seeds + f * novelty_window * K`` URLs in total (and
    never more than ``B``): logarithmic in the budget, e.g. 1 + 10*20*20 = 4,001 for
    B = 1,000,000, f = 10 and the defaults, instead of a million. Since the queue is cut
    too, a host whose first window is all duplicates is fetched at most
    ``novelty_window + floor(cut_factor * (B - novelty_window))`` times in all, however
    many of its URLs were queued (tests/integration/test_traps_last.py measures it).
    """

    SNAPSHOT_VERSION = BudgetSnapshots.SNAPSHOT_VERSION

    def __init__(
        self,
        max_pages_per_host: int | None,
        *,
        novelty_window: int = 20,
        novelty_min_samples: int = 10,
        novelty_threshold: float = 0.5,
        cut_factor: float = 0.5,
        max_penalty: float = 8.0,
    ) -> None:
        self.max_pages_per_host = check_limit("max_pages_per_host", max_pages_per_host, 0)
        # Novelty, penalty and cuts (crawler.policy.novelty).
        self.rule = NoveltyRule(novelty_window, novelty_min_samples, novelty_threshold, cut_factor, max_penalty)
        self._hosts: dict[str, HostAccount] = {}
        # Operator limits (PUT /hosts/{host}/policy {max_pages}): per key, per hostname.
        self._limits = BudgetLimits(self.max_pages_per_host)
        self._totals = BudgetTotals()
        # The store's decisions, the checkpoint and host handovers write the table out
        # and read it back (crawler.policy.budgetsnapshots).
        self.snapshots = BudgetSnapshots(self._hosts, self._limits, self._totals, self.rule)
        # Hosts whose admissions, cuts or limits changed since take_changed (the module
        # docstring); the set is the snapshots' own.
        self._changed = self.snapshots.changed

    def _state(self, host: str) -> HostAccount:
        state = self._hosts.get(host)
        if state is None:
            state = self._hosts[host] = HostAccount(self._limits.limit(host))
        return state

    # --- operator limits ------------------------------------------------------------

    def limit(self, host: str) -> int | None:
        """Pages key ``host`` may be admitted in all: the operator's limit for the key,
        else for its hostname, else ``max_pages_per_host``."""
        return self._limits.limit(host)

    def set_limit(self, host: str, max_pages: int, queued: int = 0) -> int:
        """Operator limit for key ``host``: ``max_pages`` admitted in all. The host has
        ``queued`` URLs waiting; returns how many of them to drop (the newest), so what
        stays queued plus what may still be admitted fits the limit."""
        return self._apply_limit(host, self._limits.set_key(host, max_pages), queued)

    def set_name_limit(self, name: str, max_pages: int, queued_of: Callable[[str], int]) -> dict[str, int]:
        """Operator limit for every key of hostname ``name`` (any port, keys seen later
        too); it replaces earlier per-key limits of the hostname. ``queued_of(key)`` is
        the key's queue length. Returns the URLs to drop per key (see :meth:`set_limit`)."""
        max_pages, keys = self._limits.set_name(name, max_pages, self._hosts)
        return {key: self._apply_limit(key, max_pages, queued_of(key)) for key in keys}

    def _apply_limit(self, host: str, max_pages: int, queued: int) -> int:
        state = self._hosts.get(host)
        if state is None:
            return 0  # created with the limit on its first admit
        used = max(0, state.admitted - queued)  # admitted and no longer waiting
        left = max(0, max_pages - used)
        drop = max(0, queued - left)
        state.remaining = left - (queued - drop)
        self._changed.add(host)
        return drop

    def limits(self) -> tuple[dict[str, int], dict[str, int]]:
        """The operator limits: (per key, per hostname)."""
        return dict(self._limits.by_key), dict(self._limits.by_name)

    # --- the hot path -------------------------------------------------------------

    def admit(self, host: str) -> bool:
        """Spend one page of ``host``'s budget; False if it is spent (drop the URL)."""
        state = self._state(host)
        self._changed.add(host)
        remaining = state.remaining
        if remaining is not None:
            if remaining <= 0:
                state.rejected += 1
                self._totals.rejected += 1
                return False
            state.remaining = remaining - 1
        state.admitted += 1
        self._totals.admitted += 1
        return True

    def record_fetch(self, host: str, duplicate: bool, queued: int = 0) -> int:
        """Record one fetched, fingerprinted page of ``host``, which has ``queued`` URLs
        waiting in the frontier. Returns how many of those to drop (a cut trims the queue)."""
        state = self._state(host)
        duplicate = bool(duplicate)
        totals = self._totals
        state.fetched += 1
        totals.fetched += 1
        if duplicate:
            state.duplicates += 1
            totals.duplicates += 1
        if self.rule.record(state, duplicate):
            self._changed.add(host)
            totals.cuts += 1
            return self.rule.cut(state, queued)
        return 0

    # --- queries ------------------------------------------------------------------

    def novelty(self, host: str) -> float:
        """Share of non-duplicates in the host's last window (1.0 with few samples)."""
        return self.rule.novelty(self._hosts.get(host))

    def penalty(self, host: str) -> float:
        """Factor >= 1.0 for the host's politeness interval (and priority demotion)."""
        state = self._hosts.get(host)
        return 1.0 if state is None else state.penalty

    def remaining(self, host: str) -> int | None:
        """Pages the host may still be admitted; None means no limit."""
        state = self._hosts.get(host)
        return self.limit(host) if state is None else state.remaining

    def stats(self) -> dict[str, int]:
        """Totals over all hosts, for metrics."""
        exhausted = penalized = 0
        for state in self._hosts.values():
            if state.remaining == 0:
                exhausted += 1
            if state.penalty > 1.0:
                penalized += 1
        totals = self._totals
        return {
            "hosts": len(self._hosts),
            "admitted": totals.admitted,
            "rejected": totals.rejected,
            "fetched": totals.fetched,
            "duplicates": totals.duplicates,
            "cuts": totals.cuts,
            "exhausted_hosts": exhausted,
            "penalized_hosts": penalized,
        }

    # --- a host changing shards (crawler.placement.handover) --------------------------------

    def export_host(self, host: str) -> dict[str, Any]:
        """One key's accounting and operator limit, to hand over with the host."""
        return self.snapshots.export_host(host)

    def adopt_host(self, host: str, data: dict[str, Any]) -> None:
        """Take over one key's accounting from :meth:`export_host` (it replaces ours)."""
        self.snapshots.adopt_host(host, data)

    def forget_host(self, host: str) -> None:
        """Drop one key's accounting (it now lives on another shard)."""
        self.snapshots.forget_host(host)

    # --- persistence (crawler.policy.budgetsnapshots) ---------------------------------

    def take_changed(self) -> dict[str, list[Any]]:
        """The spending (``admitted, rejected, remaining, cuts``) of every host changed
        since the last call (see the module docstring), as the values of store decisions;
        the hosts are unmarked."""
        return self.snapshots.take_changed()

    def merge(self, spending: Mapping[str, Any]) -> int:
        """Bring back hosts' spending from the store's decisions (:meth:`take_changed`'s
        values, the newest per host) over what :meth:`restore` loaded from the checkpoint.
        A host's decision is written with every change to its spending and before every
        checkpoint, so it is never older than the checkpoint's copy: a budget spent or cut
        since the last checkpoint is not refunded. Novelty stays as the checkpoint has it.
        A malformed value costs that host's copy (logged). Returns the hosts merged."""
        return self.snapshots.merge(spending)

    def snapshot(self) -> dict[str, Any]:
        """JSON-serialisable state, for the crash-safe frontier."""
        return self.snapshots.snapshot()

    def restore(self, snapshot: dict[str, Any]) -> None:
        """Replace all state with a :meth:`snapshot`; raises StorageError if malformed.

        A snapshot taken with a different ``novelty_window`` is accepted: the window
        bits are truncated to the current size.
        """
        self.snapshots.restore(snapshot)
