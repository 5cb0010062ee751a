"""Progress display: a live line on a terminal, plain periodic log lines otherwise."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from crawler.session.crawlstats import CrawlTotals


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1024 or unit == "TB":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    return f"{n:.1f}TB"  # pragma: no cover


def summary_line(total: CrawlTotals, elapsed: float, rate: float) -> str:
    """One line: fetched, pages/s, queued, in flight, hosts, errors, duplicates, bytes."""
    c = total.counters
    errors = c.http_error + c.failed
    dups = c.families["dup_exact"] + c.families["dup_near"]
    paused = (
        f" | paused {total.paused_urls} URLs on {total.paused_hosts} hosts (waiting for unpause or stop)"
        if total.paused_urls
        else ""
    )
    if c.refresh_fetches or total.refresh_waiting:
        paused += (
            f" | refresh {c.refresh_fetches} (304 {c.not_modified}, changed {c.changes_found}),"
            f" due {total.refresh_due}"
        )
    ev = total.events
    if ev.get("sink_down"):  # a lasting outage is surfaced, not only counted
        paused += f" | event sink DOWN for {ev.get('sink_down_s', 0):.0f}s, {ev.get('pending', 0)} events kept"
    return (
        f"[{elapsed:6.1f}s] fetched {c.fetched} ({rate:.1f} pages/s) | queued {total.queued} | "
        f"in flight {total.in_flight} | hosts {total.hosts} | errors {errors} | "
        f"blocked {c.robots_blocked} | dups {dups} | {_fmt_bytes(c.bytes)}{paused}"
    )


class Progress:
    """Call :meth:`update` with merged status; it redraws at most every ``interval_s``."""

    def __init__(self, enabled: bool = True, interval_s: float = 1.0, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = enabled and self.stream.isatty()
        self.interval_s = interval_s if self.tty else max(interval_s, 5.0)
        self.started = time.monotonic()
        self._last_draw = 0.0
        self._last_fetched = 0
        self._last_t = self.started
        self._rate = 0.0
        self._live = None
        if self.tty:
            try:
                from rich.console import Console
                from rich.live import Live

                self._live = Live("", console=Console(file=self.stream), refresh_per_second=4, transient=False)
                self._live.start()
            except ImportError:  # pragma: no cover - rich is a dependency
                self._live = None

    def update(self, total: CrawlTotals, force: bool = False) -> None:
        now = time.monotonic()
        if not self.enabled or (not force and now - self._last_draw < self.interval_s):
            return
        fetched = total.counters.fetched
        dt = now - self._last_t
        if dt > 0:
            self._rate = (fetched - self._last_fetched) / dt
        self._last_fetched, self._last_t, self._last_draw = fetched, now, now
        line = summary_line(total, now - self.started, self._rate)
        if self._live is not None:
            self._live.update(line)
        else:
            print(line, file=self.stream, flush=True)

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
