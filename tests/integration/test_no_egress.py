"""Nothing leaves the machine unless the crawl fetches it (docs/invariants.md #18).

A ``crawl run`` of a small loopback web, on the embedded Ray, in a network namespace of
its own built like a machine on a network (crawler.testing.egress): a network card whose
every outgoing packet is recorded, cloud metadata at 169.254.169.254, Ray's usage-stats
host and GCP's metadata host resolved to a listener, and a name server that records every
name asked. The crawl must call none of them, and listen on loopback only.

The environment is a user's: no RAY_USAGE_STATS_ENABLED or other Ray setting, so what
keeps Ray quiet is the embedded runtime itself (actors.quietray). Namespaces nest, so
this also runs when the whole suite already runs inside ``unshare -n`` (.ci/run).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from crawler.testing import egress

ROOT = Path(__file__).resolve().parents[2]


def _users_environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return env


def test_a_crawl_run_on_the_embedded_ray_sends_nothing_off_the_machine(tmp_path):
    if egress.namespace_prefix() is None:
        pytest.skip("cannot create a network namespace here: needs unshare and ip, and root "
                    "(or unprivileged user namespaces)")
    work = tmp_path / "work"
    work.mkdir()
    cmd = [sys.executable, "-m", "crawler.testing.egress", "--canary", "--timeout", "420", "--",
           sys.executable, "-m", "tests.integration.egress_crawl", str(work)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_users_environment(), cwd=ROOT, timeout=600)
    assert proc.returncode == 0 and proc.stdout.strip(), proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["returncode"] == 0, report["output"]

    # The traps catch what they are there for: one call of each kind, made before the crawl.
    caught = {(c["kind"], c["address"]) for c in report["canary"]}
    expected = {("tcp", egress.METADATA), ("tcp", egress.STAND_IN), ("dns", egress.DNS_TRAP)}
    if report["wire"]:
        expected.add(("wire", egress.CANARY_OUT[0]))
    assert expected <= caught, report["canary"]

    # The crawl ran: pages fetched from the loopback web and a finished run.
    stats = json.loads((work / "out" / "stats.json").read_text())
    assert stats["finished"] is True and stats["outcomes"]["fetched"] > 0, stats

    # ... and sent nothing anywhere else, nor listened where another machine could reach it.
    assert report["contacts"] == [], report["contacts"]
    assert report["listening"] == [], report["listening"]
