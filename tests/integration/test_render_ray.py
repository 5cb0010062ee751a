"""Rendering on Ray: render actors own the browsers, shards answer the browsers' requests.

Run as shipped (docs/invariants.md #17): ``crawl run --set render.mode=auto`` with the
README's settings on the embedded Ray of this machine finds every route of the bundled
single-page apps. A render actor killed mid-crawl (Ray restarts it) loses no URL. A
render pool the cluster cannot place costs the rendering, said in one line and in the
summary, never the crawl; shards that cannot be placed stop the start with one line;
Ctrl-C while actors are being placed stops at once.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

import pytest
import yaml

from crawler.config import settings as config
from crawler.errors import PlacementError
from crawler.output import read_pages
from crawler.testing.server import WebServer
from crawler.testing.spaweb import SpaWeb
from crawler.testing.webtypes import USER_AGENT
from jobs.crawl import Crawl, make_session, render_line

from tests.integration import checks, procs
from tests.integration.chromium import NEEDS_CHROMIUM

pytestmark = NEEDS_CHROMIUM

INTERVAL = 0.05


def spa_config(server: WebServer, out, **render) -> config.CrawlConfig:
    return config.from_dict({
        "seeds": server.web.seeds(), "scope": "any", "user_agent": USER_AGENT,
        "politeness": {"interval_s": INTERVAL}, "sitemaps": {"enabled": False},
        "fetch": {"resolve": {"*.test": server.host}, "timeout_s": 5.0},
        "output": {"path": str(out)},
        "runtime": {"shards": 2, "seen_shards": 1, "max_restarts": 3},
        "render": {"mode": "auto", "quiet_s": 0.2, "max_wait_s": 3.0, **render},
    })


def test_render_actors_crawl_the_apps_and_survive_a_kill(ray_cluster, tmp_path):
    import ray

    web = SpaWeb(apps=2, routes=5, plain_pages=4, plain_hosts=1)
    with WebServer(web) as server:
        cfg = spa_config(server, tmp_path / "out")  # actors and cores_per_actor as shipped
        crawl = Crawl(cfg, poll_interval_s=0.05)
        killed: list[str] = []

        def killer() -> None:
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline and not killed:
                if sum(r.path_qs.startswith("/api/") for r in server.requests()) >= 3:
                    for name in ray.util.list_named_actors():
                        if ":render-" in name:
                            ray.kill(ray.get_actor(name), no_restart=False)
                            killed.append(name)
                time.sleep(0.02)

        t = threading.Thread(target=killer, daemon=True)
        t.start()
        crawl.start()
        stats = crawl.wait(timeout_s=180)
        t.join()
        assert killed, "no render actor was killed"
        assert stats["finished"] is True
        checks.check_ledger(stats)
        rows = read_pages(cfg.output.path).to_pylist()
        counts = server.request_counts()
        fetched = {u for u in web.documents() if counts.get(u, 0)}
        assert {r["url"] for r in rows} == fetched and all(counts[u] == 1 for u in fetched)
        assert any(r["rendered"] for r in rows)
        r = stats["render"]
        assert r["started"] == r["rendered"] + sum(r["fallbacks"].values())
        assert r["retried_after_crash"] + r["fallbacks"].get("crash", 0) >= 1
        # The fixture's 4 CPUs, 2 shards of 0.5: one actor of 2 CPUs (half the cluster).
        assert r["pool"] == {"actors": 1, "cpus_each": 2.0, "off": None}
        checks.check_never_requested(server)
        checks.check_politeness(server, cfg)
        assert {x.user_agent for x in server.requests()} == {USER_AGENT}


def _cli(cfgfile, out, ray_tmp, *args: str) -> subprocess.Popen:
    """``crawl run`` on an embedded Ray of its own (no RAY_ADDRESS; its own RAY_TMPDIR)."""
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", RAY_TMPDIR=ray_tmp, PYTHONUNBUFFERED="1")
    env.pop("RAY_ADDRESS", None)
    return subprocess.Popen(
        [sys.executable, "-m", "jobs.cli", "run", str(cfgfile), "--out", str(out), "--no-progress", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True,
    )


def _ray_left(ray_tmp: str, grace_s: float = 10.0) -> set[int]:
    """The embedded Ray's processes still running ``grace_s`` after its driver exited
    (stopped here, by PID, whatever the answer)."""
    deadline = time.monotonic() + grace_s
    while (left := procs.ray_node_pids(ray_tmp)) and time.monotonic() < deadline:
        time.sleep(0.2)
    procs.stop_pids(set(left))
    return left


def test_crawl_run_with_the_readme_settings_finds_every_route_on_the_embedded_ray(tmp_path):
    """The README's "JavaScript pages" command as written: ``--set render.mode=auto`` and
    every other render setting as shipped (actors: auto, cores_per_actor: 2, ...), on an
    embedded Ray with this machine's CPUs (2 on the project's machines and CI)."""
    web = SpaWeb()  # 4 apps of 12 routes: 48 routes, 52 documents that need rendering
    ray_tmp = tempfile.mkdtemp(prefix="rayr-", dir="/tmp")
    with WebServer(web) as server:
        cfgfile = tmp_path / "my-crawl.yaml"
        cfgfile.write_text(yaml.safe_dump({
            "seeds": web.seeds(), "politeness": {"interval_s": INTERVAL},
            "fetch": {"resolve": {"*.test": server.host}},
        }))
        out = tmp_path / "out"
        proc = _cli(cfgfile, out, ray_tmp, "--set", "render.mode=auto")
        try:
            stdout, stderr = proc.communicate(timeout=600)
        finally:
            proc.kill()
            _ray_left(ray_tmp)
        assert proc.returncode == 0, stderr[-2000:]
        cfg = config.load(str(cfgfile), [f"output.path={out}", "render.mode=auto"])
        counts = server.request_counts()
        docs = web.documents()
        # Every app route found (they exist only in what the scripts drew); each document
        # requested exactly once (the browser gets the crawler's response).
        routes = [u for u in docs if "/r/" in u]
        assert len(routes) == 48 and not [u for u in routes if counts.get(u, 0) == 0]
        assert {u: counts.get(u, 0) for u in docs if counts.get(u, 0) != 1} == {}
        checks.check_never_requested(server)
        checks.check_politeness(server, cfg)
        stats = json.loads((out / "stats.json").read_text())
        assert stats["finished"] is True
        checks.check_ledger(stats)
        pool = stats["render"]["pool"]
        assert pool["actors"] >= 1 and pool["off"] is None
        assert re.search(rf"^render: {pool['actors']} render actors? of {pool['cpus_each']:g} CPU; rendered \d+",
                         stdout, re.M), stdout


class _Hold:
    """Holds CPUs of the fixture's cluster, as another job would."""

    def __init__(self, ray, cpus: float) -> None:
        self.ray = ray
        self.actor = ray.remote(num_cpus=cpus)(type("Hold", (), {"ping": lambda self: 1})).remote()
        ray.get(self.actor.ping.remote(), timeout=120)

    def __enter__(self) -> "_Hold":
        return self

    def __exit__(self, *exc) -> None:
        self.ray.kill(self.actor)


def test_a_render_pool_that_cannot_be_placed_costs_the_rendering_not_the_crawl(ray_cluster, tmp_path):
    web = SpaWeb(apps=1, routes=3, plain_pages=2, plain_hosts=1)
    with WebServer(web) as server, _Hold(ray_cluster, 3):
        # 1 CPU free: the 2 shards fit it, one actor of 2 CPUs (3 are left of the 4 once
        # the shards have theirs: the settings fit the cluster) cannot be placed.
        cfg = spa_config(server, tmp_path / "out", actors=1, cores_per_actor=2)
        started = time.monotonic()
        stats = asyncio.run(make_session(cfg).run())
    assert stats["finished"] is True
    checks.check_ledger(stats)
    r = stats["render"]
    assert r["pool"]["actors"] == 0 and r["pool"]["off"].startswith("render: 1 render actor of 2 CPU could not be")
    # Every page that wanted rendering was stored raw, and counted.
    rows = read_pages(cfg.output.path).to_pylist()
    wanted = [x for x in rows if "render: unavailable, raw page stored" in (x["error"] or "")]
    assert wanted and r["fallbacks"] == {"unavailable": len(wanted)} and r["rendered"] == 0
    assert not any(x["rendered"] for x in rows)
    assert "could not be placed" in render_line(r) and f"{len(wanted)} pages that wanted rendering" in render_line(r)
    assert time.monotonic() - started < 120  # the crawl went on; it did not wait for the pool


def test_shards_that_cannot_be_placed_stop_the_start_with_one_line(ray_cluster, tmp_path):
    web = SpaWeb(apps=1, routes=2, plain_pages=1, plain_hosts=1)
    with WebServer(web) as server, _Hold(ray_cluster, 3.5):
        cfg = spa_config(server, tmp_path / "out")
        with pytest.raises(PlacementError) as err:
            asyncio.run(make_session(cfg).run())
        assert not server.requests()
    msg = str(err.value)
    assert msg.startswith("runtime.shards: 1 of 2 shards (0.5 CPU each) still wait for CPU") and "\n" not in msg
    deadline = time.monotonic() + 30  # every actor the start made is killed (names go when they die)
    while [n for n in ray_cluster.util.list_named_actors() if n.startswith("raycrawl-")]:
        assert time.monotonic() < deadline, ray_cluster.util.list_named_actors()
        time.sleep(0.2)


def test_ctrl_c_while_actors_are_being_placed_stops_crawl_run_at_once(tmp_path):
    """Shards of regions no node is labelled with wait in placement (then the start fails,
    exit 2); one Ctrl-C meanwhile ends the run at once, with its embedded Ray."""
    web = SpaWeb(apps=1, routes=2, plain_pages=1, plain_hosts=1)
    ray_tmp = tempfile.mkdtemp(prefix="rayr-", dir="/tmp")
    with WebServer(web) as server:
        cfgfile = tmp_path / "regions.yaml"
        cfgfile.write_text(yaml.safe_dump({
            "seeds": web.seeds(), "fetch": {"resolve": {"*.test": server.host}},
            "runtime": {"regions": ["eu", "us"]}, "render": {"mode": "auto"},
        }))
        out = tmp_path / "out"
        proc = _cli(cfgfile, out, ray_tmp)
        try:
            while not (out / "state" / "lease.json").exists():  # Ray is up, the start begun
                assert proc.poll() is None, proc.communicate()
                time.sleep(0.05)
            time.sleep(1.0)  # into the placement wait (its verdict takes 5 s or more)
            proc.send_signal(signal.SIGINT)
            sent = time.monotonic()
            stdout, stderr = proc.communicate(timeout=120)
            took = time.monotonic() - sent
        finally:
            proc.kill()
            left = _ray_left(ray_tmp)
        assert proc.returncode == 130, stderr[-2000:]
        assert "stopping: the crawl was still starting; nothing was fetched" in stderr and "error:" not in stderr
        assert "crawl stopped while starting" in stdout
        assert not left, f"Ray processes still running after the run: {sorted(left)}"
        assert not server.requests()
        assert took < 30, f"{took:.1f}s from Ctrl-C to exit"
