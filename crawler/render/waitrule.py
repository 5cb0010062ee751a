"""When a rendered page is ready: DOMContentLoaded, then quiet, with a maximum.

``networkidle`` waits can last forever on a page that polls or streams; a fixed sleep
either wastes time or cuts an app's first fetch short. The rule here:

1. nothing before ``DOMContentLoaded`` (the document's own scripts have run);
2. then the page is ready once no request it made is open *and* the DOM has not
   changed for ``quiet_s`` (an app that fetches its routes and then draws them is
   caught by both: the fetch keeps the network busy, the drawing keeps the DOM busy);
3. whatever happens, ready ``max_wait_s`` after DOMContentLoaded (a ticking clock or a
   polling app is cut there, and the DOM as it stands is taken: not a failure).

Pure logic over the times it is told (an injected clock's ``now()``), so it is tested
without a browser (tests/unit/test_render_decide.py).
"""

from __future__ import annotations

__all__ = ["WaitRule"]


class WaitRule:
    """The state of one page's wait. Feed it events; ask :meth:`ready`."""

    def __init__(self, quiet_s: float, max_wait_s: float) -> None:
        self.quiet_s = quiet_s
        self.max_wait_s = max_wait_s
        self.loaded_at: float | None = None
        self.last_activity = 0.0
        self.open_requests = 0
        self.why = ""

    def dom_content_loaded(self, now: float) -> None:
        """The document's DOMContentLoaded fired (counted as activity)."""
        if self.loaded_at is None:
            self.loaded_at = now
        self.last_activity = max(self.last_activity, now)

    def request_started(self, now: float) -> None:
        """The page asked for a resource (it is open until :meth:`request_ended`)."""
        self.open_requests += 1
        self.last_activity = max(self.last_activity, now)

    def request_ended(self, now: float) -> None:
        """A resource request was answered (fulfilled or refused)."""
        self.open_requests = max(0, self.open_requests - 1)
        self.last_activity = max(self.last_activity, now)

    def dom_changed(self, now: float) -> None:
        """The DOM changed since the last look (a MutationObserver counted mutations)."""
        self.last_activity = max(self.last_activity, now)

    def ready(self, now: float) -> bool:
        """True once the page is settled (``why``: ``quiet``) or waited on long enough
        (``why``: ``max_wait``); False before DOMContentLoaded."""
        if self.loaded_at is None:
            return False
        if now - self.loaded_at >= self.max_wait_s:
            self.why = "max_wait"
            return True
        if self.open_requests == 0 and now - self.last_activity >= self.quiet_s:
            self.why = "quiet"
            return True
        return False

    def next_check(self, now: float, poll_s: float) -> float:
        """Seconds until the answer of :meth:`ready` can change without a new event
        (at most ``poll_s``: the DOM is looked at that often)."""
        if self.loaded_at is None:
            return poll_s
        left = [self.loaded_at + self.max_wait_s - now, poll_s]
        if self.open_requests == 0:
            left.append(self.last_activity + self.quiet_s - now)
        return max(0.0, min(left))
