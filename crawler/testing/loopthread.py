"""A server that runs its own asyncio loop in a background thread (test webs).

The crawl under test runs in the test's loop, or in other processes (Ray actors), while
the test reads the server's request log: so each test server serves from a thread of its
own. Subclasses implement :meth:`LoopThreadServer._serve`, which binds, calls
``self._ready.set()`` once it accepts connections, and returns when ``self._stop_event``
is set.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Self

log = logging.getLogger(__name__)


class LoopThreadServer:
    """Start/stop/context-manager plumbing shared by the synthetic and hostile webs."""

    thread_name = "test-server"

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    async def _serve(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def start(self) -> Self:
        """Bind and serve in a background thread; returns once connections are accepted."""
        if self._thread is not None:
            return self
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout=30):
            raise RuntimeError(f"{self.thread_name} did not start within 30 s")
        if self._error is not None:
            self._thread = None
            raise RuntimeError(f"{self.thread_name} failed to start: {self._error}") from self._error
        return self

    def stop(self) -> None:
        """Stop serving, cancel pending handlers and join the thread."""
        thread, loop, ev = self._thread, self._loop, self._stop_event
        if thread is None or loop is None or ev is None:
            return
        try:
            loop.call_soon_threadsafe(ev.set)
        except RuntimeError:  # loop already closed
            pass
        thread.join(timeout=10)
        self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:  # reported to start(), or logged once serving
            if not self._ready.is_set():
                self._error = exc
                self._ready.set()
            else:
                log.exception("%s crashed", self.thread_name)
        finally:
            loop.close()
