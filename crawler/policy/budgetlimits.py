"""Operator page limits (``PUT /hosts/{host}/policy {max_pages}``) per politeness key and
per hostname, over the configured ``max_pages_per_host`` (crawler.policy.hostbudget).

Invariant kept: a key's own limit wins over its hostname's, and a hostname-wide limit
replaces the per-key limits its keys had; with no operator limit at all the lookup
costs one test (the common case on the admission path).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, cast

from crawler.policy.hostpolicy import name_of
from crawler.policy.traprules import check_limit

__all__ = ["BudgetLimits"]


class BudgetLimits:
    """The page limit of every key: the operator's for the key, else for its hostname,
    else ``default`` (``max_pages_per_host``; None: no limit)."""

    __slots__ = ("default", "by_key", "by_name")

    def __init__(self, default: int | None) -> None:
        self.default = default
        self.by_key: dict[str, int] = {}
        self.by_name: dict[str, int] = {}

    def limit(self, host: str) -> int | None:
        """Pages key ``host`` may be admitted in all."""
        if self.by_key or self.by_name:
            if host in self.by_key:
                return self.by_key[host]
            name_limit = self.by_name.get(name_of(host))
            if name_limit is not None:
                return name_limit
        return self.default

    def set_key(self, host: str, max_pages: int) -> int:
        """Set key ``host``'s limit; returns it, validated."""
        max_pages = _checked(max_pages)
        self.by_key[host] = max_pages
        return max_pages

    def set_name(self, name: str, max_pages: int, keys: Iterable[str]) -> tuple[int, list[str]]:
        """Set hostname ``name``'s limit, dropping the per-key limits of its keys. Returns
        the limit, validated, and the keys of ``name`` among ``keys`` and those that had a
        limit of their own (in that order), whose budgets the caller fits to it."""
        max_pages = _checked(max_pages)
        self.by_name[name] = max_pages
        mine = [k for k in {**dict.fromkeys(keys), **self.by_key} if name_of(k) == name]
        for key in mine:
            self.by_key.pop(key, None)
        return max_pages, mine

    def snapshot(self) -> dict[str, dict[str, int]]:
        """The limits as a snapshot's ``limits`` and ``name_limits``."""
        return {"limits": dict(self.by_key), "name_limits": dict(self.by_name)}

    @staticmethod
    def decode(snapshot: Mapping[str, Any]) -> tuple[dict[str, int], dict[str, int]]:
        """A :meth:`snapshot`'s (per key, per hostname) limits; TypeError/ValueError/
        AttributeError if malformed. Nothing changes until :meth:`replace`."""
        by_key = {str(k): int(v) for k, v in dict(snapshot.get("limits", {})).items()}
        by_name = {str(k): int(v) for k, v in dict(snapshot.get("name_limits", {})).items()}
        return by_key, by_name

    def replace(self, by_key: dict[str, int], by_name: dict[str, int]) -> None:
        """Take the limits :meth:`decode` read."""
        self.by_key, self.by_name = by_key, by_name


def _checked(max_pages: int) -> int:
    # check_limit gives None only for None, which the type excludes (a caller passing it
    # anyway stores "no limit", as it always did).
    return cast(int, check_limit("max_pages", max_pages, 0))
