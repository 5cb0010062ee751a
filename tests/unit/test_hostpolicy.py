"""Operator host policies: which keys a host spec names, and how a hostname-wide policy
applies to every port of a hostname (in politeness, the host budget and one shard on the
mock clock), survives a checkpoint, and yields to a later per-key word."""

from __future__ import annotations

import asyncio
import math
import random

import pytest

from crawler.config import settings as config
from crawler.clock import MockClock
from crawler.errors import ConfigError
from crawler.frontier.urlitem import UrlItem
from crawler.policy.hostpolicy import HostPolicy, PolicyChange, parse_host
from crawler.engine.hostview import host_view
from crawler.frontier.store import FrontierStore
from crawler.policy.politeness import Politeness
from crawler.engine.assembly import build_shard
from crawler.policy.hostbudget import HostBudget

from tests.unit.doubles import MemorySeen, NoBudgetLimit, ScriptedServer, html, inline, no_delivery, no_dups


async def run_for(clock: MockClock, seconds: float) -> None:
    end = clock.now() + seconds
    await clock.run_until(lambda: clock.now() >= end, max_time=seconds + 5)


@pytest.mark.parametrize(
    "spec, name, key, wide",
    [
        ("example.org", "example.org", "example.org", True),
        ("Example.ORG.", "example.org", "example.org", True),  # RFC 3986 3.2.2: case-insensitive; root label
        ("example.org:8080", "example.org", "example.org:8080", False),
        ("example.org:80", "example.org", "example.org", False),  # the default port has no key of its own
        ("bücher.example", "xn--bcher-kva.example", "xn--bcher-kva.example", True),  # IDNA (UTS 46)
        ("0x7f.1", "127.0.0.1", "127.0.0.1", True),  # WHATWG IPv4 parser
        ("[::1]", "[::1]", "[::1]", True),
        ("[::1]:8443", "[::1]", "[::1]:8443", False),
        ("in-ner_under.example", "in-ner_under.example", "in-ner_under.example", True),  # _ is in real DNS names
        ("xn--bcher-kva.example:1", "xn--bcher-kva.example", "xn--bcher-kva.example:1", False),
    ],
)
def test_host_spec_is_normalized_like_a_url_host(spec, name, key, wide):
    t = parse_host(spec)
    assert (t.name, t.key, t.hostname_wide) == (name, key, wide)


@pytest.mark.parametrize("spec", [
    "", "http://example.org/", "example.org/path", "exa mple.org", "example.org:99999", "a..b",
    # issue 24: accepted before (204) and matched nothing. A policy names one host, not a
    # pattern; a label is letters, digits and inner hyphens (RFC 1123 2.1, RFC 5891 4.2.3.1);
    # port 0 is no port a URL can name (RFC 6335 6: reserved).
    "*", "*.test", "a.*.test", "-bad-.example", "bad-.example", "example.org:0", "127.0.0.1:0", "[::1]:0",
])
def test_bad_host_spec_names_the_field(spec):
    with pytest.raises(ConfigError, match="^host: "):
        parse_host(spec)


@pytest.mark.parametrize(
    "kw, field",
    [({"max_rps": 0}, "max_rps"), ({"max_rps": float("inf")}, "max_rps"), ({"max_rps": True}, "max_rps"),
     ({"paused": "yes"}, "paused"), ({"max_pages": -1}, "max_pages"), ({"max_pages": 2.5}, "max_pages")],
)
def test_bad_policy_value_names_the_field(kw, field):
    with pytest.raises(ConfigError, match=f"^{field}: "):
        HostPolicy(**kw)


def test_hostname_pause_covers_every_port_including_keys_seen_later():
    clock = MockClock()
    pol = Politeness(1.0, 60.0, clock=clock)
    pol.on_start("a.test:81")
    pol.on_finish("a.test:81", 200)
    touched = pol.set_name_override("a.test", paused=True)
    assert touched == ["a.test:81"]
    for key in ("a.test", "a.test:81", "a.test:9000", "[::1]:81"):
        expected = math.inf if key.startswith("a.test") else 0.0
        assert pol.next_allowed(key) == expected, key
    # A later word about one key wins for that key; the hostname stays paused elsewhere.
    pol.set_override("a.test:81", paused=False)
    assert pol.next_allowed("a.test:81") == 2.0 - 1.0  # finished at 0 + interval 1
    assert pol.next_allowed("a.test:9000") == math.inf
    # A newer hostname-wide word replaces the per-key one.
    pol.set_name_override("a.test", paused=True)
    assert pol.next_allowed("a.test:81") == math.inf
    pol.set_name_override("a.test", paused=False)
    assert pol.next_allowed("a.test:81") == 1.0 and pol.next_allowed("a.test:9000") == 0.0


def test_hostname_rate_and_pause_survive_a_snapshot():
    clock = MockClock()
    pol = Politeness(1.0, 60.0, clock=clock)
    pol.set_name_override("a.test", interval_s=5.0)
    pol.set_override("a.test:81", paused=True)
    again = Politeness(1.0, 60.0, clock=MockClock())
    again.restore(pol.snapshot(protecting_only=True))
    assert again.interval("a.test:82") == 5.0
    assert again.override("a.test:81") == (5.0, True)
    assert again.describe("a.test:81")["next_allowed_in_s"] is None  # paused


def test_politeness_wait_is_the_gap_it_imposed():
    clock = MockClock()
    pol = Politeness(2.0, 60.0, clock=clock)
    pol.on_start("a.test")
    clock.advance(0.5)
    pol.on_headers("a.test")
    pol.on_finish("a.test", 200)  # anchor 0.5: next start at 2.5, the request ended at 0.5
    clock.advance(10)
    pol.on_start("a.test")
    assert pol.stats()["wait_s"] == pytest.approx(2.0)


def test_host_limit_cuts_the_queue_and_applies_to_new_ports():
    budget = HostBudget(100)
    for _ in range(10):
        assert budget.admit("a.test:81")
    # 10 admitted, 7 still queued (3 done): a limit of 5 leaves room for 2 of the queued.
    assert budget.set_limit("a.test:81", 5, queued=7) == 5
    assert budget.remaining("a.test:81") == 0 and not budget.admit("a.test:81")
    drops = budget.set_name_limit("a.test", 2, lambda key: 0)
    assert drops == {"a.test:81": 0}
    assert budget.admit("a.test:82") and budget.admit("a.test:82") and not budget.admit("a.test:82")
    assert budget.admit("b.test:82")
    again = HostBudget(100)
    again.restore(budget.snapshot())
    assert again.limit("a.test:99") == 2 and again.limit("b.test") == 100


async def test_shard_hostname_pause_stops_every_port_until_resumed(tmp_path):
    """Two servers on one hostname (ports 81 and 82): a hostname-wide pause holds both,
    a per-key resume frees one, a hostname-wide resume the other; max_pages trims."""
    cfg = config.from_dict({
        "seeds": ["http://a.test:81/"], "politeness": {"interval_s": 1.0, "respect_robots": False},
        "output": {"path": str(tmp_path / "out"), "row_flush_interval_s": 0.5},
    })
    clock = MockClock()
    pages = {f"http://a.test:{p}/{i}": [(200, html(), 0.1)] for p in (81, 82) for i in range(6)}
    server = ScriptedServer(clock, pages)
    store = FrontierStore(str(tmp_path / "shard.sqlite"))
    shard = build_shard(
        cfg, "shard-000", seeds=["http://a.test:81/"], seen=MemorySeen(), content=no_dups, budget=NoBudgetLimit(),
        deliver=no_delivery, owner_of=lambda host: "shard-000", store=store, clock=clock, rng=random.Random(1),
        fetcher=server, run_blocking=inline,
    )
    shard.apply_host_policy(PolicyChange("a.test", paused=True, hostname_wide=True))
    shard.admit([UrlItem(u, 0) for u in pages])
    run = asyncio.ensure_future(shard.run())
    await run_for(clock, 10)
    assert server.log == []
    info = host_view(shard.parts, parse_host("a.test"))
    assert [k.key for k in info.keys] == ["a.test:81", "a.test:82"]
    assert info.hostname_policy.paused is True and all(k.next_allowed_in_s is None for k in info.keys)

    shard.apply_host_policy(PolicyChange("a.test:82", paused=False))
    shard.apply_host_policy(PolicyChange("a.test:82", max_pages=3))  # 3 pages in all for that key: 3 stay queued
    assert shard.parts.dropped["host_limit"] == 3
    await run_for(clock, 10)
    assert sorted(u for u, _, _ in server.log) == [f"http://a.test:82/{i}" for i in range(3)]

    shard.apply_host_policy(PolicyChange("a.test", paused=False, hostname_wide=True))
    await run_for(clock, 10)
    assert len(server.log) == 3 + 6
    starts = sorted(s for u, s, _ in server.log if ":81/" in u)
    assert all(b - a >= 1.0 for a, b in zip(starts, starts[1:]))
    shard.stop()
    await run
    await shard.close()
