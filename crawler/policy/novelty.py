"""How duplicate content costs a host (crawler.policy.hostbudget.HostBudget's novelty
half): the share of new pages among its last fetches, the demotion penalty it earns
while that share is low, and the budget cut at the end of each low-novelty window.

Invariant kept: a cut only ever lowers what a host may still be admitted (planned work
times ``cut_factor``, rounded down), so a host of duplicates runs out after a logarithmic
number of windows (the bound is proved in :class:`~crawler.policy.hostbudget.HostBudget`).
"""

from __future__ import annotations

import math

from crawler.errors import ConfigError
from crawler.policy.hostaccount import HostAccount
from crawler.policy.traprules import check_limit

__all__ = ["NoveltyRule"]


class NoveltyRule:
    """Novelty, penalty and cut of one host's account (see HostBudget's docstring).

    Args (validated in this order, ``ConfigError`` naming the bad one):
        novelty_window: fetches per window (the cut is decided once per window).
        novelty_min_samples: fetches known before novelty and the penalty apply.
        novelty_threshold: novelty below it is low (0 disables cuts and penalties).
        cut_factor: planned work is multiplied by it on each cut, in [0, 1).
        max_penalty: cap on the penalty (>= 1.0).
    """

    __slots__ = (
        "novelty_window", "novelty_min_samples", "novelty_threshold", "cut_factor",
        "max_penalty", "_mask", "_step",
    )

    def __init__(
        self,
        novelty_window: int,
        novelty_min_samples: int,
        novelty_threshold: float,
        cut_factor: float,
        max_penalty: float,
    ) -> None:
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
        self.novelty_threshold = _fraction("novelty_threshold", novelty_threshold, 0.0, 1.0)
        self.cut_factor = _fraction("cut_factor", cut_factor, 0.0, 1.0, open_top=True)
        if isinstance(max_penalty, bool) or not isinstance(max_penalty, (int, float)) or not (
            math.isfinite(max_penalty) and max_penalty >= 1.0
        ):
            raise ConfigError(f"max_penalty must be a number >= 1.0 (got {max_penalty!r})")
        self.max_penalty = float(max_penalty)
        self._mask = (1 << window) - 1
        self._step = 2.0 ** (1.0 / window)

    def record(self, state: HostAccount, duplicate: bool) -> bool:
        """Add one fetch to the host's window and move its penalty; True when it ended a
        window of low novelty (the caller then :meth:`cut` s the host)."""
        window = self.novelty_window
        state.window = ((state.window << 1) | duplicate) & self._mask
        if state.samples < window:
            state.samples += 1
        if state.samples >= self.novelty_min_samples:
            if self.share(state) < self.novelty_threshold:
                state.penalty = min(self.max_penalty, state.penalty * self._step)
            elif state.penalty > 1.0:
                state.penalty = max(1.0, state.penalty / self._step)
        state.since_cut_check += 1
        if state.since_cut_check >= window:
            state.since_cut_check = 0
            return self.share(state) < self.novelty_threshold
        return False

    def cut(self, state: HostAccount, queued: int) -> int:
        """Cut the host's plan; returns how many of its ``queued`` URLs to drop."""
        # What was still planned for the host (queued URLs plus what it may still be
        # admitted) shrinks by cut_factor; queued URLs beyond the new plan are dropped.
        planned = queued + (state.admitted if state.remaining is None else state.remaining)
        left = int(planned * self.cut_factor)
        drop = max(0, queued - left)
        state.remaining = left - (queued - drop)
        state.cuts += 1
        return drop

    def novelty(self, state: HostAccount | None) -> float:
        """Share of non-duplicates in the host's last window (1.0 with few samples)."""
        if state is None or state.samples < self.novelty_min_samples:
            return 1.0
        return self.share(state)

    @staticmethod
    def share(state: HostAccount) -> float:
        """Share of non-duplicates among the samples of the window, however few."""
        return 1.0 - state.window.bit_count() / state.samples

    def clamp(self, state: HostAccount) -> None:
        """Fit an account from a snapshot to these settings (the window may have been
        another size); TypeError/ValueError if its values are not numbers."""
        state.window &= self._mask
        state.samples = min(int(state.samples), self.novelty_window)
        state.since_cut_check = min(int(state.since_cut_check), self.novelty_window - 1)
        state.penalty = min(max(float(state.penalty), 1.0), self.max_penalty)


def _fraction(name: str, value: object, low: float, high: float, open_top: bool = False) -> float:
    """Validate a float setting in [low, high] (or [low, high) with ``open_top``)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
        if low <= number < high or (not open_top and number == high):
            return number
    bound = f"< {high}" if open_top else f"<= {high}"
    raise ConfigError(f"{name} must be a number >= {low} and {bound} (got {value!r})")
