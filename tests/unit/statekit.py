"""Helpers for the tests of a shard's state in OUT: incarnations opened on "nodes" (folders
of their own), on fsspec's in-memory store (treated like ``s3://``) or the loopback S3."""

from __future__ import annotations

import datetime as dt

from crawler.clock import MockClock
from crawler.config import settings as config
from crawler.frontier.store import FrontierStore
from crawler.frontier.urlitem import UrlItem
from crawler.output import OutcomeRow
from crawler.recovery.statefiles import ShardState, open_shard_store, state_dir

SHARD = "shard-000"


def cfg_for(out: str, options: dict | None = None, *, sink: str = "none") -> config.CrawlConfig:
    output: dict = {"path": out}
    if options:
        output["storage_options"] = options
    return config.from_dict({"seeds": ["http://a.test/"], "output": output, "runtime": {"state_log_interval_s": 0.5},
                             "events": {"sink": sink}})


def items(prefix: str, n: int) -> list[UrlItem]:
    return [UrlItem(f"http://{prefix}.test/p/{i}", 1) for i in range(n)]


def open_on(cfg: config.CrawlConfig, node: str, monkeypatch, *, clock: MockClock | None = None,
            sleep=None) -> ShardState:
    """A new incarnation of the shard, as a process on ``node`` opens it (each with its own
    clock: incarnations share no time)."""
    monkeypatch.setenv("RAYCRAWL_LOCAL_DIR", node)
    slept: list[float] = []
    return open_shard_store(cfg, SHARD, state_dir(cfg.output.path, None, cfg.fingerprint()), clock or MockClock(),
                            sleep=sleep if sleep is not None else slept.append)


def queued(store: FrontierStore) -> set[str]:
    return {it.url for host, _ in store.pending_hosts() for it in store.load(host, 0, 1000)}


def row(url: str, shard: str = SHARD) -> OutcomeRow:
    return OutcomeRow(url=url, depth=1, outcome="fetched", status=200, attempts=1, shard=shard,
                      fetched_at=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc))


async def snapshot(st: ShardState, events=None) -> bool:
    log = st.log
    assert log is not None
    return await log.snapshot(lambda dest: st.store.backup(dest, lambda: log.seq), events=events)
