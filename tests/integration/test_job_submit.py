"""`ray job submit` as a user runs it (README "On a cluster"), against a Ray head this test
starts on loopback: the job is uploaded with `--working-dir .`, runs `python -m jobs.crawl`,
and succeeds; its output passes every ground-truth check, its logs show the crawl's
progress, and the uploaded package holds no .git, environment or output.

The head gets its own temp dir and free ports (nothing shared with another Ray on the
machine) and is stopped by the PIDs of its processes, never `ray stop`.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from actors import quietray
from crawler.config import settings as config
from crawler.testing.fixtures import crawl_config_for

from tests.integration import checks
from tests.integration.procs import free_ports, ray_node_pids, stop_pids

ROOT = Path(__file__).resolve().parents[2]
RAY = [sys.executable, "-m", "ray.scripts.scripts"]  # the `ray` command of this interpreter


# Ray 2.60 protects a cluster with a token; the head and every client of this test use
# their own (never the machine's ~/.ray/auth_token).
TOKEN = secrets.token_hex(32)


def _env() -> dict[str, str]:
    env = quietray.quiet_env(PYTHONUNBUFFERED="1", RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=TOKEN)
    for k in ("RAY_ADDRESS", "RAY_AUTH_TOKEN_PATH"):
        env.pop(k, None)
    return env


@pytest.fixture
def ray_head():
    """A head on 127.0.0.1 with a dashboard (the jobs API); yields its dashboard URL. Its
    HOME holds an empty ray_bootstrap_config.yaml, so the dashboard asks no cloud for
    metadata (actors.quietray.dashboard_home); the token is in the environment."""
    temp_dir = tempfile.mkdtemp(prefix="rayj-", dir="/tmp")
    gcs, dashboard, client, agent = free_ports(4)
    cmd = [*RAY, "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(gcs),
           "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dashboard), "--include-dashboard", "true",
           "--ray-client-server-port", str(client), "--dashboard-agent-listen-port", str(agent),
           "--temp-dir", temp_dir, "--num-cpus", "4", "--disable-usage-stats"]
    try:
        head_env = {**_env(), **quietray.dashboard_home(os.path.join(temp_dir, "home"))}
        started = subprocess.run(cmd, capture_output=True, text=True, env=head_env, timeout=180, start_new_session=True)
        assert started.returncode == 0, started.stderr[-3000:]
        yield f"http://127.0.0.1:{dashboard}", temp_dir
    finally:
        pids = ray_node_pids(temp_dir)
        stop_pids(pids)
        assert not pids, f"head processes still alive: {sorted(pids)}"


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _ray(address: str, *args: str, timeout: float = 60) -> str:
    """`ray job ARGS --address ADDRESS`: its output, colours removed."""
    proc = subprocess.run([*RAY, "job", *args, "--address", address], capture_output=True, text=True,
                          env=_env(), cwd=ROOT, timeout=timeout)
    return _ANSI.sub("", proc.stdout + proc.stderr)


def test_ray_job_submit_runs_the_crawl_on_a_head(ray_head, web, tmp_path):
    address, temp_dir = ray_head
    out = tmp_path / "out"
    cfgfile = tmp_path / "crawl.yaml"
    # Slow enough (about 10 s) that the job prints progress lines between start and end.
    cfgfile.write_text(yaml.safe_dump(crawl_config_for(web, politeness={"interval_s": 0.3}, runtime={"shards": 2})))
    job_id = f"raycrawl-test-{os.getpid()}-{int(time.time())}"
    # What the README says, with this head's address.
    submit = subprocess.run(
        [*RAY, "job", "submit", "--address", address, "--submission-id", job_id, "--working-dir", ".", "--",
         "python", "-m", "jobs.crawl", str(cfgfile), "--out", str(out)],
        capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=600,
    )
    status = _ray(address, "status", job_id)
    assert re.search(rf"Status for job '{job_id}': SUCCEEDED|Job '{job_id}' succeeded", status), (
        status, submit.stdout[-3000:], submit.stderr[-3000:])
    assert submit.returncode == 0, submit.stderr[-3000:]

    logs = _ray(address, "logs", job_id)
    progress = [int(m) for m in re.findall(r"\] fetched (\d+) \(", logs)]
    assert any(n > 0 for n in progress), f"no progress line with pages fetched in the job logs:\n{logs[-3000:]}"
    assert "crawl finished in" in logs and "ledger: admitted" in logs and ": OK" in logs

    stats = json.loads((out / "stats.json").read_text())
    assert stats["finished"] is True
    checks.check_ledger(stats)
    cfg = config.from_dict({**yaml.safe_load(cfgfile.read_text()), "output": {"path": str(out)}})
    checks.check_all(web, cfg)

    # The package Ray unpacked for the job: the project, without what .gitignore and
    # .rayignore leave out.
    pkgs = [p for p in Path(temp_dir).glob("session_*/runtime_resources/working_dir_files/*") if p.is_dir()]
    assert pkgs, "no working_dir package found on the head"
    names = {p.relative_to(pkgs[0]).parts[0] for p in pkgs[0].rglob("*")}
    assert {"crawler", "actors", "jobs", "configs", "pyproject.toml"} <= names
    assert not names & {".git", ".venv", "venv", "crawl-demo-out", "crawl-out", "out"}, names
    size = sum(p.stat().st_size for p in pkgs[0].rglob("*") if p.is_file())
    assert size < 10 * 2**20, f"the uploaded package is {size / 2**20:.1f} MB"
