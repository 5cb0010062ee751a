"""A hostile HTTP server on loopback: the broken and malicious web, on purpose.

:class:`HostileServer` is a raw asyncio TCP server (no HTTP library between the test and
the bytes on the wire) bound to ``127.0.0.1`` on an ephemeral port, serving in a
background thread with its own event loop so a crawl in the test's loop competes with it
exactly as with a remote server. Each request is dispatched to a *behaviour*, a named
coroutine that writes raw bytes:

* by the first label of the ``Host`` header (``slowloris.hostile.test`` -> ``slowloris``;
  a crawler reaches those names through ``fetch.resolve: {"*.hostile.test": "127.0.0.1"}``),
* else by a path prefix ``/b/<behaviour>/...`` (for IP-literal or ``localhost`` access),
* else :func:`secret` (a page no crawl may ever see: the SSRF tests look for it).

``/robots.txt`` answers 404 on every host except ``bigrobots`` (so a behaviour hits the
page it is meant for, not the robots fetch that precedes it); the log names those
requests ``robots404``.

The behaviours and their table are in :mod:`crawler.testing.behaviours`.

Everything is bounded: request heads are read with a 64 KiB limit, every connection is
cut after ``handler_cap_s``, endless streams stop after ``endless_cap_bytes``, and
:meth:`HostileServer.stop` cancels whatever is still running. Every request is logged as
a :class:`HostileRequest` (host, path, behaviour, start, end, bytes sent, how it ended)
when its handler ends; :meth:`HostileServer.wait_idle` waits for the last ones. Bytes
"sent" count what entered the kernel's socket buffer (several MB on loopback), not what
the client read.

:func:`loopback_only` (:mod:`crawler.testing.netguard`) is the companion safety net for
tests: while it is active, a connect to anything but loopback or a DNS lookup of a name
fails the test.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass

from crawler.testing.behaviours import (
    BEHAVIOURS,
    BIGROBOTS_LATE_OFFSET,
    BIGROBOTS_MIDDLE_OFFSET,
    TRAVERSAL_STRINGS,
    Behaviour,
    ClientGone,
    Conn,
    not_found,
)
from crawler.testing.loopthread import LoopThreadServer
from crawler.testing.netguard import loopback_only

__all__ = [
    "BEHAVIOURS",
    "BIGROBOTS_LATE_OFFSET",
    "BIGROBOTS_MIDDLE_OFFSET",
    "Conn",
    "HostileRequest",
    "HostileServer",
    "TRAVERSAL_STRINGS",
    "loopback_only",
]

log = logging.getLogger(__name__)

_HEAD_LIMIT = 65536


@dataclass(frozen=True, slots=True)
class HostileRequest:
    """One request as the hostile server saw it.

    ``host``: Host header without port, lower-cased ("" if absent). ``path``: the request
    target as sent. ``start``: ``time.monotonic()`` when the request head had been read;
    ``end``: when the handler finished. ``outcome``: "done", "client closed", "capped"
    (``handler_cap_s`` reached) or "stopped" (server shut down). ``sent``: bytes written.
    ``addr``: the local address the connection arrived on (which listener).
    """

    host: str
    path: str
    behaviour: str
    start: float
    end: float
    sent: int
    outcome: str
    addr: str


class HostileServer(LoopThreadServer):
    """The hostile web on ``127.0.0.1:<port>`` (plus optional extra loopback listeners).

    ``with HostileServer(max_body_bytes=200_000) as srv: ... srv.requests()``.
    ``extra_hosts`` are more local addresses to listen on with the same port (e.g.
    ``"::1"``, ``"127.0.0.2"``); those that cannot be bound are skipped and left out of
    :attr:`listening`. ``domain`` is the suffix whose first label names a behaviour.
    """

    thread_name = "hostile-web"

    def __init__(
        self,
        *,
        max_body_bytes: int = 200_000,
        domain: str = "hostile.test",
        extra_hosts: tuple[str, ...] = (),
        handler_cap_s: float = 20.0,
        endless_cap_bytes: int = 64 << 20,
        slowloris_interval_s: float = 1.0,
        oversize_factor: int = 25,
        redirect_chain: int = 50,
        robots_bytes: int = 10_000_000,
        bomb_bytes: int = 1 << 30,
        normal_pages: int = 10,
    ) -> None:
        super().__init__()
        self.max_body_bytes = max_body_bytes
        self.domain = domain.lower().strip(".")
        self.extra_hosts = tuple(extra_hosts)
        self.handler_cap_s = handler_cap_s
        self.endless_cap_bytes = endless_cap_bytes
        self.slowloris_interval_s = slowloris_interval_s
        self.oversize_factor = oversize_factor
        self.redirect_chain = redirect_chain
        self.robots_bytes = robots_bytes
        self.bomb_bytes = bomb_bytes
        self.normal_pages = normal_pages
        self.port = 0
        self.listening: list[str] = []
        self._log: list[HostileRequest] = []
        self._lock = threading.Lock()
        self._tasks: set[asyncio.Task[None]] = set()

    async def _serve(self) -> None:
        self._stop_event = asyncio.Event()
        servers = [await asyncio.start_server(self._handle, "127.0.0.1", 0, limit=_HEAD_LIMIT)]
        self.port = servers[0].sockets[0].getsockname()[1]
        self.listening = ["127.0.0.1"]
        for host in self.extra_hosts:
            try:
                servers.append(await asyncio.start_server(self._handle, host, self.port, limit=_HEAD_LIMIT))
            except OSError as exc:  # e.g. no IPv6 loopback here
                log.info("hostile server: cannot listen on %s:%d (%s)", host, self.port, exc)
            else:
                self.listening.append(host)
        self._ready.set()
        try:
            await self._stop_event.wait()
        finally:
            for s in servers:
                s.close()
            for t in list(self._tasks):
                t.cancel()
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- serving --------------------------------------------------------------------------

    def behaviour_for(self, host: str, path: str) -> tuple[str, str]:
        """(behaviour name, path seen by it) for a request: Host label, ``/b/<name>/``, else secret."""
        if host.endswith("." + self.domain):
            label = host[: -len(self.domain) - 1].rsplit(".", 1)[-1]
            if label in BEHAVIOURS:
                return label, path
        if path.startswith("/b/"):
            name, _, rest = path[3:].partition("/")
            if name in BEHAVIOURS:
                return name, "/" + rest
        return "secret", path

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        sock = writer.get_extra_info("sockname")
        addr = str(sock[0]) if sock else ""
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.handler_cap_s)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError,
                    ConnectionError, OSError, ValueError):
                return  # not an HTTP request head we are willing to read: just hang up
            start = time.monotonic()
            lines = head.decode("latin-1").split("\r\n")
            parts = lines[0].split(" ")
            method, path = (parts[0], parts[1]) if len(parts) >= 2 else ("", "")
            host = ""
            for line in lines[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "host":
                    host = _strip_port(value)
            name, sub = self.behaviour_for(host, path)
            if sub == "/robots.txt" and name != "bigrobots":
                behaviour: Behaviour = not_found
            else:
                behaviour = BEHAVIOURS[name]
            conn = Conn(self, reader, writer, method, sub, host)
            outcome = "done"
            try:
                await asyncio.wait_for(behaviour(conn), self.handler_cap_s)
            except ClientGone:
                outcome = "client closed"
            except asyncio.TimeoutError:
                outcome = "capped"
            except asyncio.CancelledError:
                outcome = "stopped"
            finally:
                rec = HostileRequest(host, path, name if behaviour is not not_found else "robots404",
                                     start, time.monotonic(), conn.sent, outcome, addr)
                with self._lock:
                    self._log.append(rec)
        except asyncio.CancelledError:
            pass  # stop() cancels what is still running; nothing to clean beyond close
        finally:
            if not writer.transport.is_closing():
                writer.close()
            self._tasks.discard(task)

    # -- views ----------------------------------------------------------------------------

    def active(self) -> int:
        """Connections being handled right now."""
        return len(self._tasks)

    def wait_idle(self, timeout_s: float = 5.0) -> bool:
        """Block until no connection is being handled (their log records are then final).

        Returns False if some are still running after ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        while self._tasks:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True

    def requests(self, behaviour: str | None = None) -> list[HostileRequest]:
        """A thread-safe snapshot of the log (optionally one behaviour's requests), by start."""
        with self._lock:
            recs = list(self._log)
        if behaviour is not None:
            recs = [r for r in recs if r.behaviour == behaviour]
        return sorted(recs, key=lambda r: r.start)

    def url(self, behaviour: str, path: str = "/") -> str:
        """``http://<behaviour>.<domain>:<port><path>``."""
        return f"http://{behaviour}.{self.domain}:{self.port}{path}"

    def loopback_targets(self, prefix: str = "") -> list[str]:
        """Loopback URLs on this server's port that an SSRF guard must refuse.

        All of them would reach this server (or another local service) if the guard let
        them through: IPv4 loopback in several spellings, ``localhost``, IPv6 loopback and
        its IPv4-mapped form, and ``0.0.0.0`` (which Linux routes to the local host).
        ``prefix`` starts every path (so links, redirects and seeds can differ).
        """
        p, x = self.port, prefix
        return [
            f"http://127.0.0.1:{p}{x}/",
            f"http://127.0.0.2:{p}{x}/",
            f"http://localhost:{p}{x}/",
            f"http://[::1]:{p}{x}/",
            f"http://[::ffff:127.0.0.1]:{p}{x}/mapped",
            f"http://2130706433:{p}{x}/decimal",
            f"http://127.1:{p}{x}/short",
            f"http://0.0.0.0:{p}{x}/zero",
        ]

    def resolve_setting(self) -> dict[str, str]:
        """The ``fetch.resolve`` entry that routes this server's names here."""
        return {f"*.{self.domain}": "127.0.0.1"}


def _strip_port(host: str) -> str:
    host = host.strip().lower()
    if host.startswith("["):  # [::1]:8080
        return host[: host.find("]") + 1]
    return host.partition(":")[0]
