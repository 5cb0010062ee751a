"""A small Chrome DevTools Protocol client on aiohttp's websocket client.

Why not Playwright: it would add a Node driver process and a second browser download
step (``playwright install``) that this project cannot run (nothing is downloaded at
install or run time), and the crawler needs only a dozen CDP methods: browser contexts,
targets, ``Fetch`` interception, ``Page``/``Runtime`` lifecycle and evaluation. One
websocket per browser carries every tab through flattened sessions (``sessionId`` on
each message, ``Target.attachToTarget {flatten: true}``).

:class:`CdpConnection` sends commands and matches replies by id; events go to the
listener registered for their session. A closed socket (the browser died) fails every
pending command with :class:`~crawler.errors.RenderError` ``crash``, so no caller waits
forever on a dead browser.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
from typing import Any, Callable

import aiohttp

from crawler.errors import RenderError

__all__ = ["CdpConnection", "Listener"]

log = logging.getLogger(__name__)

#: ``listener(method, params)`` for the events of one session.
Listener = Callable[[str, dict[str, Any]], None]

#: Largest message accepted: a rendered DOM comes back as one string.
MAX_MESSAGE_BYTES = 256 * 1024 * 1024


class CdpConnection:
    """One websocket to a browser's DevTools endpoint (``ws://127.0.0.1:port/devtools/browser/...``)."""

    def __init__(self) -> None:
        self._http: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._listeners: dict[str | None, Listener] = {}
        self._reader: asyncio.Task[None] | None = None
        self.closed = False

    async def open(self, ws_url: str, timeout_s: float = 10.0) -> None:
        """Connect; RenderError ``launch`` if the endpoint does not answer."""
        self._http = aiohttp.ClientSession()
        try:
            self._ws = await self._http.ws_connect(
                ws_url, max_msg_size=MAX_MESSAGE_BYTES, timeout=aiohttp.ClientWSTimeout(ws_close=timeout_s)
            )
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
            await self._http.close()
            raise RenderError("launch", f"DevTools endpoint {ws_url} did not answer: {exc!r}") from exc
        self._reader = asyncio.ensure_future(self._read())

    def listen(self, session_id: str | None, listener: Listener | None) -> None:
        """Route the events of ``session_id`` (None: the browser's own) to ``listener``."""
        if listener is None:
            self._listeners.pop(session_id, None)
        else:
            self._listeners[session_id] = listener

    async def send(self, method: str, params: dict[str, Any] | None = None, session_id: str | None = None) -> dict[str, Any]:
        """Send one command and wait for its result; RenderError ``protocol`` for an error
        reply, ``crash`` when the browser's socket is gone."""
        if self.closed or self._ws is None:
            raise RenderError("crash", f"browser connection closed (sending {method})")
        msg_id = next(self._ids)
        msg: dict[str, Any] = {"id": msg_id, "method": method, "params": params or {}}
        if session_id is not None:
            msg["sessionId"] = session_id
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[msg_id] = fut
        try:
            await self._ws.send_str(json.dumps(msg))
        except (aiohttp.ClientError, ConnectionError, RuntimeError) as exc:
            self._pending.pop(msg_id, None)
            raise RenderError("crash", f"browser connection lost sending {method}: {exc!r}") from exc
        try:
            reply = await fut
        finally:
            self._pending.pop(msg_id, None)
        if "error" in reply:
            err = reply["error"]
            raise RenderError("protocol", f"{method}: {err.get('message', err)}")
        result: dict[str, Any] = reply.get("result", {})  # a CDP reply's result is a JSON object
        return result

    def post(self, method: str, params: dict[str, Any] | None = None, session_id: str | None = None) -> None:
        """Send a command whose reply nobody awaits (answering an intercepted request from
        an event handler); a failure is logged, the render's own wait rule copes."""

        async def go() -> None:
            try:
                await self.send(method, params, session_id)
            except RenderError as exc:
                log.debug("cdp %s: %s", method, exc)

        asyncio.ensure_future(go())

    async def _read(self) -> None:
        assert self._ws is not None
        try:
            async for msg in self._ws:
                if msg.type != aiohttp.WSMsgType.TEXT:
                    if msg.type in (aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
                        break
                    continue
                try:
                    data = json.loads(msg.data)
                except ValueError:
                    log.warning("cdp: unreadable message dropped")
                    continue
                if "id" in data:
                    fut = self._pending.get(data["id"])
                    if fut is not None and not fut.done():
                        fut.set_result(data)
                    continue
                listener = self._listeners.get(data.get("sessionId"))
                if listener is not None:
                    try:
                        listener(data.get("method", ""), data.get("params", {}))
                    except Exception:  # noqa: BLE001 - one bad handler must not kill the socket
                        log.exception("cdp listener failed on %s", data.get("method"))
        finally:
            self._fail_all()

    def _fail_all(self) -> None:
        self.closed = True
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(RenderError("crash", "browser connection closed"))
        self._pending.clear()
        for listener in list(self._listeners.values()):
            try:
                listener("Connection.closed", {})
            except Exception:  # noqa: BLE001 - closing must reach every listener
                log.exception("cdp listener failed on close")

    async def close(self) -> None:
        """Close the socket (the browser keeps running; see crawler.render.browser)."""
        self.closed = True
        if self._ws is not None:
            await self._ws.close()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)
        if self._http is not None:
            await self._http.close()
