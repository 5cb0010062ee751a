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

import logging
import math
from operator import attrgetter
from typing import Any, Mapping

from crawler.errors import ConfigError, StorageError
from crawler.policy.traprules import check_limit
from crawler.control.hostpolicy import name_of

__all__ = ["HostBudget"]

log = logging.getLogger(__name__)


class _HostState:
    """Accounting for one host. ``window`` holds the last fetches as bits, 1 = duplicate."""

    __slots__ = (
        "admitted", "rejected", "remaining", "fetched", "duplicates",
        "window", "samples", "since_cut_check", "penalty", "cuts",
    )
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


_fields = attrgetter(*_HostState.FIELDS)


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

    SNAPSHOT_VERSION = 1

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
        window = check_limit("novelty_window", novelty_window, 1)
        if window is None:
            raise ConfigError("novelty_window must be a whole number >= 1 (got None)")
        self.novelty_window: int = window
        min_samples = check_limit("novelty_min_samples", novelty_min_samples, 1)
        if min_samples is None or min_samples > window:
            raise ConfigError(
                f"novelty_min_samples must be between 1 and novelty_window ({window}), "
                f"got {novelty_min_samples!r}"
            )
        self.novelty_min_samples: int = min_samples
        self.novelty_threshold = self._fraction("novelty_threshold", novelty_threshold, 0.0, 1.0)
        self.cut_factor = self._fraction("cut_factor", cut_factor, 0.0, 1.0, open_top=True)
        if isinstance(max_penalty, bool) or not isinstance(max_penalty, (int, float)) or not (
            math.isfinite(max_penalty) and max_penalty >= 1.0
        ):
            raise ConfigError(f"max_penalty must be a number >= 1.0 (got {max_penalty!r})")
        self.max_penalty = float(max_penalty)
        self._mask = (1 << window) - 1
        self._step = 2.0 ** (1.0 / window)
        self._hosts: dict[str, _HostState] = {}
        # Hosts whose admissions, cuts or limits changed since take_changed (the module
        # docstring); None: the host left this shard (its decision is forgotten).
        self._changed: set[str] = set()
        # Operator limits (PUT /hosts/{host}/policy {max_pages}): per key, per hostname.
        self._limits: dict[str, int] = {}
        self._name_limits: dict[str, int] = {}
        self._admitted = 0
        self._rejected = 0
        self._fetched = 0
        self._duplicates = 0
        self._cuts = 0

    @staticmethod
    def _fraction(
        name: str, value: object, low: float, high: float, open_top: bool = False
    ) -> float:
        """Validate a float setting in [low, high] (or [low, high) with ``open_top``)."""
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
            if low <= number < high or (not open_top and number == high):
                return number
        bound = f"< {high}" if open_top else f"<= {high}"
        raise ConfigError(f"{name} must be a number >= {low} and {bound} (got {value!r})")

    def _state(self, host: str) -> _HostState:
        state = self._hosts.get(host)
        if state is None:
            state = self._hosts[host] = _HostState(self.limit(host))
        return state

    def limit(self, host: str) -> int | None:
        """Pages key ``host`` may be admitted in all: the operator's limit for the key,
        else for its hostname, else ``max_pages_per_host``."""
        if self._limits or self._name_limits:
            if host in self._limits:
                return self._limits[host]
            name_limit = self._name_limits.get(name_of(host))
            if name_limit is not None:
                return name_limit
        return self.max_pages_per_host

    def set_limit(self, host: str, max_pages: int, queued: int = 0) -> int:
        """Operator limit for key ``host``: ``max_pages`` admitted in all. The host has
        ``queued`` URLs waiting; returns how many of them to drop (the newest), so what
        stays queued plus what may still be admitted fits the limit."""
        max_pages = check_limit("max_pages", max_pages, 0)  # type: ignore[assignment]
        self._limits[host] = max_pages
        return self._apply_limit(host, max_pages, queued)

    def set_name_limit(self, name: str, max_pages: int, queued_of: Any) -> dict[str, int]:
        """Operator limit for every key of hostname ``name`` (any port, keys seen later
        too); it replaces earlier per-key limits of the hostname. ``queued_of(key)`` is
        the key's queue length. Returns the URLs to drop per key (see :meth:`set_limit`)."""
        max_pages = check_limit("max_pages", max_pages, 0)  # type: ignore[assignment]
        self._name_limits[name] = max_pages
        drops = {}
        for key in [k for k in {**self._hosts, **self._limits} if name_of(k) == name]:
            self._limits.pop(key, None)
            drops[key] = self._apply_limit(key, max_pages, queued_of(key))
        return drops

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
        return dict(self._limits), dict(self._name_limits)

    # --- the hot path -------------------------------------------------------------

    def admit(self, host: str) -> bool:
        """Spend one page of ``host``'s budget; False if it is spent (drop the URL)."""
        state = self._state(host)
        self._changed.add(host)
        remaining = state.remaining
        if remaining is not None:
            if remaining <= 0:
                state.rejected += 1
                self._rejected += 1
                return False
            state.remaining = remaining - 1
        state.admitted += 1
        self._admitted += 1
        return True

    def record_fetch(self, host: str, duplicate: bool, queued: int = 0) -> int:
        """Record one fetched, fingerprinted page of ``host``, which has ``queued`` URLs
        waiting in the frontier. Returns how many of those to drop (a cut trims the queue)."""
        state = self._state(host)
        duplicate = bool(duplicate)
        window = self.novelty_window
        state.fetched += 1
        self._fetched += 1
        if duplicate:
            state.duplicates += 1
            self._duplicates += 1
        state.window = ((state.window << 1) | duplicate) & self._mask
        if state.samples < window:
            state.samples += 1
        if state.samples >= self.novelty_min_samples:
            if self._novelty(state) < self.novelty_threshold:
                state.penalty = min(self.max_penalty, state.penalty * self._step)
            elif state.penalty > 1.0:
                state.penalty = max(1.0, state.penalty / self._step)
        state.since_cut_check += 1
        if state.since_cut_check >= window:
            state.since_cut_check = 0
            if self._novelty(state) < self.novelty_threshold:
                self._changed.add(host)
                return self._cut(state, queued)
        return 0

    def _cut(self, state: _HostState, queued: int) -> int:
        # What was still planned for the host (queued URLs plus what it may still be
        # admitted) shrinks by cut_factor; queued URLs beyond the new plan are dropped.
        planned = queued + (state.admitted if state.remaining is None else state.remaining)
        left = int(planned * self.cut_factor)
        drop = max(0, queued - left)
        state.remaining = left - (queued - drop)
        state.cuts += 1
        self._cuts += 1
        return drop

    @staticmethod
    def _novelty(state: _HostState) -> float:
        return 1.0 - state.window.bit_count() / state.samples

    # --- queries ------------------------------------------------------------------

    def novelty(self, host: str) -> float:
        """Share of non-duplicates in the host's last window (1.0 with few samples)."""
        state = self._hosts.get(host)
        if state is None or state.samples < self.novelty_min_samples:
            return 1.0
        return self._novelty(state)

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
        return {
            "hosts": len(self._hosts),
            "admitted": self._admitted,
            "rejected": self._rejected,
            "fetched": self._fetched,
            "duplicates": self._duplicates,
            "cuts": self._cuts,
            "exhausted_hosts": exhausted,
            "penalized_hosts": penalized,
        }

    # --- a host changing shards (crawler.placement.handover) --------------------------------

    def export_host(self, host: str) -> dict[str, Any]:
        """One key's accounting and operator limit, to hand over with the host."""
        state = self._hosts.get(host)
        return {
            "state": None if state is None else [getattr(state, f) for f in _HostState.FIELDS],
            "limit": self._limits.get(host),
        }

    def adopt_host(self, host: str, data: dict[str, Any]) -> None:
        """Take over one key's accounting from :meth:`export_host` (it replaces ours)."""
        if data.get("limit") is not None:
            self._limits[host] = int(data["limit"])
        values = data.get("state")
        if values is None:
            return
        old = self._hosts.get(host)
        if old is not None:  # counted twice otherwise
            self._drop_totals(old)
        state = _HostState(self.limit(host))
        for name, value in zip(_HostState.FIELDS, values, strict=True):
            setattr(state, name, value)
        self._hosts[host] = state
        self._changed.add(host)  # this shard's store keeps it from now on
        self._admitted += state.admitted
        self._rejected += state.rejected
        self._fetched += state.fetched
        self._duplicates += state.duplicates
        self._cuts += state.cuts

    def forget_host(self, host: str) -> None:
        """Drop one key's accounting (it now lives on another shard)."""
        state = self._hosts.pop(host, None)
        if state is not None:
            self._drop_totals(state)
        self._limits.pop(host, None)
        self._changed.discard(host)  # its store rows and decisions went too

    def _drop_totals(self, state: _HostState) -> None:
        self._admitted -= state.admitted
        self._rejected -= state.rejected
        self._fetched -= state.fetched
        self._duplicates -= state.duplicates
        self._cuts -= state.cuts

    # --- persistence --------------------------------------------------------------

    def take_changed(self) -> dict[str, list[Any]]:
        """The spending (``admitted, rejected, remaining, cuts``) of every host changed
        since the last call (see the module docstring), as the values of store decisions;
        the hosts are unmarked."""
        if not self._changed:
            return {}
        changed, self._changed = self._changed, set()
        hosts = self._hosts
        out = {}
        for host in changed:
            state = hosts.get(host)
            if state is not None:
                out[host] = [state.admitted, state.rejected, state.remaining, state.cuts]
        return out

    def merge(self, spending: Mapping[str, Any]) -> int:
        """Bring back hosts' spending from the store's decisions (:meth:`take_changed`'s
        values, the newest per host) over what :meth:`restore` loaded from the checkpoint.
        A host's decision is written with every change to its spending and before every
        checkpoint, so it is never older than the checkpoint's copy: a budget spent or cut
        since the last checkpoint is not refunded. Novelty stays as the checkpoint has it.
        A malformed value costs that host's copy (logged). Returns the hosts merged."""
        merged = 0
        bad: list[str] = []
        for host, values in spending.items():
            try:
                admitted, rejected, remaining, cuts = values
                numbers = (int(admitted), int(rejected), None if remaining is None else int(remaining), int(cuts))
            except (TypeError, ValueError):
                bad.append(host)
                continue
            state = self._state(host)
            state.admitted, state.rejected, state.remaining, state.cuts = numbers
            merged += 1
        if bad:
            log.warning("host budget: ignoring %d malformed stored budgets (e.g. %r)", len(bad), bad[0])
        self._recount()
        return merged

    def snapshot(self) -> dict[str, Any]:
        """JSON-serialisable state, for the crash-safe frontier."""
        return {
            "version": self.SNAPSHOT_VERSION,
            "fields": list(_HostState.FIELDS),
            "hosts": {host: list(_fields(state)) for host, state in self._hosts.items()},
            "limits": dict(self._limits),
            "name_limits": dict(self._name_limits),
        }

    def restore(self, snapshot: dict[str, Any]) -> None:
        """Replace all state with a :meth:`snapshot`; raises StorageError if malformed.

        A snapshot taken with a different ``novelty_window`` is accepted: the window
        bits are truncated to the current size.
        """
        try:
            if snapshot["version"] != self.SNAPSHOT_VERSION:
                raise StorageError(
                    f"host budget snapshot version {snapshot['version']!r} is not "
                    f"{self.SNAPSHOT_VERSION}"
                )
            fields = tuple(snapshot["fields"])
            limits = {str(k): int(v) for k, v in dict(snapshot.get("limits", {})).items()}
            name_limits = {str(k): int(v) for k, v in dict(snapshot.get("name_limits", {})).items()}
            hosts = {str(host): self._decode(fields, values) for host, values in snapshot["hosts"].items()}
        except StorageError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise StorageError(f"host budget snapshot is malformed: {exc!r}") from exc
        self._hosts = hosts
        self._limits, self._name_limits = limits, name_limits
        self._recount()

    def _decode(self, fields: tuple[str, ...], values: Any) -> _HostState:
        """One host's accounting from ``values`` in ``fields`` order, clamped to this
        budget's settings; KeyError/TypeError/ValueError if malformed."""
        record = dict(zip(fields, values, strict=True))
        state = _HostState(self.max_pages_per_host)
        for name in _HostState.FIELDS:
            setattr(state, name, record[name])
        state.window &= self._mask
        state.samples = min(int(state.samples), self.novelty_window)
        state.since_cut_check = min(int(state.since_cut_check), self.novelty_window - 1)
        state.penalty = min(max(float(state.penalty), 1.0), self.max_penalty)
        return state

    def _recount(self) -> None:
        hosts = self._hosts.values()
        self._admitted = sum(s.admitted for s in hosts)
        self._rejected = sum(s.rejected for s in hosts)
        self._fetched = sum(s.fetched for s in hosts)
        self._duplicates = sum(s.duplicates for s in hosts)
        self._cuts = sum(s.cuts for s in hosts)
