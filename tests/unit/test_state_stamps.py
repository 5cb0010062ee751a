"""Foreign state is refused with one line naming the file and the fix (crawler.recovery.stamps).

Every state file is stamped with its crawl and its part when made; a file of another
crawl (or of another shard of this one) copied into the state folder is refused when
opened, and before the run starts by the driver's check of a local output
(crawler.session.preflight); `crawl run` exits 2. Files made before stamps are accepted
and stamped. A damaged or foreign ``budget.json`` is rebuilt from the rows in OUT.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil

import pytest

from crawler.config import settings as config
from crawler.content.index import ContentShard, read_log_stamp
from crawler.errors import REFUSALS, DamagedStateError, ForeignStateError
from crawler.events.emitter import EventLog
from crawler.services.budget import BudgetPool
from crawler.frontier.audit import StoreAudit
from crawler.frontier.store import FrontierStore
from crawler.frontier.urlitem import UrlItem
from crawler.recovery import stamps
from crawler.recovery.crawlrecord import prepare
from crawler.session.preflight import check_local_state
from crawler.seen.set import SeenSet

CRAWL_A = stamps.crawl_id("aaaa111122223333", 1_700_000_000.0)
CRAWL_B = stamps.crawl_id("bbbb111122223333", 1_700_000_500.0)


def _frontier(path, identity):
    store = FrontierStore(path)
    try:
        StoreAudit(store).claim(identity)
    except BaseException:
        store.close()
        raise
    return store


def _seen(path, identity):
    return SeenSet(1000, path=path, identity=identity)


def _bloom_only(path, identity):
    return SeenSet(1000, exact=False, path=path, identity=identity)


def _content(path, identity):
    return ContentShard(3, 4, path, identity)


def _events(path, identity):
    return EventLog(path, identity)


OPENERS = {"frontier": (_frontier, "shard-000.sqlite"), "seen": (_seen, "seen-000.sqlite"),
           "seen_bloom_only": (_bloom_only, "seen-000.sqlite"), "content": (_content, "content-000.log"),
           "events": (_events, "shard-000.events.sqlite")}


def _refusal(exc: BaseException, path: str) -> str:
    msg = str(exc)
    assert "\n" not in msg and path in msg and isinstance(exc, REFUSALS)  # the CLI's exit 2
    return msg


@pytest.mark.parametrize("kind", sorted(OPENERS))
def test_a_file_of_another_crawl_is_refused_in_one_line_naming_it_and_the_fix(tmp_path, kind):
    opener, name = OPENERS[kind]
    path = str(tmp_path / name)
    opener(path, stamps.part(CRAWL_A, "shard-000")).close()
    opener(path, stamps.part(CRAWL_A, "shard-000")).close()  # its own crawl opens it again
    with pytest.raises(ForeignStateError) as exc:
        opener(path, stamps.part(CRAWL_B, "shard-000"))
    msg = _refusal(exc.value, path)
    assert f"shard-000 of crawl {CRAWL_A}" in msg and "another output folder" in msg
    with pytest.raises(ForeignStateError) as exc:  # this crawl's, but another shard's
        opener(path, stamps.part(CRAWL_A, "shard-001"))
    assert "shard-000 of this crawl, not to shard-001 of this crawl" in _refusal(exc.value, path)


@pytest.mark.parametrize("kind", sorted(OPENERS))
def test_a_file_made_before_stamps_is_accepted_and_stamped(tmp_path, kind):
    opener, name = OPENERS[kind]
    path = str(tmp_path / name)
    opener(path, None).close()  # an older version: no stamp
    opener(path, stamps.part(CRAWL_A, "seen-000")).close()
    with pytest.raises(ForeignStateError):
        opener(path, stamps.part(CRAWL_B, "seen-000"))


def test_an_unstamped_content_log_is_rewritten_with_its_stamp_first_and_keeps_its_entries(tmp_path):
    path = str(tmp_path / "content-000.log")
    old = ContentShard(3, 4, path)
    _index(old, range(50))
    old.close()
    ContentShard(3, 4, path, stamps.part(CRAWL_A, "content-000")).close()
    assert read_log_stamp(path) == stamps.part(CRAWL_A, "content-000")
    assert ContentShard(3, 4, path).stats()["exact_entries"] == 50


def test_a_torn_content_log_tail_is_cut_off_so_later_entries_read_back(tmp_path):
    """A save cut short by a crash left half a record at the end; appending after it used
    to shift every later record, and the next restart refused the log as corrupt."""
    path = str(tmp_path / "content-000.log")
    shard = ContentShard(3, 4, path, stamps.part(CRAWL_A, "content-000"))
    _index(shard, range(40))
    shard.close()
    with open(path, "ab") as f:
        f.write(b"CIX1\x00\x00\x05\x00\x00\x00part")  # a record's header and part of its body
    again = ContentShard(3, 4, path, stamps.part(CRAWL_A, "content-000"))
    _index(again, range(40, 60))
    again.close()
    assert ContentShard(3, 4, path, stamps.part(CRAWL_A, "content-000")).stats()["exact_entries"] == 60


def _index(shard: ContentShard, ids) -> None:
    from crawler.content.index import ContentIndexGroup

    group = ContentIndexGroup(3, 4, 1)
    plan, reqs = group.plan([(f"http://a.test/{i}", hashlib.sha256(str(i).encode()).hexdigest(), None) for i in ids])
    group.resolve(plan, [shard.call(reqs[0])])
    for req in group.pending_requests():  # the additions ride on the next batch: send them now
        if req is not None:
            shard.call(req)


# -- budget.json ----------------------------------------------------------------------


@pytest.mark.parametrize("damage", [b"{not json", b"\xff\xfe", b"[1, 2]", b'{"granted": "lots"}', b'{"granted": -3}', b""])
def test_a_damaged_budget_is_rebuilt_from_the_pages_the_rows_show_spent(tmp_path, damage):
    path = tmp_path / "budget.json"
    path.write_bytes(damage)
    pool = BudgetPool(100, str(path), identity=stamps.part(CRAWL_A, "budget"), spent=lambda: 37)
    assert pool.granted == 37 and pool.rebuilt.startswith("damaged")
    assert pool.lease(100) == 63 and pool.lease(1) == 0  # max_pages holds across the rebuild
    assert json.loads(path.read_text()) == {"granted": 100, stamps.STAMP_KEY: stamps.part(CRAWL_A, "budget")}


def test_another_crawls_budget_is_rebuilt_a_missing_one_too_and_an_old_one_is_kept_and_stamped(tmp_path):
    path = tmp_path / "budget.json"
    path.write_text(json.dumps({"granted": 5, stamps.STAMP_KEY: stamps.part(CRAWL_B, "budget")}))
    pool = BudgetPool(100, str(path), identity=stamps.part(CRAWL_A, "budget"), spent=lambda: 12)
    assert pool.granted == 12 and CRAWL_B in pool.rebuilt
    path.unlink()
    assert BudgetPool(100, str(path), identity=stamps.part(CRAWL_A, "budget"), spent=lambda: 9).granted == 9
    path.write_text(json.dumps({"granted": 44}))  # made before stamps
    assert BudgetPool(100, str(path), identity=stamps.part(CRAWL_A, "budget"), spent=lambda: 0).granted == 44
    assert json.loads(path.read_text())[stamps.STAMP_KEY] == stamps.part(CRAWL_A, "budget")


def test_a_damaged_budget_with_no_rows_to_count_is_one_line_and_an_unlimited_crawl_never_reads_it(tmp_path):
    path = tmp_path / "budget.json"
    path.write_bytes(b"garbage")
    with pytest.raises(DamagedStateError) as exc:
        BudgetPool(100, str(path))
    assert "\n" not in str(exc.value) and str(path) in str(exc.value) and "delete it" in str(exc.value)
    assert BudgetPool(None, str(path)).lease(5) == 5


# -- before the run: the driver's check, the CLI -----------------------------------------


def _cfg(tmp_path, **extra):
    return config.from_dict({"seeds": ["http://a.test/"], "output": {"path": str(tmp_path / "out")},
                             "fetch": {"resolve": {"*.test": "127.0.0.1"}}, **extra})


def _other_crawls_state(tmp_path, cfg):
    """A shard store, seen store and content log made by crawl B (the same config, another output)."""
    other = tmp_path / "other"
    other.mkdir()
    FrontierStore(str(other / "shard-000.sqlite")).close()
    store = _frontier(str(other / "shard-000.sqlite"), stamps.part(CRAWL_B, "shard-000"))
    store.add([UrlItem("http://a.test/elsewhere", 1)])
    store.close()
    _seen(str(other / "seen-000.sqlite"), stamps.part(CRAWL_B, "seen-000")).close()
    _content(str(other / "content-000.log"), stamps.part(CRAWL_B, "content-000")).close()
    return other


@pytest.mark.parametrize("name", ["shard-000.sqlite", "seen-000.sqlite", "content-000.log"])
def test_the_drivers_check_refuses_another_crawls_file_before_anything_opens_it(tmp_path, name):
    cfg = _cfg(tmp_path)
    other = _other_crawls_state(tmp_path, cfg)
    state = tmp_path / "out" / "state"
    state.mkdir(parents=True)
    shutil.copy(other / name, state / name)
    before = (state / name).read_bytes()
    with pytest.raises(ForeignStateError) as exc:
        check_local_state(cfg, str(state), ["shard-000"], 1, CRAWL_A)
    assert f"of crawl {CRAWL_B}" in _refusal(exc.value, str(state / name))
    # Read, not written: no other store made, the file as it was (a read-only SQLite
    # connection may leave an empty log and its index beside it).
    assert (state / name).read_bytes() == before
    assert {n for n in os.listdir(state) if os.path.getsize(state / n)} == {name}


def test_crawl_run_on_an_output_holding_another_crawls_store_exits_2_with_one_line(tmp_path, capsys):
    from jobs import cli

    cfg = _cfg(tmp_path)
    prepare(cfg, 1, 1)  # an unfinished crawl of this config in OUT
    other = _other_crawls_state(tmp_path, cfg)
    shutil.copy(other / "shard-000.sqlite", tmp_path / "out" / "state" / "shard-000.sqlite")
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text(json.dumps({"seeds": ["http://a.test/"], "output": {"path": str(tmp_path / "out")},
                                    "fetch": {"resolve": {"*.test": "127.0.0.1"}}}))
    code = cli.main(["run", str(cfg_file), "--local", "--no-progress"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2
    assert len(err) == 1 and err[0].startswith("error: ") and "shard-000.sqlite belongs to shard-000 of crawl" in err[0]
    assert "another output folder" in err[0]


def test_the_session_refuses_before_its_runtime_starts(tmp_path):
    """Ray's runtime starts actors that would open the stores: the refusal comes first."""
    from crawler.session.crawlsession import CrawlSession

    class Runtime:
        started = False

        def default_shards(self, cfg):
            return 1, 1

        async def start(self, plan):
            Runtime.started = True

        async def heartbeat(self):
            return None

        async def close(self):
            return None

    cfg = _cfg(tmp_path)
    prepare(cfg, 1, 1)
    other = _other_crawls_state(tmp_path, cfg)
    shutil.copy(other / "seen-000.sqlite", tmp_path / "out" / "state" / "seen-000.sqlite")
    with pytest.raises(ForeignStateError):
        asyncio.run(CrawlSession(cfg, Runtime()).run())
    assert not Runtime.started


@pytest.mark.parametrize("name, says", [
    ("shard-000.sqlite", "is not a readable frontier store"),
    ("seen-000.sqlite", "is not a readable seen store"),
    ("content-000.log", "is not a content index log"),
    ("shard-000.events.sqlite", "is not a readable event log"),
])
def test_a_state_file_that_is_not_what_its_name_says_is_one_line_naming_it_and_the_fix(tmp_path, name, says):
    cfg = _cfg(tmp_path, events={"sink": "file"})
    state = tmp_path / "out" / "state"
    state.mkdir(parents=True)
    (state / name).write_bytes(b"this is no store of any kind, only some bytes" * 100)
    with pytest.raises(DamagedStateError) as exc:
        check_local_state(cfg, str(state), ["shard-000"], 1, CRAWL_A)
    msg = _refusal(exc.value, str(state / name))
    assert says in msg and ("remove it" in msg or "put this crawl's own copy back" in msg)
