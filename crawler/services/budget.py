"""The crawl-wide page budget (``limits.max_pages``): :class:`BudgetPool`, the one
counter of pages granted, and :class:`LeasedBudget`, a shard's client of it, which leases
pages in blocks so that a page costs no call.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Awaitable, Callable

from crawler.errors import DamagedStateError, ForeignStateError
from crawler.output.fs import write_local_atomic
from crawler.recovery import stamps

log = logging.getLogger(__name__)


class BudgetPool:
    """The global ``limits.max_pages`` count, handed out in leases.

    With ``path`` the pages granted so far are saved before a lease returns, so a
    restarted pool does not hand out again what it already gave (``max_pages`` holds
    across a restart of the pool; pages leased to a shard that then crashed are spent).

    The file is stamped with ``identity`` (crawler.recovery.stamps). A file that is missing,
    cannot be read as a count, or is another crawl's is rebuilt from ``spent()``: the
    pages the rows in OUT show fetched (crawler.recovery.statefiles.pages_spent), which is
    what the budget counts. Rebuilt, not refused: the rows are the truth of what was
    spent, nothing is lost (leases a crashed shard held unused become available again),
    and a refusal would only ask the operator to do by hand what this does. Without
    ``spent`` such a file is refused with one line (:class:`DamagedStateError`).
    """

    def __init__(self, max_pages: int | None, path: str | None = None, *, identity: str | None = None,
                 spent: Callable[[], int] | None = None) -> None:
        self.max_pages = max_pages
        self.path = path
        self.identity = identity
        self.granted = 0
        self.rebuilt = ""  # why the count was rebuilt from the rows ("": it was not)
        if path and max_pages is not None:  # an unlimited crawl never reads nor writes it
            self._open(path, spent)

    def _open(self, path: str, spent: Callable[[], int] | None) -> None:
        problem = ""
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            granted = data["granted"] if isinstance(data, dict) else None
            if isinstance(granted, bool) or not isinstance(granted, int) or granted < 0:
                raise ValueError(f"'granted' is {granted!r}, not a count of pages")
            stamps.check(path, data.get(stamps.STAMP_KEY), self.identity)
            self.granted = granted
            if self.identity is not None and data.get(stamps.STAMP_KEY) is None:
                self._save()  # a file made before stamps: stamped now
            return
        except FileNotFoundError:
            problem = "missing"
        except (ValueError, KeyError, TypeError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            problem = f"damaged ({exc})"
        except ForeignStateError as exc:
            problem = str(exc)
        if spent is None:
            if problem == "missing":
                return
            raise DamagedStateError(f"{path}: the page budget is {problem}: delete it to start the count over")
        self.granted = spent()
        if problem != "missing":
            self.rebuilt = problem
            log.warning("%s: the page budget was %s; rebuilt from the rows in the output: %d pages spent",
                        path, problem, self.granted)
        self._save()

    def _save(self) -> None:
        assert self.path is not None
        data: dict[str, Any] = {"granted": self.granted}
        if self.identity is not None:
            data[stamps.STAMP_KEY] = self.identity
        write_local_atomic(self.path, json.dumps(data).encode())

    def lease(self, n: int) -> int:
        """Take up to ``n`` pages; 0 once the budget is spent."""
        if self.max_pages is None:
            return n
        give = max(0, min(n, self.max_pages - self.granted))
        if give:
            self.granted += give
            if self.path:
                self._save()
        return give

    def remaining(self) -> int | None:
        return None if self.max_pages is None else self.max_pages - self.granted


def lease_size(max_pages: int, shards: int, cap: int) -> int:
    """Pages a shard asks for at a time: at most ``cap``, and small enough (1/8 of an even
    share) that no shard sits on pages another shard could use as the budget runs out."""
    return max(1, min(cap, max_pages // (8 * max(1, shards))))


class LeasedBudget:
    """A shard's view of the page budget: spends local leases, refills them on demand.

    Args:
        lease: ``await lease(n)`` -> pages granted by the pool (0 when spent).
        max_pages: ``limits.max_pages`` (None: unlimited, no calls at all).
        shards: how many shards share the pool.
        cap: ``runtime.budget_lease_max``.
    """

    def __init__(self, lease: Callable[[int], Awaitable[int]], max_pages: int | None, shards: int, cap: int) -> None:
        self._lease = lease
        self.max_pages = max_pages
        self._size = lease_size(max_pages, shards, cap) if max_pages is not None else 0
        self.local = 0
        self.spent = False
        self._lock = asyncio.Lock()

    async def acquire(self) -> bool:
        """Take one page; False once the budget is spent."""
        if self.max_pages is None:
            return True
        if self.local == 0 and not self.spent:
            async with self._lock:
                if self.local == 0 and not self.spent:
                    got = await self._lease(self._size)
                    self.local += got
                    self.spent = got == 0
        if self.local > 0:
            self.local -= 1
            return True
        return False
