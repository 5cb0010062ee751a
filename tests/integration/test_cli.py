"""The command line: bad seeds fail fast, stats summarize, Ctrl-C stops cleanly, demo runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import pyarrow.parquet as pq
import pytest
import yaml

from crawler.output import read_pages
from crawler.testing.fixtures import crawl_config_for
from jobs import cli

from tests.integration import checks


def _env(**extra):
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


# Runs a module as ``python -m`` does, then reports what the run left of Ray in the process.
_RAY_PROBE = textwrap.dedent(
    """
    import json, runpy, sys
    module, sys.argv = sys.argv[1], sys.argv[1:]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exc.code
    ray = sys.modules.get("ray")
    print(json.dumps({"ray_imported": ray is not None, "ray_initialized": bool(ray and ray.is_initialized())}))
    sys.exit(code)
    """
)


def test_malformed_seed_exits_nonzero_with_one_line_and_starts_no_ray(tmp_path):
    cfgfile = tmp_path / "bad.yaml"
    cfgfile.write_text(yaml.safe_dump({"seeds": ["http://ok.test/", "htp:/broken seed"]}))
    runs = {"cli": ["jobs.cli", "run", str(cfgfile)], "cli-local": ["jobs.cli", "run", str(cfgfile), "--local"],
            "job": ["jobs.crawl", str(cfgfile)]}
    for name, args in runs.items():
        # No RAY_ADDRESS, so a Ray this run started would be a new local one, and an empty
        # RAY_TMPDIR of its own, where that Ray would leave its session directory.
        ray_tmp = tmp_path / f"ray-{name}"
        ray_tmp.mkdir()
        env = _env(RAY_TMPDIR=str(ray_tmp))
        env.pop("RAY_ADDRESS", None)
        proc = subprocess.run([sys.executable, "-c", _RAY_PROBE, *args, "--no-progress"],
                              capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 2, (name, proc.stderr)
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: ") and "htp:/broken seed" in lines[0], proc.stderr
        report = json.loads(proc.stdout.strip().splitlines()[-1])
        # A config that cannot run fails before Ray is even imported (importing it costs seconds).
        assert report == {"ray_imported": False, "ray_initialized": False}, (name, report)
        assert not list(ray_tmp.iterdir()), (name, "a Ray session was created", list(ray_tmp.iterdir()))


def test_unknown_config_key_fails_with_the_key(tmp_path, capsys):
    cfgfile = tmp_path / "bad.yaml"
    cfgfile.write_text("seeds: [http://a.test/]\nlimits: {max_pagez: 3}\n")
    assert cli.main(["run", str(cfgfile), "--local"]) == 2
    assert "limits.max_pagez" in capsys.readouterr().err


def test_local_run_then_stats(web, tmp_path, capsys):
    cfgfile = tmp_path / "c.yaml"
    out = tmp_path / "out"
    cfgfile.write_text(yaml.safe_dump(crawl_config_for(web)))
    assert cli.main(["run", str(cfgfile), "--local", "--out", str(out), "--no-progress"]) == 0
    summary = capsys.readouterr().out
    assert "crawl finished" in summary and "pages fetched" in summary
    assert cli.main(["stats", str(out), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["by_outcome"]["fetched"] >= len(web.web.must_fetch()) - 10
    assert stats["by_outcome"]["robots_blocked"] > 0
    assert stats["run"]["finished"] is True
    assert stats["top_hosts"]


@pytest.mark.parametrize("entry", ["crawl run", "python -m jobs.crawl"])
def test_a_crawl_that_ran_its_duration_exits_0(web, tmp_path, capsys, entry):
    """Row "ran its duration" of the exit table: a continuous crawl that stopped at
    ``recrawl.duration_s`` did what it was told (not finished: it resumes its schedule)."""
    from jobs import crawl as crawl_job

    cfgfile = tmp_path / "c.yaml"
    out = tmp_path / "out"
    cfgfile.write_text(yaml.safe_dump(crawl_config_for(web, output={"path": str(out)})))
    argv = [str(cfgfile), "--local", "--no-progress", "--set", "recrawl.enabled=true", "--set", "recrawl.duration_s=2"]
    assert (cli.main(["run", *argv]) if entry == "crawl run" else crawl_job.main(argv)) == 0
    assert "crawl ran its duration" in capsys.readouterr().out
    stats = json.loads((out / "stats.json").read_text())
    assert stats["finished"] is False and stats["ended"] == "duration"
    checks.check_ledger(stats)


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["ctrl-c", "sigterm"])
def test_a_signal_stops_cleanly_and_output_stays_readable(web, tmp_path, sig, code):
    """Ctrl-C, and SIGTERM (``kill``, ``ray job stop``): rows flushed, stats written, the
    state resumable, a non-zero exit."""
    cfgfile = tmp_path / "c.yaml"
    out = tmp_path / "out"
    # Slow enough that the crawl is still running when we interrupt it.
    cfgfile.write_text(yaml.safe_dump(crawl_config_for(
        web, politeness={"interval_s": 0.5, "max_interval_s": 2.0}, runtime={"shards": 2},
        output={"path": str(out), "row_flush_interval_s": 0.5},
    )))
    ray_tmp = tempfile.mkdtemp(prefix="rayc-", dir="/tmp")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobs.cli", "run", str(cfgfile), "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(RAY_TMPDIR=ray_tmp),
    )
    try:
        deadline = time.monotonic() + 120
        while len(web.requests()) < 40 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(sig)
        t0 = time.monotonic()
        stdout, stderr = proc.communicate(timeout=30)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert took < 15, f"exit took {took:.1f}s"
    assert proc.returncode == code, stderr
    assert "crawl stopped" in stdout
    n_requests = len(web.requests())
    # What was fetched before the stop is stored and readable; every Parquet file is whole.
    for f in (out / "pages").glob("*.parquet"):
        pq.read_table(f)
    rows = read_pages(str(out))
    assert rows.num_rows > 0
    stats = json.loads((out / "stats.json").read_text())
    assert stats["finished"] is False
    checks.check_ledger(stats)
    time.sleep(1.0)
    assert len(web.requests()) == n_requests  # nothing kept crawling after exit
    assert json.loads((out / "state" / "crawl.json").read_text())["finished"] is False
    if sig == signal.SIGTERM:  # resumable: the next run picks up where this one stopped
        again = subprocess.run(
            [sys.executable, "-m", "jobs.cli", "run", str(cfgfile), "--no-progress", "--local"],
            capture_output=True, text=True, timeout=240, env=_env(),
        )
        assert again.returncode == 0 and "resuming the unfinished crawl" in again.stderr, again.stderr[-2000:]
        checks.check_ledger(json.loads((out / "stats.json").read_text()))


def test_demo_runs_and_prints_its_summary(ray_cluster, tmp_path, capsys):
    out = tmp_path / "demo"
    assert cli.main(["demo", "--out", str(out), "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert "crawl finished" in captured.out
    stats = json.loads((out / "stats.json").read_text())
    assert stats["finished"] is True
    checks.check_ledger(stats)
    assert stats["outcomes"]["fetched"] > 2500
    assert stats["outcomes"]["robots_blocked"] > 0 and stats["duplicates"]["exact"] > 0 and stats["duplicates"]["near"] > 0
    assert read_pages(str(out)).num_rows == sum(stats["outcomes"].values())
