"""Headless Chromium processes and the pool that renders on them.

:func:`find_browser` looks for Debian's ``chromium`` (or ``chromium-headless-shell``,
``google-chrome``) on PATH, or takes ``render.browser``; nothing is ever downloaded.

:class:`BrowserProcess` starts one browser in its own process group with a fresh
profile directory and flags that keep it from talking to anyone but us: no background
networking, component updates, sync or QUIC, and ``--host-resolver-rules`` mapping every
name to nothing, so a request that escaped interception fails instead of reaching a
host behind the crawler's back (docs/invariants.md #12). Its memory is the resident set
of its whole process group (the browser, its renderers, GPU and utility processes).

:class:`BrowserPool` owns ``processes`` browsers with ``tabs`` renders at a time on each.
A browser is recycled (no new renders; killed once its last render ends; a new one is
started on demand) after ``recycle_renders`` renders, ``recycle_s`` seconds or
``recycle_rss_mb`` of memory, and at once when it crashed: a crash fails only the renders
on that browser (reason ``crash``), whose pages fall back to their raw response.

Each render's budget (crawler.render.budget) is held partly here: V8's heap is capped
per renderer process (``--js-flags=--max-old-space-size``), and every ``GUARD_S`` the
browser's renderer processes are looked at and one past
:attr:`~crawler.render.budget.Budget.renderer_rss_mb` resident is killed (its tab alone
crashes: that render fails as ``cap``; the browser and its other tabs go on).
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import shutil
import signal
import tempfile
from dataclasses import dataclass
from typing import Any

from crawler.clock import SYSTEM_CLOCK, Clock
from crawler.errors import ConfigError, RenderError
from crawler.render.budget import DEFAULT_BUDGET, MB, Budget, over_memory
from crawler.render.cdp import CdpConnection
from crawler.render.jobs import RenderJob, RenderReply
from crawler.render.page import PageRenderer, SubFetch

__all__ = ["BrowserPool", "BrowserProcess", "PoolSettings", "find_browser", "INSTALL_HINT", "process_group_rss"]

log = logging.getLogger(__name__)

CANDIDATES = ("chromium", "chromium-headless-shell", "chromium-browser", "google-chrome", "google-chrome-stable")
INSTALL_HINT = "install one with `apt-get install chromium` (or set render.browser to its path)"

FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-extensions", "--disable-default-apps", "--disable-dev-shm-usage", "--mute-audio",
    "--disable-features=Translate,MediaRouter,OptimizationHints,AutofillServerCommunication",
    "--no-default-browser-check", "--metrics-recording-only", "--password-store=basic",
    # Every name resolves to nothing: the browser cannot reach a host by itself.
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1",
)


def find_browser(configured: str | None) -> str:
    """The browser executable to use; ConfigError (one line, how to install) if none."""
    if configured:
        path = configured if os.path.sep in configured else shutil.which(configured)
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
        raise ConfigError(f"render.browser: {configured!r} is not an executable browser; {INSTALL_HINT}")
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    raise ConfigError(f"render.mode needs a headless Chromium and none is on PATH; {INSTALL_HINT}")


def _die_with_parent() -> None:
    """In the browser's process before exec: be killed when the thread that started it
    ends (Linux ``PR_SET_PDEATHSIG``), so a crashed worker leaves no browser behind."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except OSError:
        pass  # not Linux: the pool's close() still kills it


def _group_pids(pgid: int) -> list[tuple[int, bytes]]:
    """(pid, /proc/pid/stat) of the processes in group ``pgid``."""
    out = []
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
            # Fields after the command name (which may hold spaces): state ppid pgrp ...
            if int(stat[stat.rindex(b")") + 2:].split()[2]) == pgid:
                out.append((int(pid), stat))
        except (OSError, ValueError, IndexError):
            continue  # the process ended while we looked
    return out


def renderer_rss(pgid: int) -> dict[int, int]:
    """Resident bytes of each renderer process of the browser whose group is ``pgid``."""
    page = os.sysconf("SC_PAGE_SIZE")
    out: dict[int, int] = {}
    for pid, stat in _group_pids(pgid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"--type=renderer" not in f.read():
                    continue
            # Field 24 of stat (22 after the command name's end): resident pages.
            out[pid] = int(stat[stat.rindex(b")") + 2:].split()[21]) * page
        except (OSError, ValueError, IndexError):
            continue
    return out


def process_group_rss(pgid: int) -> int:
    """Memory of every process in group ``pgid``, in bytes (0 if none or no /proc): the
    proportional set size (PSS), so pages the browser's processes share are counted once
    overall rather than once per process as plain RSS would."""
    total = 0
    for pid, _stat in _group_pids(pgid):
        try:
            with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
                for line in f:
                    if line.startswith(b"Pss:"):
                        total += int(line.split()[1]) * 1024
                        break
        except (OSError, ValueError, IndexError):
            continue  # the process ended while we looked
    return total


class BrowserProcess:
    """One running browser: its process, DevTools connection and page renderer."""

    #: Seconds between two looks at the renderers' memory (a /proc scan: a few ms).
    GUARD_S = 0.25

    def __init__(self, executable: str, clock: Clock, *, quiet_s: float, max_wait_s: float, user_agent: str,
                 budget: Budget = DEFAULT_BUDGET) -> None:
        self.executable = executable
        self.clock = clock
        self.budget = budget
        self.killed_renderers = 0
        self._guard: asyncio.Task[None] | None = None
        self._quiet_s, self._max_wait_s, self._user_agent = quiet_s, max_wait_s, user_agent
        self.proc: asyncio.subprocess.Process | None = None
        self.profile_dir: str | None = None
        self.conn: CdpConnection | None = None
        self.renderer: PageRenderer | None = None
        self.started_at = 0.0
        self.renders = 0
        self.active = 0
        self.retiring = False

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    async def start(self, timeout_s: float = 20.0) -> None:
        """Launch and connect; RenderError ``launch`` if it does not come up in time."""
        self.profile_dir = tempfile.mkdtemp(prefix="raycrawl-chromium-")
        args = [self.executable, *FLAGS, f"--js-flags=--max-old-space-size={self.budget.v8_heap_mb}",
                f"--user-data-dir={self.profile_dir}", "about:blank"]
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *args, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL, start_new_session=True, preexec_fn=_die_with_parent,
            )
        except OSError as exc:
            raise RenderError("launch", f"cannot start {self.executable}: {exc}") from exc
        port_file = os.path.join(self.profile_dir, "DevToolsActivePort")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:  # real time: waiting for another process, not crawler logic
            if self.proc.returncode is not None:
                raise RenderError("launch", f"{self.executable} exited with {self.proc.returncode} at start")
            try:
                with open(port_file, encoding="ascii") as f:
                    lines = f.read().split()
                if len(lines) >= 2:
                    break
            except OSError:
                pass
            if loop.time() > deadline:
                await self.kill()
                raise RenderError("launch", f"{self.executable} did not open its DevTools port in {timeout_s}s")
            await asyncio.sleep(0.05)
        self.conn = CdpConnection()
        await self.conn.open(f"ws://127.0.0.1:{lines[0]}{lines[1]}")
        self.renderer = PageRenderer(self.conn, self.clock, quiet_s=self._quiet_s, max_wait_s=self._max_wait_s,
                                     user_agent=self._user_agent, budget=self.budget)
        self.started_at = self.clock.now()
        self._guard = asyncio.ensure_future(self._guard_memory())

    async def _guard_memory(self) -> None:
        """Kill a renderer process past its resident-memory budget (real time: the
        processes grow in real time, not in the crawler's clock)."""
        limit = self.budget.renderer_rss_mb * MB
        while self.proc is not None and self.proc.returncode is None:
            for pid in over_memory(renderer_rss(self.proc.pid), limit):
                log.info("renderer %d of browser %d past %d MB resident: killed", pid, self.proc.pid,
                         self.budget.renderer_rss_mb)
                try:
                    os.kill(pid, signal.SIGKILL)
                    self.killed_renderers += 1
                except ProcessLookupError:
                    pass
            await asyncio.sleep(self.GUARD_S)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None and self.conn is not None and not self.conn.closed

    def rss(self) -> int:
        """Resident bytes of the browser's process group."""
        return process_group_rss(self.proc.pid) if self.proc is not None else 0

    async def kill(self) -> None:
        """End the browser and every process it started; remove its profile."""
        if self._guard is not None:
            self._guard.cancel()
            await asyncio.gather(self._guard, return_exceptions=True)
        if self.conn is not None:
            await self.conn.close()
        if self.proc is not None and self.proc.returncode is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            await self.proc.wait()
        if self.profile_dir is not None:
            shutil.rmtree(self.profile_dir, ignore_errors=True)


@dataclass(frozen=True)
class PoolSettings:
    """The pool's part of ``render`` (crawler.config.sections.RenderConfig)."""

    executable: str
    processes: int = 1
    tabs: int = 4
    quiet_s: float = 0.3
    max_wait_s: float = 5.0
    recycle_renders: int = 500
    recycle_s: float = 1800.0
    recycle_rss_mb: int = 1024
    user_agent: str = ""
    budget: Budget = DEFAULT_BUDGET


class BrowserPool:
    """Renders jobs on up to ``processes`` browsers, ``tabs`` at a time on each."""

    #: Memory is read every this many renders of a browser (a /proc scan, not free).
    RSS_EVERY = 10

    def __init__(self, settings: PoolSettings, clock: Clock = SYSTEM_CLOCK) -> None:
        self.s = settings
        self.clock = clock
        self.browsers: list[BrowserProcess] = []
        self._slots = asyncio.Semaphore(settings.processes * settings.tabs)
        self._launch_lock = asyncio.Lock()
        self.stats: dict[str, int] = {"launched": 0, "recycled": 0, "crashed": 0, "renders": 0}
        self.rss_samples: list[tuple[int, int]] = []  # (renders of that browser, bytes)
        self._closed = False

    async def render(self, job: RenderJob, subfetch: SubFetch) -> RenderReply:
        """Render ``job`` on a free tab (waiting for one); never raises but CancelledError."""
        async with self._slots:
            try:
                browser = await self._browser()
            except RenderError as exc:
                return RenderReply(None, exc.reason, 0.0, detail=str(exc))
            browser.active += 1
            try:
                assert browser.renderer is not None
                reply = await browser.renderer.render(job, subfetch)
            finally:
                browser.active -= 1
                browser.renders += 1
                self.stats["renders"] += 1
            if reply.reason == "crash" or not browser.alive:
                self.stats["crashed"] += browser.retiring is False
                browser.retiring = True
            else:
                self._maybe_retire(browser, reply)
            await self._reap()
            return reply

    async def _browser(self) -> BrowserProcess:
        async with self._launch_lock:
            if self._closed:
                raise RenderError("launch", "the browser pool is closed")
            live = [b for b in self.browsers if not b.retiring and b.alive and b.active < self.s.tabs]
            if live and (len(self._usable()) >= self.s.processes or any(b.active == 0 for b in live)):
                return min(live, key=lambda b: b.active)
            if len(self._usable()) < self.s.processes:
                b = BrowserProcess(self.s.executable, self.clock, quiet_s=self.s.quiet_s, max_wait_s=self.s.max_wait_s,
                                   user_agent=self.s.user_agent, budget=self.s.budget)
                await b.start()
                self.stats["launched"] += 1
                self.browsers.append(b)
                return b
            if live:
                return min(live, key=lambda b: b.active)
            raise RenderError("launch", "no browser with a free tab")  # the semaphore makes this unreachable

    def _usable(self) -> list[BrowserProcess]:
        return [b for b in self.browsers if not b.retiring and b.alive]

    def _maybe_retire(self, b: BrowserProcess, reply: RenderReply) -> None:
        if b.renders % self.RSS_EVERY == 0 or b.renders >= self.s.recycle_renders:
            rss = b.rss()
            reply.browser_rss = rss
            self.rss_samples.append((b.renders, rss))
            if rss > self.s.recycle_rss_mb * 1024 * 1024:
                b.retiring = True
        if b.renders >= self.s.recycle_renders or self.clock.now() - b.started_at >= self.s.recycle_s:
            b.retiring = True

    async def _reap(self) -> None:
        done = [b for b in self.browsers if (b.retiring or not b.alive) and b.active == 0]
        for b in done:
            self.browsers.remove(b)
            self.stats["recycled"] += 1
            await b.kill()

    def pids(self) -> list[int]:
        """Process ids of the running browsers (tests kill one to see a crash handled)."""
        return [b.pid for b in self.browsers if b.pid is not None and b.alive]

    def status(self) -> dict[str, Any]:
        return {**self.stats, "browsers": len(self.browsers), "active": sum(b.active for b in self.browsers),
                "renderers_killed": sum(b.killed_renderers for b in self.browsers)}

    async def close(self) -> None:
        """Kill every browser (renders in progress fail with ``crash``)."""
        async with self._launch_lock:
            self._closed = True
            browsers, self.browsers = self.browsers, []
        for b in browsers:
            await b.kill()
