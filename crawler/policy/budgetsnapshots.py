"""crawler.policy.hostbudget.HostBudget's state written out and read back: the spending
of changed hosts for the store (:meth:`BudgetSnapshots.take_changed`, brought back by
:meth:`~BudgetSnapshots.merge`), the periodic checkpoint (:meth:`~BudgetSnapshots.snapshot`
/ :meth:`~BudgetSnapshots.restore`), and one host's accounting handed to the shard that
takes the host over (:meth:`~BudgetSnapshots.export_host` / :meth:`~BudgetSnapshots.adopt_host`
/ :meth:`~BudgetSnapshots.forget_host`).

Invariant kept (docs/invariants.md #11): every change to what a host may still be
admitted marks it changed until :meth:`~BudgetSnapshots.take_changed` hands its spending
to the store, so a budget spent or cut is never refunded by a restart.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

from crawler.errors import StorageError
from crawler.policy.budgetlimits import BudgetLimits
from crawler.policy.hostaccount import BudgetTotals, HostAccount, account_values
from crawler.policy.novelty import NoveltyRule

__all__ = ["BudgetSnapshots"]

log = logging.getLogger(__name__)


class BudgetSnapshots:
    """Persistence and handover of a HostBudget's table.

    It works on the budget's own account table, limits and totals (shared, not copied);
    ``changed`` is the set of hosts the budget marks as it spends.
    """

    SNAPSHOT_VERSION = 1

    def __init__(
        self, hosts: dict[str, HostAccount], limits: BudgetLimits, totals: BudgetTotals, rule: NoveltyRule
    ) -> None:
        self._hosts = hosts
        self._limits = limits
        self._totals = totals
        self._rule = rule
        # Hosts whose admissions, cuts or limits changed since take_changed (the module
        # docstring).
        self.changed: set[str] = set()

    # --- the store's decisions -------------------------------------------------------

    def take_changed(self) -> dict[str, list[Any]]:
        """The spending (``admitted, rejected, remaining, cuts``) of every host changed
        since the last call, as the values of store decisions; the hosts are unmarked."""
        changed = self.changed
        if not changed:
            return {}
        hosts = self._hosts
        out = {}
        for host in changed:
            state = hosts.get(host)
            if state is not None:
                out[host] = [state.admitted, state.rejected, state.remaining, state.cuts]
        changed.clear()
        return out

    def merge(self, spending: Mapping[str, Any]) -> int:
        """Bring back hosts' spending from the store's decisions (see HostBudget.merge).
        A malformed value costs that host's copy (logged). Returns the hosts merged."""
        merged = 0
        bad: list[str] = []
        hosts = self._hosts
        for host, values in spending.items():
            try:
                admitted, rejected, remaining, cuts = values
                numbers = (int(admitted), int(rejected), None if remaining is None else int(remaining), int(cuts))
            except (TypeError, ValueError):
                bad.append(host)
                continue
            state = hosts.get(host)
            if state is None:
                state = hosts[host] = HostAccount(self._limits.limit(host))
            state.admitted, state.rejected, state.remaining, state.cuts = numbers
            merged += 1
        if bad:
            log.warning("host budget: ignoring %d malformed stored budgets (e.g. %r)", len(bad), bad[0])
        self._totals.recount(hosts.values())
        return merged

    # --- the checkpoint --------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """JSON-serialisable state, for the crash-safe frontier."""
        return {
            "version": self.SNAPSHOT_VERSION,
            "fields": list(HostAccount.FIELDS),
            "hosts": {host: list(account_values(state)) for host, state in self._hosts.items()},
            **self._limits.snapshot(),
        }

    def restore(self, snapshot: dict[str, Any]) -> None:
        """Replace all state with a :meth:`snapshot`; raises StorageError if malformed
        (and then changes nothing). A snapshot taken with a different ``novelty_window``
        is accepted: the window bits are truncated to the current size."""
        try:
            if snapshot["version"] != self.SNAPSHOT_VERSION:
                raise StorageError(
                    f"host budget snapshot version {snapshot['version']!r} is not "
                    f"{self.SNAPSHOT_VERSION}"
                )
            fields = tuple(snapshot["fields"])
            limits, name_limits = BudgetLimits.decode(snapshot)
            hosts = {str(host): self._decode(fields, values) for host, values in snapshot["hosts"].items()}
        except StorageError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise StorageError(f"host budget snapshot is malformed: {exc!r}") from exc
        self._hosts.clear()
        self._hosts.update(hosts)
        self._limits.replace(limits, name_limits)
        self._totals.recount(self._hosts.values())

    def _decode(self, fields: tuple[str, ...], values: Any) -> HostAccount:
        """One host's accounting from ``values`` in ``fields`` order, clamped to this
        budget's settings; KeyError/TypeError/ValueError if malformed."""
        record = dict(zip(fields, values, strict=True))
        state = HostAccount(self._limits.default)
        for name in HostAccount.FIELDS:
            setattr(state, name, record[name])
        self._rule.clamp(state)
        return state

    # --- a host changing shards (crawler.placement.handover) --------------------------------

    def export_host(self, host: str) -> dict[str, Any]:
        """One key's accounting and operator limit, to hand over with the host."""
        state = self._hosts.get(host)
        return {
            "state": None if state is None else [getattr(state, f) for f in HostAccount.FIELDS],
            "limit": self._limits.by_key.get(host),
        }

    def adopt_host(self, host: str, data: dict[str, Any]) -> None:
        """Take over one key's accounting from :meth:`export_host` (it replaces ours)."""
        if data.get("limit") is not None:
            self._limits.by_key[host] = int(data["limit"])
        values = data.get("state")
        if values is None:
            return
        old = self._hosts.get(host)
        if old is not None:  # counted twice otherwise
            self._totals.drop(old)
        state = HostAccount(self._limits.limit(host))
        for name, value in zip(HostAccount.FIELDS, values, strict=True):
            setattr(state, name, value)
        self._hosts[host] = state
        self.changed.add(host)  # this shard's store keeps it from now on
        self._totals.add(state)

    def forget_host(self, host: str) -> None:
        """Drop one key's accounting (it now lives on another shard)."""
        state = self._hosts.pop(host, None)
        if state is not None:
            self._totals.drop(state)
        self._limits.by_key.pop(host, None)
        self.changed.discard(host)  # its store rows and decisions went too
