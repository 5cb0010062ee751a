"""The control API over a real crawl of the loopback web (in-process runtime): a hostname-wide
pause holds every request to the host at the server, survives a stop and a resume, and an
unpause lets it finish; seeds, URL status, host view, stats and stop through HTTP and
``crawl ctl``; the file sink's events match the rows in OUT."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crawler.config import settings as config
from crawler.output import read_pages
from crawler.testing.fixtures import crawl_config_for
from jobs import cli
from jobs.crawl import Crawl
from jobs.ctl import request

from tests.integration import checks

TOKEN = "integration-token"
PAUSED = "h0003.web.test"  # reached only through links: paused before any of its URLs exists


def _until(cond, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def _ctl(capsys, api: str, *args: str) -> tuple[int, object]:
    capsys.readouterr()
    code = cli.main(["ctl", "--api", api, "--token", TOKEN, *args])
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else None


def _events(out: Path) -> list[dict]:
    return [json.loads(line) for f in sorted((out / "events").glob("*.jsonl")) for line in f.read_text().splitlines()]


def test_control_api_steers_a_crawl_across_a_restart(web, tmp_path, capsys):
    out = tmp_path / "out"
    cfg = config.from_dict(crawl_config_for(
        web, output={"path": str(out)}, runtime={"shards": 2, "seen_shards": 2},
        api={"enabled": True, "port": 0, "token": TOKEN}, events={"sink": "file"},
    ))
    crawl = Crawl(cfg, local=True, poll_interval_s=0.05).start()
    api = crawl.api_url
    try:
        assert request(api, "GET", "/stats")[0] == 401  # no token
        assert request(api, "PUT", f"/hosts/{PAUSED}/policy", {"paused": True}, TOKEN) == (204, None)
        paused_at = time.monotonic()

        def settled() -> bool:
            s = request(api, "GET", "/stats", token=TOKEN)[1]
            return s["paused"]["urls"] > 0 and s["in_flight"] == 0 and s["queued_unfetched"] == s["paused"]["urls"]

        _until(settled)
        live = request(api, "GET", "/stats", token=TOKEN)[1]
        assert live["running"] is True and live["finished"] is False and live["ended"] is None  # not "stopped"
        code, host = _ctl(capsys, api, "host", "show", PAUSED)
        assert code == 0 and host["hostname_policy"]["paused"] is True
        assert [k["key"] for k in host["keys"]] == [web.web.netloc(PAUSED)]
        key = host["keys"][0]
        assert key["queued"] > 0 and key["policy"]["paused"] and key["next_allowed_in_s"] is None

        root = web.url(PAUSED, "/")
        code, status = _ctl(capsys, api, "url", root)
        assert code == 0 and status["status"] == "pending" and status["url"] == root
        assert _ctl(capsys, api, "url", status["url_hash"])[1] == status
        assert request(api, "GET", "/urls/" + "0" * 16, token=TOKEN)[0] == 404

        blocked = web.url("robots-private.web.test", "/private/99")
        trap = web.url("h0000.web.test", "/?a=1&b=2&c=3&d=4&e=5")
        code, seeded = _ctl(capsys, api, "seeds", "add", web.url("h0000.web.test", "/never-linked"),
                            web.url("h0000.web.test", "/"), "ftp://x.test/", blocked, trap)
        assert code == 0
        assert (seeded["accepted"], seeded["already_seen"], seeded["refused"]) == (1, 1, 3)
        reasons = [e["reason"] or e["result"] for e in seeded["urls"]]
        assert reasons[:2] == ["accepted", "already_seen"]
        assert reasons[2].startswith("invalid:") and reasons[3].startswith("robots:") and reasons[4] == "scope: query_params"

        assert _ctl(capsys, api, "stop")[0] == 0
        first = crawl.stop()
    finally:
        if crawl.final is None:
            crawl.stop()
    assert first["finished"] is False
    checks.check_ledger(first)
    assert not [r for r in web.requests() if r.host == PAUSED]

    # The pause is checkpointed: a resumed crawl keeps the host paused until told otherwise.
    crawl = Crawl(cfg, local=True, poll_interval_s=0.05).start()
    api = crawl.api_url
    try:
        assert crawl.mode == "resume"
        _until(settled)
        assert not [r for r in web.requests() if r.host == PAUSED]
        assert request(api, "GET", f"/hosts/{PAUSED}", token=TOKEN)[1]["hostname_policy"]["paused"] is True
        priority_seed = web.url(PAUSED, "/never-linked")
        assert request(api, "POST", "/seeds", {"urls": [priority_seed], "priority": 5}, TOKEN)[1]["accepted"] == 1
        unpaused_at = time.monotonic()
        assert _ctl(capsys, api, "host", "resume", PAUSED)[0] == 0
        stats = crawl.wait(timeout_s=120)
    finally:
        if crawl.final is None:
            crawl.stop()
    assert stats["finished"] is True
    checks.check_ledger(stats)
    checks.check_exactly_once(web, cfg)
    hits = sorted((r for r in web.requests() if r.host == PAUSED), key=lambda r: r.start)
    assert hits and all(paused_at < unpaused_at <= r.start for r in hits)
    # The seed with priority 5 went ahead of the host's queue (after its robots.txt).
    assert [r.path_qs for r in hits[:2]] == ["/robots.txt", "/never-linked"]

    # Every fetched page's row has its page.fetched event, and no event lacks a row.
    rows = read_pages(str(out), dedupe=False).to_pylist()
    pages = {(r["url"], r["fetch_seq"]) for r in rows if r["outcome"] in ("fetched", "not_modified")}
    events = _events(out)
    assert pages and {(e["url"], e["fetch_seq"]) for e in events} == pages
    by_url = {r["url"]: r for r in rows}
    for e in events:
        assert e["event"] == "page.fetched" and e["content_sha256"] == by_url[e["url"]]["content_sha256"]
    assert stats["events"]["emitted"] == len(events) - first["events"]["emitted"]
    assert stats["events"]["pending"] == 0


def test_a_public_bind_without_token_is_refused_before_anything_starts(web, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("CRAWL_API_TOKEN", raising=False)
    cfgfile = tmp_path / "crawl.yaml"
    cfgfile.write_text(json.dumps(crawl_config_for(web, output={"path": str(tmp_path / "out")}, api={"enabled": True, "host": "0.0.0.0"})))
    assert cli.main(["run", str(cfgfile), "--local", "--no-progress"]) == 2
    assert "api.token" in capsys.readouterr().err
    assert not (tmp_path / "out").exists() and not web.requests()


def test_a_stop_through_the_api_is_a_clean_exit_0(web, tmp_path):
    """``crawl run`` stopped by ``POST /stop`` did what the operator asked: exit 0 (a
    failure, or Ctrl-C, is not 0), rows flushed, stats.json written, resumable."""
    out = tmp_path / "out"
    cfgfile = tmp_path / "crawl.yaml"
    cfgfile.write_text(json.dumps(crawl_config_for(
        web, output={"path": str(out)}, politeness={"interval_s": 0.5, "max_interval_s": 2.0},
        api={"enabled": True, "port": 0})))
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "jobs.cli", "run", str(cfgfile), "--local", "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        api = None
        while api is None:
            line = proc.stderr.readline()
            assert line, (proc.poll(), proc.communicate())
            if line.startswith("control API: "):
                api = line.split(": ", 1)[1].strip()
        _until(lambda: request(api, "GET", "/stats")[0] == 200 and len(web.requests()) >= 5)
        assert request(api, "POST", "/stop", {}) == (202, {"stopping": True})
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr[-2000:]
    assert "crawl stopped" in stdout
    stats = json.loads((out / "stats.json").read_text())
    assert stats["finished"] is False
    checks.check_ledger(stats)


@pytest.fixture(autouse=True)
def _no_token_env(monkeypatch):
    monkeypatch.delenv("CRAWL_API_TOKEN", raising=False)
