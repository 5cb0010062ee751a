"""page.fetched events to a real Redis Stream on loopback: ``redis-server`` is killed
(SIGKILL) mid-crawl and started again on its append-only file, and a consumer group then
reads every fetched page's event; the outage was counted, and the crawl finished."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time

import pytest

from crawler.config import settings as config
from crawler.output import read_pages
from crawler.testing.fixtures import crawl_config_for
from jobs.crawl import Crawl

from tests.integration import checks

redis = pytest.importorskip("redis")

STREAM = "crawler:page.fetched"
PAUSED = "h0003.web.test"  # keeps the crawl running (paused) until the test has seen the outage


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """A ``redis-server`` of this test: loopback, its own port and folder, every write
    fsynced to its append-only file before the reply (so a SIGKILL loses no acked XADD)."""

    def __init__(self, workdir: str) -> None:
        self.port = _free_port()
        self.dir = workdir
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--dir", self.dir, "--save", "",
             "--appendonly", "yes", "--appendfsync", "always", "--protected-mode", "yes"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        client = redis.Redis(port=self.port)
        deadline = time.monotonic() + 20
        while True:
            try:
                if client.ping():
                    return
            except redis.exceptions.RedisError:
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.05)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


@pytest.fixture
def redis_server(tmp_path):
    if shutil.which("redis-server") is None:
        if os.environ.get("CI"):
            pytest.fail("redis-server is not installed (.ci/run installs it)")
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    server = RedisServer(str(tmp_path / "redis"))
    os.makedirs(server.dir)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _until(cond, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def test_every_event_survives_a_redis_restart_mid_crawl(web, tmp_path, redis_server):
    out = tmp_path / "out"
    cfg = config.from_dict(crawl_config_for(
        web, output={"path": str(out)}, runtime={"shards": 2, "seen_shards": 2},
        events={"sink": "redis", "redis_url": f"redis://127.0.0.1:{redis_server.port}/0", "stream": STREAM, "batch_size": 20},
    ))
    client = redis.Redis(port=redis_server.port)
    crawl = Crawl(cfg, local=True, poll_interval_s=0.05).start()
    try:
        crawl.set_host_policy(PAUSED, paused=True)
        _until(lambda: client.xlen(STREAM) >= 10)
        redis_server.kill()
        # Pages keep being fetched and their events wait; the outage is counted.
        _until(lambda: (e := crawl.stats()["events"])["sink_failures"] > 0 and e["pending"] > 0)
        _until(lambda: (s := crawl.stats())["in_flight"] == 0 and s["queued"] == s["paused_urls"])
        during = crawl.stats()["events"]
        assert during["sink_down"] and during["sink_down_s"] > 0
        redis_server.start()  # the same port and append-only file
        _until(lambda: crawl.stats()["events"]["pending"] == 0)
        crawl.set_host_policy(PAUSED, paused=False)
        stats = crawl.wait(timeout_s=120)
    finally:
        if crawl.final is None:
            crawl.stop()
    assert stats["finished"] is True
    checks.check_ledger(stats)
    assert stats["events"]["sink_failures"] > 0 and stats["events"]["pending"] == 0

    # An indexer reads the topic through a consumer group and finds every page.
    client = redis.Redis(port=redis_server.port)
    client.xgroup_create(STREAM, "indexer", id="0")
    seen: set[tuple[str, int]] = set()
    count = 0
    while batch := client.xreadgroup("indexer", "worker-1", {STREAM: ">"}, count=500):
        for _, entries in batch:
            for entry_id, fields in entries:
                event = json.loads(fields[b"data"])
                assert fields[b"event"] == b"page.fetched" == event["event"].encode()
                seen.add((event["url"], event["fetch_seq"]))
                count += 1
                client.xack(STREAM, "indexer", entry_id)
    rows = read_pages(str(out), dedupe=False).to_pylist()
    pages = {(r["url"], r["fetch_seq"]) for r in rows if r["outcome"] in ("fetched", "not_modified")}
    assert pages and seen == pages
    assert count >= len(pages)  # at least once: a batch sent as the server died may repeat
