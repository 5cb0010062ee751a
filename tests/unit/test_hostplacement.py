"""The typed answer of Regions.describe / Regions.place (crawler.placement.peers.HostPlacement):
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
