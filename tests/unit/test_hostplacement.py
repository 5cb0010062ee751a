"""The typed answer of Regions.placement_of / Regions.set_rule (crawler.placement.peers.HostPlacement):
its dict is the JSON shape GET /hosts/{host} and the Ray calls carry, and reads back unchanged."""

from __future__ import annotations

import pytest

from crawler.placement.peers import HostPlacement


def test_the_record_and_its_dict_read_each_other_back() -> None:
    rec = HostPlacement("eu", "measured", {"eu": 0.1, "us": None}, 12.5, 2, "eu-0", "us-1")
    data = rec.to_dict()
    assert data == {"region": "eu", "how": "measured", "figures": {"eu": 0.1, "us": None},
                    "decided_at": 12.5, "moves": 2, "shard": "eu-0", "moving_to": "us-1"}
    assert HostPlacement.from_dict(data) == rec


def test_a_dict_with_an_unknown_how_is_refused() -> None:
    with pytest.raises(ValueError, match="how"):
        HostPlacement.from_dict({"region": "eu", "how": "guessed"})


def test_set_rule_answers_what_place_answers_as_a_record(tmp_path) -> None:
    """At the host's home (which asks the owner) and at the owner, the typed answers are
    the dicts place() and describe() give."""
    import asyncio

    from tests.unit.test_handover import PORT, Crawl

    crawl = Crawl(tmp_path)
    host = crawl.web.hosts_in("near")[0]
    key = f"{host}:{PORT}"
    seen: dict[str, object] = {}

    async def middle(c: Crawl) -> None:
        await c.clock.run_until(lambda: sum(1 for h, p, *_ in c.log if h == host and p != "/robots.txt") >= 2, max_time=600)
        home = c.shards[c.topology.home_of(key)]
        placing = asyncio.ensure_future(home.regions.set_rule(key, "far"))
        await c.clock.run_until(placing.done, max_time=600)
        seen["typed"] = placing.result()
        owner = c.shards[c.topology.owner_in("far", key)]
        seen["record"], seen["described"] = owner.regions.placement_of(key), owner.regions.describe(key)

    asyncio.run(crawl.run(middle))
    typed = seen["typed"]
    assert isinstance(typed, HostPlacement) and typed.region == "far" and typed.how == "rule"
    assert isinstance(seen["record"], HostPlacement) and seen["record"].to_dict() == seen["described"]
