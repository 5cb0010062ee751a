"""The verdict follows the ledger (DESIGN invariant 13), on the in-process runtime.

A delivery lost on its way (the owner acknowledged it and does not hold it: the damage a
truncated log or a store copied in leaves behind) must fail the run that finds it: exit 1,
the URL named in stats.json and in the summary, the crawl not marked finished; the next
run fetches it and finishes with exit 0. A seen set restarted from an older copy (it
forgot marks) loses nothing and keeps the ledger balanced. Judged from the server's log.
"""

from __future__ import annotations

import asyncio
import json

import yaml

from crawler.config import settings as config
from crawler.output import read_pages
from crawler.session.inprocess import LocalRuntime, local_session
from crawler.testing.fixtures import crawl_config_for
from jobs import cli
from jobs import crawl as crawl_job

from tests.integration import checks


def _write_config(web, tmp_path, **extra):
    path = tmp_path / "crawl.yaml"
    path.write_text(yaml.safe_dump(crawl_config_for(web, output={"path": str(tmp_path / "out")},
                                                    runtime={"shards": 2, "seen_shards": 2}, **extra)))
    return path


def _requests_for(web, url):
    return [r for r in web.requests() if web.web.url(r.host, r.path_qs) == url]


def test_a_lost_delivery_fails_the_run_and_the_next_run_fetches_it(web, tmp_path, monkeypatch, capsys):
    cfgfile = _write_config(web, tmp_path)
    out = tmp_path / "out"
    lost: list[str] = []
    deliver = LocalRuntime.deliver

    async def lossy(self, shard_id, items):
        # The owner acknowledges one URL it never keeps; its seen mark stays.
        if not lost:
            victim = next((i for i in items if i.depth >= 2), None)
            if victim is not None:
                lost.append(victim.url)
                items = [i for i in items if i is not victim]
        return await deliver(self, shard_id, items)

    monkeypatch.setattr(LocalRuntime, "deliver", lossy)
    assert cli.main(["run", str(cfgfile), "--local", "--no-progress"]) == 1
    summary = capsys.readouterr().out
    assert lost and not _requests_for(web, lost[0])
    stats = json.loads((out / "stats.json").read_text())
    led = stats["ledger"]
    assert stats["finished"] is False and stats["unfinished_reason"] == "lost_urls"
    assert led["balanced"] is False and led["missing"]["count"] == 1 and led["missing"]["sample"] == lost
    assert led["marks"]["lost"] == 1 and led["marks"]["requeued"] == 1
    assert "LEDGER DOES NOT BALANCE" in summary and f"missing: 1 URLs, e.g. {lost[0]}" in summary
    assert "crawl ended unfinished (lost URLs were queued again" in summary
    assert json.loads((out / "state" / "crawl.json").read_text())["finished"] is False

    monkeypatch.setattr(LocalRuntime, "deliver", deliver)
    assert crawl_job.main([str(cfgfile), "--local", "--no-progress"]) == 0  # `python -m jobs.crawl`, as ray job submit runs it
    captured = capsys.readouterr()
    assert "resuming the unfinished crawl" in captured.err and "crawl finished" in captured.out
    stats = json.loads((out / "stats.json").read_text())
    assert stats["finished"] is True
    checks.check_ledger(stats)
    assert stats["ledger"]["marks"]["checked"] is True and stats["ledger"]["marks"]["lost"] == 0
    assert lost[0] in set(read_pages(str(out)).column("url").to_pylist())
    assert json.loads((out / "state" / "crawl.json").read_text())["finished"] is True
    # Every page once; the lost one at least once (queued again while the first run's
    # shards still ran, it may have been in flight at their stop, and fetched again).
    counts = checks.requests_by_url(web)
    assert all(counts.get(u, 0) == 1 for u in web.web.must_fetch() if u != lost[0])
    assert 1 <= counts[lost[0]] <= 2

    # Row "already finished" of the exit table: nothing to do, exit 0.
    assert cli.main(["run", str(cfgfile), "--local", "--no-progress"]) == 0
    assert "already finished" in capsys.readouterr().err
    assert crawl_job.main([str(cfgfile), "--local", "--no-progress"]) == 0


def test_a_seen_set_restored_from_an_older_copy_loses_nothing(web, tmp_path):
    cfg = config.from_dict(crawl_config_for(web, output={"path": str(tmp_path / "out")},
                                            runtime={"shards": 2, "seen_shards": 2}))
    state = tmp_path / "out" / "state"

    def run_until(fetched: int | None):
        session = local_session(cfg)

        def progress(total):
            if fetched is not None and total.counters.fetched >= fetched:
                session.request_stop()

        session.on_progress = progress
        return asyncio.run(session.run())

    first = run_until(40)
    assert first["finished"] is False
    copies = {p.name: p.read_bytes() for p in state.glob("seen-*.sqlite")}
    second = run_until(first["outcomes"]["fetched"] + 60)
    assert second["finished"] is False and second["seen"]["novel"] > first["seen"]["novel"]
    for name, data in copies.items():  # the older copy comes back: the marks since are forgotten
        (state / name).write_bytes(data)
        (state / f"{name}.bloom").unlink(missing_ok=True)
    stats = run_until(None)
    assert stats["finished"] is True
    checks.check_ledger(stats)
    marks = stats["ledger"]["marks"]
    assert marks["checked"] and marks["lost"] == 0 and marks["unmarked"] > 0  # held, the mark forgotten: harmless
    assert stats["ledger"]["seen_novel"] < stats["ledger"]["admitted"]
    # Nothing lost (pages in flight at the two stops may have been fetched twice).
    counts = checks.requests_by_url(web)
    assert not [u for u in web.web.must_fetch() if not counts.get(u)]
