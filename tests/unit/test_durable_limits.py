"""Decisions that limit fetching survive the loss of a node as the admissions they govern do.

docs/invariants.md #11: with a remote output a node's disk is a cache. The URLs a shard
admitted reach OUT in its log before their sender forgets them; so must the decisions
that bound them: a host's page budget, a trap cut, an operator's ``max_pages`` and the
robots.txt verdict in force. Otherwise a restarted shard refunds the budget and admits
the host's URLs again, or asks robots.txt again before it may refuse.

Each test runs a whole shard on the mock clock against a "remote" output in memory
(fsspec's ``memory://``, treated like ``s3://``), loses the node with its disk (the shard
is never closed: no final checkpoint, no snapshot), and opens the shard again on another
node, from OUT alone (crawler.recovery.statefiles.open_shard_store).
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from crawler.clock import MockClock
from crawler.config import settings as config
from crawler.policy.hostpolicy import PolicyChange
from crawler.engine.assembly import build_shard
from crawler.frontier.store import FrontierStore
from crawler.frontier.urlitem import UrlItem
from crawler.recovery.statefiles import open_shard_store, state_dir
from tests.unit.doubles import ContentAnswer, ContentQuery, MemorySeen, NoBudgetLimit, ScriptedServer, inline, no_delivery, no_dups

HOST = "a.test"
ROBOTS = b"User-agent: *\nDisallow: /private/\n"


def _cfg(out: str, **limits) -> config.CrawlConfig:
    return config.from_dict({
        "seeds": [f"http://{HOST}/"], "scope": "any", "output": {"path": out},
        "politeness": {"interval_s": 1.0}, "sitemaps": {"enabled": False},
        "limits": limits, "dedup": {"novelty_window": 10},
    })


def _urls(start: int, n: int, path: str = "p") -> list[UrlItem]:
    return [UrlItem(f"http://{HOST}/{path}/{i}", 1) for i in range(start, start + n)]


class Node:
    """One machine running the shard, with its own disk (``RAYCRAWL_LOCAL_DIR``)."""

    def __init__(self, cfg, folder, monkeypatch, server: ScriptedServer | None = None, duplicates: bool = False) -> None:
        self.clock = MockClock()
        self.server = server if server is not None else ScriptedServer(self.clock, {})
        self.server.clock = self.clock
        monkeypatch.setenv("RAYCRAWL_LOCAL_DIR", str(folder))
        st = open_shard_store(cfg, "shard-000", state_dir(cfg.output.path, None, cfg.fingerprint()), self.clock)
        self.store = st.store

        async def content(items: list[ContentQuery]) -> list[ContentAnswer]:  # every page a copy of the first one, or none a copy
            return [("exact", f"http://{HOST}/p/0") if duplicates else (None, None)] * len(items)

        self.shard = build_shard(
            cfg, "shard-000", seeds=[f"http://{HOST}/"], seen=MemorySeen(), content=content, budget=NoBudgetLimit(),
            deliver=no_delivery, owner_of=lambda h: "shard-000", store=st.store, clock=self.clock, fetcher=self.server,
            run_blocking=inline, state_log=st.log, restored=st.restored,
        )

    def deliver(self, items: list[UrlItem]) -> int:
        """A batch delivered as another shard delivers it: acknowledged once durable in OUT."""
        return asyncio.run(self.shard.accept(items))

    def admitted(self) -> int:
        """URLs of the host the shard holds to fetch or has fetched (not dropped)."""
        counts = self.store.counts()
        return counts["queued"] + counts["claimed"] + counts["done"]


@pytest.fixture
def out():
    return f"memory://raycrawl-limits-{uuid.uuid4().hex}"


def test_a_hosts_page_budget_is_not_refunded_by_the_loss_of_its_node(out, tmp_path, monkeypatch):
    cfg = _cfg(out, max_pages_per_host=5)
    first = Node(cfg, tmp_path / "node-a", monkeypatch)
    assert first.deliver(_urls(0, 8)) == 5  # 5 admitted, 3 over the budget
    assert first.shard.report().dropped == {"host_budget": 3}
    # The node is lost with its disk: no checkpoint, no snapshot ever reached OUT.

    again = Node(cfg, tmp_path / "node-b", monkeypatch)
    assert again.deliver(_urls(8, 5)) == 0  # the budget is spent: nothing more is queued
    assert again.admitted() == 5 and again.shard.report().queued == 5
    assert again.store.counts()["dropped"] == 8


def test_a_trap_cut_is_not_undone_by_the_loss_of_its_node(out, tmp_path, monkeypatch):
    cfg = _cfg(out, max_pages_per_host=40)
    clock = MockClock()
    page = [(200, b"<html><body>the same page under every URL</body></html>", 0.1)]
    server = ScriptedServer(clock, {f"http://{HOST}/p/{i}": page for i in range(20)})
    first = Node(cfg, tmp_path / "node-a", monkeypatch, server, duplicates=True)
    shard = first.shard

    async def crawl_a_trap():
        assert await shard.accept(_urls(0, 20)) == 20
        runner = asyncio.ensure_future(shard.run())
        # A window of 10 fetches, all duplicates of stored content: the budget is cut.
        await first.clock.run_until(lambda: shard.parts.host_budget.stats()["cuts"] == 1, max_time=60)
        await first.clock.run_until(lambda: shard.parts.outbox.rows_acked >= 10, max_time=60)
        shard.stop()  # the node dies: nothing more is fetched, flushed or checkpointed
        await runner
        await shard.synced()  # what the log held by then: the cut went with its page's ack

    asyncio.run(crawl_a_trap())
    left = shard.parts.host_budget.remaining(HOST)
    assert left is not None and left < 20  # 20 more were planned before the cut
    held = first.admitted()

    again = Node(cfg, tmp_path / "node-b", monkeypatch)
    assert again.deliver(_urls(20, 30)) == left
    assert again.admitted() == held + left and again.shard.report().dropped == {"host_budget": 30 - left}


def test_a_trap_cut_that_trims_the_queue_survives_with_the_urls_it_dropped(out, tmp_path, monkeypatch):
    cfg = _cfg(out, max_pages_per_host=20)
    first = Node(cfg, tmp_path / "node-a", monkeypatch)
    shard = first.shard
    assert first.deliver(_urls(0, 20)) == 20
    for _ in range(10):
        drop = shard.parts.host_budget.record_fetch(HOST, True, shard.parts.frontier.queued_for(HOST))
        if drop:
            shard.parts.admission.trim(HOST, drop)
    assert shard.parts.frontier.queued_for(HOST) == 10 and shard.report().dropped == {"budget_cut": 10}
    asyncio.run(shard.synced())

    again = Node(cfg, tmp_path / "node-b", monkeypatch)
    assert again.deliver(_urls(20, 10)) == 0
    assert again.admitted() == 10 and again.store.counts()["dropped"] == 20


def test_an_operators_max_pages_survives_the_loss_of_the_node_with_what_it_spent(out, tmp_path, monkeypatch):
    cfg = _cfg(out)  # no per-host limit but the operator's
    first = Node(cfg, tmp_path / "node-a", monkeypatch)
    first.shard.apply_host_policy(PolicyChange(HOST, max_pages=5))
    asyncio.run(first.shard.synced())  # what the control API waits for before it answers
    assert first.deliver(_urls(0, 8)) == 5

    again = Node(cfg, tmp_path / "node-b", monkeypatch)
    assert again.deliver(_urls(8, 5)) == 0
    assert again.admitted() == 5


def test_an_operators_max_pages_set_after_admissions_keeps_its_cut_after_the_loss(out, tmp_path, monkeypatch):
    cfg = _cfg(out)
    first = Node(cfg, tmp_path / "node-a", monkeypatch)
    assert first.deliver(_urls(0, 8)) == 8
    first.shard.apply_host_policy(PolicyChange(HOST, max_pages=5))  # 3 queued URLs cut
    asyncio.run(first.shard.synced())
    assert first.shard.report().dropped == {"host_limit": 3}

    again = Node(cfg, tmp_path / "node-b", monkeypatch)
    assert again.deliver(_urls(8, 5)) == 0
    assert again.admitted() == 5


def test_a_robots_verdict_made_before_the_loss_is_in_force_after_it_without_a_refetch(out, tmp_path, monkeypatch):
    cfg = _cfg(out)
    clock = MockClock()
    server = ScriptedServer(clock, {f"http://{HOST}/robots.txt": [(200, ROBOTS, 0.1)],
                                    f"http://{HOST}/p/0": [(200, b"<html><body>ok</body></html>", 0.1)]})
    first = Node(cfg, tmp_path / "node-a", monkeypatch, server)
    shard = first.shard

    async def fetch_robots():
        await shard.accept(_urls(0, 1) + _urls(0, 2, "private"))
        runner = asyncio.ensure_future(shard.run())
        # robots.txt is fetched for the host's first URL; the private ones it refuses.
        await first.clock.run_until(lambda: shard.report().counters.robots_blocked == 2, max_time=30)
        shard.stop()  # the node dies before the refusals' rows are written
        await runner
        await shard.synced()  # what the log held by then

    asyncio.run(fetch_robots())
    assert [u for u, _, _ in server.log][:1] == [f"http://{HOST}/robots.txt"]
    fetched_before = len(server.log)

    again = Node(cfg, tmp_path / "node-b", monkeypatch, server)
    queued = again.deliver(_urls(0, 3, "private"))  # private/2 is new; 0 and 1 were refused
    assert queued == 0 and again.shard.report().counters.robots_blocked == 1  # refused at once
    robots_fetches = [u for u, _, _ in server.log[fetched_before:] if u.endswith("/robots.txt")]
    assert robots_fetches == []


def test_with_a_local_output_a_killed_shard_keeps_its_budget_without_a_checkpoint(tmp_path):
    """The same store commit serves a local output: a shard killed between two checkpoints
    (every ``runtime.checkpoint_interval_s``) reopens its store with the budget spent."""
    cfg = _cfg(str(tmp_path / "out"), max_pages_per_host=5)

    def shard(clock):
        return build_shard(
            cfg, "shard-000", seeds=[f"http://{HOST}/"], seen=MemorySeen(), content=no_dups, budget=NoBudgetLimit(),
            deliver=no_delivery, owner_of=lambda h: "shard-000", store=FrontierStore(str(tmp_path / "shard.sqlite")),
            clock=clock, fetcher=ScriptedServer(clock, {}), run_blocking=inline,
        )

    first = shard(MockClock())
    assert first.admit(_urls(0, 8)) == 5
    assert first.parts.checkpointer.saves == 0  # killed before its first checkpoint
    again = shard(MockClock())
    assert again.admit(_urls(8, 5)) == 0
    assert again.parts.store.counts() == {"queued": 5, "claimed": 0, "done": 0, "dropped": 8}
