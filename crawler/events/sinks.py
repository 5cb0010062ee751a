"""Where ``page.fetched`` events go (crawler.events.emitter): the sink protocol and the built-in sinks.

* :class:`FileSink`: JSON lines through fsspec (a local folder or ``s3://``), one file
  series per shard and run, rotated by size;
* :class:`RedisStreamSink`: a Redis Stream (``XADD ... MAXLEN ~``), read by consumer groups;
* a plug-in: ``events.sink: module:Class`` or the name of an entry point in the
  ``raycrawl.event_sinks`` group (:func:`sink_factory`).

A sink's ``send`` returns once it holds the whole batch or raises; the emitter retries a
failed batch, so a sink sees a batch at least once and never has to retry itself.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import importlib
import json
from typing import Any, Awaitable, Callable, Protocol, Sequence

from crawler.config.settings import EVENT_SINKS, EventsConfig
from crawler.errors import ConfigError, CrawlError
from crawler.output import open_fs

ENTRY_POINT_GROUP = "raycrawl.event_sinks"


def dumps(event: dict[str, Any]) -> str:
    return json.dumps(event, separators=(",", ":"), ensure_ascii=False)


class SinkError(CrawlError):
    """A sink could not take a batch (it is retried; nothing is lost)."""


class EventSink(Protocol):
    """Where events go. ``send`` returns once the sink holds the whole batch, or raises
    (the batch is sent again later, so a sink that took part of it sees it twice)."""

    async def send(self, events: Sequence[dict[str, Any]]) -> None: ...

    async def close(self) -> None: ...


RunBlocking = Callable[..., Awaitable[Any]]


class FileSink:
    """JSON lines under ``path`` (a folder or fsspec URL: ``s3://`` works), one file series
    per shard and run, ``<shard>-<run>-<seq>.jsonl``, rotated at ``rotate_bytes``.

    A batch is one append (``s3fs`` appends by multipart copy). A failed append may leave
    a partial last line: the retry goes to a new file, so only that file's last line can
    be cut, and a reader skips a last line that does not parse.
    """

    def __init__(
        self, path: str, *, shard_id: str, storage_options: dict[str, Any] | None = None, rotate_bytes: int = 64_000_000,
        run_id: str | None = None, run_blocking: RunBlocking = asyncio.to_thread,
    ) -> None:
        self.fs, self.root = open_fs(path, storage_options)
        self.shard_id = shard_id
        self.rotate_bytes = rotate_bytes
        self.run_id = run_id or dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S%f")
        self._run_blocking = run_blocking
        self._seq = 0
        self._size = 0
        self.files_written = 0

    def current_path(self) -> str:
        return f"{self.root.rstrip('/')}/{self.shard_id}-{self.run_id}-{self._seq:05d}.jsonl"

    def _append(self, path: str, data: bytes) -> None:
        self.fs.makedirs(self.root, exist_ok=True)
        with self.fs.open(path, "ab") as f:
            f.write(data)

    async def send(self, events: Sequence[dict[str, Any]]) -> None:
        data = "".join(dumps(e) + "\n" for e in events).encode("utf-8")
        if self._size and self._size + len(data) > self.rotate_bytes:
            self._seq, self._size = self._seq + 1, 0
        if self._size == 0:
            self.files_written += 1
        try:
            await self._run_blocking(self._append, self.current_path(), data)
        except Exception as exc:  # noqa: BLE001 - any storage error: retried, in a new file
            self._seq, self._size = self._seq + 1, 0
            raise SinkError(f"writing events to {self.root}: {exc!r}") from exc
        self._size += len(data)

    async def close(self) -> None:
        return None


class RedisStreamSink:
    """A Redis Stream (``XADD <stream> MAXLEN ~ <maxlen> * event page.fetched data <json>``),
    so consumers read it with consumer groups (``XREADGROUP``). A batch is one
    ``MULTI``/``EXEC`` pipeline; the connection is redis-py's asyncio client."""

    def __init__(self, url: str, stream: str, maxlen: int, *, client: Any = None) -> None:
        self.url, self.stream, self.maxlen = url, stream, maxlen
        self._client = client

    def _connect(self) -> Any:
        if self._client is None:
            try:
                import redis.asyncio as aioredis
                from redis.asyncio.retry import Retry
                from redis.backoff import NoBackoff
            except ImportError as exc:
                raise ConfigError("events.sink: redis needs the redis package (pip install redis)") from exc
            # Short timeouts and no retries inside the client: a down server is a failed
            # send, retried by the emitter on its clock, not a shard stuck in a socket call.
            self._client = aioredis.from_url(
                self.url, socket_timeout=5.0, socket_connect_timeout=2.0, retry=Retry(NoBackoff(), 0)
            )
        return self._client

    async def send(self, events: Sequence[dict[str, Any]]) -> None:
        client = self._connect()
        try:
            async with client.pipeline(transaction=True) as pipe:
                for e in events:
                    pipe.xadd(self.stream, {"event": e["event"], "data": dumps(e)}, maxlen=self.maxlen, approximate=True)
                await pipe.execute()
        except (OSError, asyncio.TimeoutError) as exc:
            raise SinkError(f"redis {self.url}: {exc!r}") from exc
        except Exception as exc:
            if type(exc).__module__.startswith("redis"):
                raise SinkError(f"redis {self.url}: {exc!r}") from exc
            raise

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


# -- building from the config -----------------------------------------------------------


def sink_factory(cfg: EventsConfig) -> Callable[..., EventSink] | None:
    """The class (or factory) ``events.sink`` names; None for ``none``. Raises ConfigError
    for a plug-in that cannot be imported (checked in the driver before any shard starts)."""
    name = cfg.sink
    if name == "none":
        return None
    if name in EVENT_SINKS:
        if name == "redis":
            try:
                importlib.import_module("redis.asyncio")
            except ImportError as exc:
                raise ConfigError("events.sink: redis needs the redis package (pip install redis)") from exc
        return FileSink if name == "file" else RedisStreamSink
    if ":" in name:
        module, _, attr = name.partition(":")
        try:
            plugin: Callable[..., EventSink] = getattr(importlib.import_module(module), attr)  # the config's word for it
            return plugin
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"events.sink: cannot load {name!r}: {exc}") from exc
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == name:
            loaded: Callable[..., EventSink] = ep.load()  # the plug-in's word for it
            return loaded
    raise ConfigError(
        f"events.sink: {name!r} is not one of {', '.join(EVENT_SINKS)}, a module:Class path, "
        f"or an entry point of the {ENTRY_POINT_GROUP} group"
    )


def _protocol(path: str) -> str:
    return path.split("://", 1)[0] if "://" in path else "file"


def build_sink(cfg: EventsConfig, shard_id: str, out: str, storage_options: dict[str, Any] | None) -> EventSink | None:
    """The sink of one shard. A plug-in is called as ``Class(shard_id=..., events=cfg,
    **cfg.options)``."""
    factory = sink_factory(cfg)
    if factory is None:
        return None
    if factory is FileSink:
        path = cfg.path or f"{out.rstrip('/')}/events"
        # The output's storage options serve an events folder on the same filesystem.
        same_fs = _protocol(path) == _protocol(out)
        return FileSink(path, shard_id=shard_id, storage_options=storage_options if same_fs else None,
                        rotate_bytes=cfg.rotate_bytes)
    if factory is RedisStreamSink:
        assert cfg.redis_url is not None
        return RedisStreamSink(cfg.redis_url, cfg.stream, cfg.maxlen)
    return factory(shard_id=shard_id, events=cfg, **dict(cfg.options))


