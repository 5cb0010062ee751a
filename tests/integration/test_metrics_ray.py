"""Crawler metrics on Ray's Prometheus endpoint: a Ray head of this test (its own ports and
temp dir, loopback) with a metrics export port, a crawl driven through ``python -m
jobs.crawl --address`` and steered through its control API (whose address the driver
prints, as it would to a job log), and the scraped ``crawler_`` families equal the
crawl's own stats. Ray exports with a delay: the test polls."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from urllib.parse import quote
from urllib.request import urlopen

import pytest
from prometheus_client.parser import text_string_to_metric_families

from actors import quietray
from crawler.testing.fixtures import crawl_config_for
from jobs.ctl import request

from tests.integration.procs import _kill_leftovers

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "metrics-test"
PAUSED = "h0003.web.test"  # keeps the crawl alive (and its actors exporting) while we scrape


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _env(temp_dir: str) -> dict[str, str]:
    return quietray.quiet_env(
        # A throwaway loopback cluster: no token file shared with other clusters on the machine.
        RAY_AUTH_MODE="disabled",
        RAY_metrics_report_interval_ms="1000",
        RAY_TMPDIR=temp_dir,
        PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
        PYTHONUNBUFFERED="1",
    )


def _stop_group(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM the process group we started, SIGKILL it after ``grace_s``."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=grace_s)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=10)


@pytest.fixture
def ray_head():
    """``ray start --head --block`` on 127.0.0.1 with a metrics export port; stopped by PID.
    Started through actors.quietray, so it sends nothing off the machine."""
    temp_dir = tempfile.mkdtemp(prefix="raym-", dir="/tmp")  # short: Ray's socket paths
    gcs, metrics, agent, agent_grpc, rt_env, client, nm, om, dash = _free_ports(9)
    cmd = [
        sys.executable, "-m", "actors.quietray", "start", "--head", "--block", "--node-ip-address", "127.0.0.1",
        "--port", str(gcs), "--metrics-export-port", str(metrics), "--temp-dir", temp_dir, "--num-cpus", "4",
        "--include-dashboard", "false", "--dashboard-port", str(dash), "--dashboard-agent-listen-port", str(agent),
        "--dashboard-agent-grpc-port", str(agent_grpc), "--runtime-env-agent-port", str(rt_env),
        "--ray-client-server-port", str(client), "--node-manager-port", str(nm), "--object-manager-port", str(om),
    ]
    log = open(os.path.join(temp_dir, "head.log"), "w")
    head = subprocess.Popen(cmd, env=_env(temp_dir), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=2):
                    break
            except OSError:
                assert head.poll() is None, Path(temp_dir, "head.log").read_text()[-3000:]
                assert time.monotonic() < deadline, "the Ray head did not start"
                time.sleep(0.5)
        yield f"127.0.0.1:{gcs}", metrics, temp_dir
    finally:
        _stop_group(head, grace_s=15)
        _kill_leftovers(temp_dir)  # workers the raylet started in sessions of their own
        log.close()
        shutil.rmtree(temp_dir, ignore_errors=True)


def scrape(port: int) -> dict[str, dict[tuple, float]]:
    """Prometheus text -> {sample name: {frozen crawler labels: value summed over workers}}."""
    text = urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out: dict[str, dict[tuple, float]] = defaultdict(lambda: defaultdict(float))
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if re.match(r"(ray_)?crawler_", s.name):
                labels = tuple(sorted((k, v) for k, v in s.labels.items() if k in ("outcome", "kind", "state", "route", "code", "le")))
                out[re.sub(r"^ray_", "", s.name)][labels] += s.value
    return out


def total(m: dict, name: str, **labels: str) -> float:
    want = set(labels.items())
    return sum(v for k, v in m.get(name, {}).items() if want <= set(k))


def test_crawler_families_on_prometheus_match_the_crawl(web, tmp_path, ray_head):
    address, metrics_port, temp_dir = ray_head
    out = tmp_path / "out"
    cfgfile = tmp_path / "crawl.json"
    cfgfile.write_text(json.dumps(crawl_config_for(
        web, output={"path": str(out)}, runtime={"shards": 2, "seen_shards": 2},
        api={"enabled": True, "port": 0, "token": TOKEN}, events={"sink": "file"},
    )))
    stderr_path = tmp_path / "driver.err"
    with open(stderr_path, "w") as err:
        driver = subprocess.Popen(
            [sys.executable, "-m", "jobs.crawl", str(cfgfile), "--address", address, "--no-progress"],
            cwd=ROOT, env=_env(temp_dir), stdout=subprocess.DEVNULL, stderr=err, start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 60
        while not (found := re.search(r"control API: (http://\S+)", stderr_path.read_text())):
            assert driver.poll() is None, stderr_path.read_text()[-3000:]
            assert time.monotonic() < deadline, "the driver printed no API address"
            time.sleep(0.1)
        api = found.group(1)
        deadline = time.monotonic() + 120
        while (code := request(api, "PUT", f"/hosts/{PAUSED}/policy", {"paused": True}, TOKEN)[0]) == 503:
            assert time.monotonic() < deadline, "the crawl did not start"
            time.sleep(0.1)
        assert code == 204

        def settled() -> bool:
            s = request(api, "GET", "/stats", token=TOKEN)[1]
            return s["paused"]["urls"] > 0 and s["in_flight"] == 0 and s["queued_unfetched"] == s["paused"]["urls"]

        deadline = time.monotonic() + 120
        while not settled():
            assert time.monotonic() < deadline, f"the crawl did not settle: {request(api, 'GET', '/stats', token=TOKEN)}"
            time.sleep(0.2)
        stats = request(api, "GET", "/stats", token=TOKEN)[1]
        # The hostname-wide pause reached the owning actor; per-URL lookups ask the actors.
        host = request(api, "GET", f"/hosts/{PAUSED}", token=TOKEN)[1]
        assert host["hostname_policy"]["paused"] and [k["queued"] > 0 for k in host["keys"]] == [True]
        root = request(api, "GET", "/urls?url=" + quote(web.url("h0000.web.test", "/"), safe=""), token=TOKEN)[1]
        assert root["status"] == "fetched" and request(api, "GET", f"/urls/{root['url_hash']}", token=TOKEN)[1] == root

        def matches(m: dict) -> list[str]:
            c = stats["outcomes"]
            checks = {f"pages {o}": (total(m, "crawler_pages_total", outcome=o), c[o]) for o in c}
            checks.update({
                "bytes": (total(m, "crawler_bytes_total"), stats["bytes"]),
                "requests": (total(m, "crawler_requests_total"), stats["requests"]),
                "latency count": (total(m, "crawler_fetch_latency_seconds_count"), stats["requests"]),
                "dup exact": (total(m, "crawler_duplicates_total", kind="exact"), stats["duplicates"]["exact"]),
                "dup near": (total(m, "crawler_duplicates_total", kind="near"), stats["duplicates"]["near"]),
                "queued": (total(m, "crawler_queued_urls"), stats["queued_unfetched"]),
                "paused hosts": (total(m, "crawler_hosts", state="paused"), 1),
                "events emitted": (total(m, "crawler_events_emitted_total"), stats["events"]["emitted"]),
                "events pending": (total(m, "crawler_events_pending"), 0),
                "seen checks": (total(m, "crawler_seen_checks_total"), stats["seen"]["checks"]),
                "seen false positives": (total(m, "crawler_seen_false_positives_total"), stats["seen"]["false_positives"]),
            })
            return [f"{k}: {got} != {want}" for k, (got, want) in checks.items() if got != want]

        deadline = time.monotonic() + 60
        # Fresh stats each round: the last rows (and their events) become durable a moment
        # after the fetches settle; both sides converge once they have.
        while problems := matches(m := scrape(metrics_port)):
            stats = request(api, "GET", "/stats", token=TOKEN)[1]
            assert time.monotonic() < deadline, f"metrics never matched the crawl's stats: {problems}"
            time.sleep(1.0)
        assert stats["outcomes"]["fetched"] > 50 and stats["events"]["emitted"] > 50
        assert total(m, "crawler_politeness_wait_seconds_total") > 0
        assert total(m, "crawler_fetch_latency_seconds_bucket", le="+Inf") == stats["requests"]
        assert total(m, "crawler_hosts", state="active") >= 1
        deadline = time.monotonic() + 30
        while total(scrape(metrics_port), "crawler_api_requests_total", route="/stats", code="200") == 0:
            assert time.monotonic() < deadline, "API requests were not counted"
            time.sleep(1.0)
        assert not any("host" in dict(k) for series in m.values() for k in series)  # bounded labels

        assert request(api, "POST", "/stop", {}, TOKEN)[0] == 202
        assert driver.wait(timeout=120) == 0  # a stop the operator asked for is a clean exit (not finished)
    finally:
        _stop_group(driver, grace_s=20)
    final = json.loads((out / "stats.json").read_text())
    assert final["finished"] is False and final["outcomes"] == stats["outcomes"]
