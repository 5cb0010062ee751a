"""page.fetched events: only for rows already durable, never lost to a failing sink (retried
with backoff on the mock clock, outage counted), backpressure on the shard while the log
is full, the log survives a restart, and the file sink's JSON lines rotate by size."""

from __future__ import annotations

import asyncio
import datetime as dt
import json

import pytest

from crawler.config import settings as config
from crawler.clock import MockClock
from crawler.errors import ConfigError
from crawler.events.emitter import EVENT_FIELDS, EventEmitter, EventLog, MemoryEventLog, page_event
from crawler.events.sinks import FileSink, SinkError, build_sink, sink_factory
from crawler.engine.outbox import Outbox
from crawler.output import OutcomeRow

from tests.unit.doubles import inline


def row(i: int, outcome: str = "fetched") -> OutcomeRow:
    return OutcomeRow(
        url=f"http://a.test/{i}", outcome=outcome, status=200 if outcome == "fetched" else 404,
        fetched_at=dt.datetime(2024, 5, 1, 12, 0, i % 60, tzinfo=dt.timezone.utc),
        content_sha256="ab" * 32, blob_key="blobs/ab/ab/x.gz", simhash=-5, url_hash=f"{i:016x}", fetch_seq=1,
    )


class FlakySink:
    """Fails while ``down``; records every event it took."""

    def __init__(self) -> None:
        self.down = False
        self.got: list[dict] = []
        self.calls = 0

    async def send(self, events):
        self.calls += 1
        if self.down:
            raise SinkError("connection refused")
        self.got.extend(events)

    async def close(self):
        return None


def test_event_carries_the_documented_fields():
    e = page_event(row(7))
    assert tuple(e) == EVENT_FIELDS
    assert e["event"] == "page.fetched" and e["fetched_at"] == "2024-05-01T12:00:07.000Z"
    assert (e["url"], e["url_hash"], e["fetch_seq"], e["simhash"]) == ("http://a.test/7", f"{7:016x}", 1, -5)


async def test_a_down_sink_loses_nothing_and_the_outage_is_counted():
    clock = MockClock()
    sink = FlakySink()
    held: list[float] = []
    em = EventEmitter(sink, MemoryEventLog(), clock, batch_size=3, max_pending=5, hold=held.append, backoff_s=1.0)
    sink.down = True
    em.on_durable([row(i) for i in range(4)] + [row(99, "http_error")])  # not a page: no event
    assert len(em.log) == 4 and not held
    await clock.run_until(lambda: sink.calls >= 4, max_time=60)
    assert sink.got == [] and em.stats()["sink_failures"] >= 4 and em.stats()["sink_down"]
    em.on_durable([row(4)])  # the log is full now: the shard is held
    assert held and len(em.log) == 5
    down_from = em.down_since
    sink.down = False
    await clock.run_until(lambda: not em.log, max_time=60)
    assert [e["url"] for e in sink.got] == [f"http://a.test/{i}" for i in range(5)]  # all, in order
    st = em.stats()
    assert st["emitted"] == 5 and st["pending"] == 0 and not st["sink_down"]
    assert st["sink_down_s"] == pytest.approx(clock.now() - down_from, abs=1e-3) and st["sink_down_s"] > 0
    await em.close()


async def test_close_drains_then_leaves_the_rest_in_the_durable_log(tmp_path):
    clock = MockClock()
    sink = FlakySink()
    sink.down = True
    path = str(tmp_path / "shard-000.events.sqlite")
    em = EventEmitter(sink, EventLog(path), clock, drain_timeout_s=5.0)
    em.on_durable([row(1), row(2)])
    closing = asyncio.ensure_future(em.close())
    await clock.run_until(closing.done, max_time=60)
    assert clock.now() >= 5.0 and sink.got == []
    # The next run's emitter finds them and sends them.
    sink.down = False
    again = EventEmitter(sink, EventLog(path), clock)
    assert len(again.log) == 2
    await again.on_flush(False)
    await clock.run_until(lambda: not again.log, max_time=10)
    assert [e["url"] for e in sink.got] == ["http://a.test/1", "http://a.test/2"]
    await again.close()


class StepWriter:
    """A writer whose flush is durable only when the test says so."""

    def __init__(self) -> None:
        self.rows: list[OutcomeRow] = []
        self.durable: list[str] = []
        self.ready = False

    def add(self, rows, bodies):
        self.rows.extend(rows)

    def maybe_flush(self) -> bool:
        if not self.ready:
            return False
        self.durable.extend(r.url for r in self.rows)
        self.rows = []
        return True

    def flush(self) -> int:
        self.ready = True
        return len(self.rows) if self.maybe_flush() else 0

    def pending_rows(self) -> int:
        return len(self.rows)


class Acks:
    def __init__(self) -> None:
        self.done_urls: list[str] = []

    def record(self, fetched):  # crawler.engine.outbox.Acks: (row, schedule) pairs
        self.done_urls.extend(row.url for row, _ in fetched)


async def test_an_event_is_logged_only_once_its_row_is_durable_and_before_the_ack():
    clock = MockClock()
    writer, acks, order = StepWriter(), Acks(), []
    em = EventEmitter(FlakySink(), MemoryEventLog(), clock)

    def on_durable(rows):
        order.append(("events", [r.url for r in rows], list(writer.durable)))
        em.on_durable(rows)

    outbox = Outbox(writer, acks, clock, interval_s=0.25, run_blocking=inline, on_durable=on_durable)
    outbox.put(row(1))
    await outbox.flush()
    assert len(em.log) == 0 and acks.done_urls == []  # handed to the writer, not durable yet
    writer.ready = True
    await outbox.flush()
    assert order == [("events", ["http://a.test/1"], ["http://a.test/1"])]
    assert acks.done_urls == ["http://a.test/1"] and len(em.log) == 1
    await em.close()


def test_a_failing_log_write_keeps_the_rows_unacked_and_hands_them_again():
    clock = MockClock()
    writer, acks = StepWriter(), Acks()
    writer.ready = True
    calls: list[list[str]] = []

    def on_durable(rows):
        calls.append([r.url for r in rows])
        if len(calls) == 1:
            raise OSError("disk full")

    outbox = Outbox(writer, acks, clock, interval_s=0.25, run_blocking=inline, on_durable=on_durable)
    outbox.put(row(1))
    with pytest.raises(OSError):
        asyncio.run(outbox.flush())
    assert acks.done_urls == []
    outbox.put(row(2))
    asyncio.run(outbox.flush())
    assert calls[-1] == ["http://a.test/1", "http://a.test/2"] and acks.done_urls == calls[-1]


async def test_file_sink_writes_json_lines_and_rotates_by_size(tmp_path):
    sink = FileSink(str(tmp_path / "events"), shard_id="shard-001", rotate_bytes=1000, run_id="r1", run_blocking=inline)
    events = [page_event(row(i)) for i in range(12)]
    for i in range(0, 12, 2):
        await sink.send(events[i : i + 2])
    files = sorted((tmp_path / "events").iterdir())
    assert [f.name for f in files][:2] == ["shard-001-r1-00000.jsonl", "shard-001-r1-00001.jsonl"]
    assert all(f.stat().st_size <= 1000 for f in files)
    lines = [json.loads(line) for f in files for line in f.read_text().splitlines()]
    assert lines == events


def test_sink_selection_by_config(tmp_path):
    out = str(tmp_path / "out")
    assert build_sink(config.EventsConfig(), "shard-000", out, None) is None
    file_sink = build_sink(config.EventsConfig(sink="file"), "shard-000", out, None)
    assert isinstance(file_sink, FileSink) and file_sink.root == f"{out}/events"
    plugin = build_sink(config.EventsConfig(sink="tests.unit.test_events:PluginSink", options={"level": 3}), "shard-002", out, None)
    assert isinstance(plugin, PluginSink) and (plugin.shard_id, plugin.level) == ("shard-002", 3)
    with pytest.raises(ConfigError, match="events.sink"):
        sink_factory(config.EventsConfig(sink="no.such.module:Sink"))
    with pytest.raises(ConfigError, match="entry point"):
        sink_factory(config.EventsConfig(sink="kafka"))
    with pytest.raises(ConfigError, match="events.redis_url"):
        config.from_dict({"events": {"sink": "redis"}})


class PluginSink(FlakySink):
    def __init__(self, shard_id: str, events: config.EventsConfig, level: int = 0) -> None:
        super().__init__()
        self.shard_id, self.level = shard_id, level
