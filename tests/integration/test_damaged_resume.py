"""A crawl resumed over damaged state fetches nothing twice and loses no URL (in process, no Ray).

The crash is simulated the way a machine loses it: the output folder is copied in the
middle of a crawl (the rows, bodies, events and state at that instant, with the lease
gone), and the shard store's write-ahead log is cut short, as a power loss or a copy
taken mid-write leaves it: SQLite then drops every transaction committed after the cut
(admissions, claims, acks) without a word. The resumed crawl is judged from the fetches
it makes: no URL that already had a row is fetched again, every page of the site ends
with a row, the ledger balances and every fetched row has its event.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil

import pytest

from crawler.config import settings as config
from crawler.errors import ForeignStateError
from crawler.output import read_pages
from crawler.session.inprocess import local_session
from crawler.testing.chainweb import PAGES, SEED, SiteFetcher, copy_output


def _cfg(out, runtime=None, **limits) -> config.CrawlConfig:
    return config.from_dict({
        "seeds": [SEED], "scope": "any", "politeness": {"interval_s": 0.0},
        "limits": limits,
        "output": {"path": str(out), "row_flush_interval_s": 0.05, "outbox_interval_s": 0.02},
        "runtime": {"shards": 1, "link_flush_interval_s": 0.01, "link_flush_early_s": 0.01, **(runtime or {})},
        "events": {"sink": "file"},
    })


def _crawl_and_copy_at(tmp_path, fetches: int, **limits):
    """Crawl the site to the end, copying the output at page fetch ``fetches`` (the crash image)."""
    out, image = tmp_path / "out", tmp_path / "image"

    def copy(n: int) -> None:
        if n == fetches:
            copy_output(str(out), str(image))

    first = SiteFetcher(copy)
    asyncio.run(local_session(_cfg(out, **limits), fetcher_factory=lambda: first).run())
    assert (image / "state").exists()
    return image


def _urls(out) -> set[str]:
    return {r["url"] for r in read_pages(str(out), columns=["url"]).to_pylist()}


def _resume(image, **limits):
    again = SiteFetcher()
    session = local_session(_cfg(image, **limits), fetcher_factory=lambda: again)
    stats = asyncio.run(session.run())
    return session, stats, again


def _events(out) -> set[tuple[str, int]]:
    seen = set()
    for root, _, files in os.walk(out / "events"):
        for name in files:
            for line in open(os.path.join(root, name), encoding="utf-8"):
                e = json.loads(line)
                seen.add((e["url"], e["fetch_seq"]))
    return seen


@pytest.mark.parametrize("fetches, keep", [(40, 0.3), (80, 0.5), (120, 0.8)])
def test_a_cut_write_ahead_log_loses_nothing_and_fetches_nothing_twice(tmp_path, fetches, keep):
    image = _crawl_and_copy_at(tmp_path, fetches)
    wal = image / "state" / "shard-000.sqlite-wal"
    with open(wal, "r+b") as f:
        f.truncate(int(os.path.getsize(wal) * keep) + 100)  # mid-frame: committed work after it is gone
    had_rows = _urls(image)

    session, stats, again = _resume(image)

    assert session.preflight is not None and session.preflight.damaged == ["shard-000"]
    assert not set(again.fetched) & had_rows  # a URL with a row is never fetched again
    assert len(again.fetched) == len(set(again.fetched))
    assert _urls(image) == set(PAGES)  # no URL lost
    assert stats["finished"] is True and stats["ledger"]["balanced"], stats["ledger"]
    rows = read_pages(str(image), columns=["url", "fetch_seq"]).to_pylist()
    assert {(r["url"], r["fetch_seq"]) for r in rows} <= _events(image)  # every row's event, at least once


def test_a_removed_shard_store_is_rebuilt_from_the_rows_and_pages_in_the_output(tmp_path):
    """What a refusal of a foreign or damaged shard store offers: remove it, and the
    shard's fetched URLs come back from their rows, its queued ones from stored links."""
    image = _crawl_and_copy_at(tmp_path, 70)
    for suffix in ("", "-wal", "-shm"):
        (image / "state" / f"shard-000.sqlite{suffix}").unlink(missing_ok=True)
    had_rows = _urls(image)
    session, stats, again = _resume(image)
    assert "holds none of the URLs" in session.preflight.shards["shard-000"].damaged
    assert not set(again.fetched) & had_rows
    assert _urls(image) == set(PAGES) and stats["finished"] and stats["ledger"]["balanced"], stats["ledger"]


def test_an_ordinary_crash_reads_one_part_file_and_fetches_no_row_again(tmp_path):
    image = _crawl_and_copy_at(tmp_path, 90)
    had_rows = _urls(image)
    session, stats, again = _resume(image)
    settled = session.preflight.shards["shard-000"]
    assert settled.damaged == "" and settled.parts_read <= 2 and settled.unacked_parts <= 1
    assert not set(again.fetched) & had_rows
    assert _urls(image) == set(PAGES) and stats["finished"] and stats["ledger"]["balanced"]


@pytest.mark.parametrize("damage", [b"{not json", b'{"granted": "many"}'])
def test_a_garbage_budget_is_rebuilt_from_the_rows_and_max_pages_still_holds(tmp_path, damage):
    image = _crawl_and_copy_at(tmp_path, 60, max_pages=100)
    (image / "state" / "budget.json").write_bytes(damage)
    had_rows = _urls(image)
    _, stats, again = _resume(image, max_pages=100)
    assert not set(again.fetched) & had_rows
    assert len(had_rows) + len(again.fetched) <= 100  # leases a crashed run held are not spent twice
    assert len(_urls(image)) == 100 and stats["ledger"]["balanced"], stats["ledger"]
    assert json.loads((image / "state" / "budget.json").read_text())["granted"] == 100


def test_a_shard_store_of_another_crawl_of_the_same_config_is_refused(tmp_path):
    image = _crawl_and_copy_at(tmp_path, 50)
    other = _crawl_and_copy_at(tmp_path / "other", 70)  # the same config, its own output
    for suffix in ("", "-wal", "-shm"):
        src = other / "state" / f"shard-000.sqlite{suffix}"
        dst = image / "state" / f"shard-000.sqlite{suffix}"
        if dst.exists():
            dst.unlink()
        if src.exists():
            shutil.copy(src, dst)
    again = SiteFetcher()
    with pytest.raises(ForeignStateError) as exc:
        asyncio.run(local_session(_cfg(image), fetcher_factory=lambda: again).run())
    assert "shard-000.sqlite belongs to shard-000 of crawl" in str(exc.value) and "\n" not in str(exc.value)
    assert again.fetched == []


def test_a_remote_outputs_shard_state_of_another_crawl_is_refused_naming_it_in_the_output(tmp_path, monkeypatch):
    """With a remote output the store is rebuilt from OUT/state/<shard>/: that is what the
    refusal names (fsspec's in-memory filesystem stands in for the object store)."""
    import fsspec

    monkeypatch.setenv("RAYCRAWL_LOCAL_DIR", str(tmp_path / "node"))
    fs = fsspec.filesystem("memory")
    mine, other = f"memory://{tmp_path.name}/mine", f"memory://{tmp_path.name}/other"
    for out in (mine, other):
        fetcher = SiteFetcher()
        fast = {"state_log_interval_s": 0.02}  # each delivery waits for its log segment in OUT
        assert asyncio.run(local_session(_cfg(out, fast), fetcher_factory=lambda: fetcher).run())["finished"]  # noqa: B023 - called within the iteration
    record = json.loads(fs.cat(f"/{tmp_path.name}/mine/state/crawl.json"))
    fs.pipe(f"/{tmp_path.name}/mine/state/crawl.json", json.dumps({**record, "finished": False}).encode())
    fs.rm(f"/{tmp_path.name}/mine/state/shard-000", recursive=True)
    fs.copy(f"/{tmp_path.name}/other/state/shard-000", f"/{tmp_path.name}/mine/state/shard-000", recursive=True)
    again = SiteFetcher()
    with pytest.raises(ForeignStateError) as exc:
        asyncio.run(local_session(_cfg(mine), fetcher_factory=lambda: again).run())
    assert str(exc.value).startswith(f"{mine}/state/shard-000/ belongs to shard-000 of crawl ")
    assert again.fetched == []
