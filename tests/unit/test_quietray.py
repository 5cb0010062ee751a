"""actors.quietray keeps a Ray head quiet (docs/invariants.md #18), checked against the Ray
code it relies on: the seams it uses exist and do what it says, without starting Ray.
What a whole crawl sends is measured by tests/integration/test_no_egress.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from actors import quietray

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_ray_env(monkeypatch):
    """None of QUIET_ENV's keys set, and whatever the test sets removed afterwards
    (setenv first, so that monkeypatch restores each key's absence)."""
    for key in quietray.QUIET_ENV:
        monkeypatch.setenv(key, "")
        monkeypatch.delenv(key)
    return monkeypatch


def test_the_environment_of_a_child_is_quiet_whatever_the_shell_set():
    env = quietray.quiet_env({"RAY_USAGE_STATS_ENABLED": "1", "PATH": "/bin"}, RAY_AUTH_MODE="disabled")
    assert env == {**quietray.QUIET_ENV, "PATH": "/bin", "RAY_AUTH_MODE": "disabled"}


def test_the_embedded_runtime_is_quiet_by_default(no_ray_env):
    quietray.use_quiet_env()
    assert {k: os.environ[k] for k in quietray.QUIET_ENV} == quietray.QUIET_ENV


def test_the_embedded_runtime_keeps_a_users_opt_in_to_rays_usage_stats(no_ray_env):
    # A user who opted in gets them, sent where Ray sends them.
    no_ray_env.setenv("RAY_USAGE_STATS_ENABLED", "1")
    quietray.use_quiet_env()
    assert os.environ["RAY_USAGE_STATS_ENABLED"] == "1" and "RAY_USAGE_STATS_REPORT_URL" not in os.environ


def test_the_report_address_is_one_requests_refuses_before_any_socket(monkeypatch):
    import requests

    def no_socket(*args, **kwargs):
        raise AssertionError("a socket was opened")

    monkeypatch.setattr("socket.socket.connect", no_socket)
    monkeypatch.setattr("socket.create_connection", no_socket)
    with pytest.raises(requests.exceptions.InvalidSchema):
        requests.request("POST", quietray.QUIET_ENV["RAY_USAGE_STATS_REPORT_URL"], json={}, timeout=1)


def test_a_bootstrap_config_in_home_stops_rays_metadata_probe(tmp_path, monkeypatch):
    from ray._common.usage import usage_lib

    def probe():
        raise AssertionError("Ray asked the cloud metadata service")

    env = quietray.dashboard_home(tmp_path / "home")
    monkeypatch.setattr(usage_lib, "get_cloud_from_metadata_requests", probe)
    monkeypatch.setenv("HOME", env["HOME"])
    # What UsageStatsHead.run() calls first (ray/dashboard/modules/usage_stats/usage_stats_head.py).
    usage_lib.get_cluster_config_to_report(str(Path("~/ray_bootstrap_config.yaml").expanduser()))
    with pytest.raises(AssertionError, match="metadata"):  # and without it, Ray probes
        usage_lib.get_cluster_config_to_report(str(tmp_path / "absent.yaml"))


def test_a_quiet_head_starts_no_api_server_unless_asked_for_the_dashboard(no_ray_env):
    from ray._private import node, ray_constants, services

    monkeypatch = no_ray_env
    started = []
    def start_api_server(include_dashboard, *args, **kwargs):
        started.append(include_dashboard)
        return "url", "process"

    monkeypatch.setattr(services, "start_api_server", start_api_server)
    real = services.start_api_server
    with quietray.quiet_head():
        # Ray's head calls it through the module, so the swap reaches it.
        assert "ray._private.services.start_api_server(" in Path(node.__file__).read_text()
        assert services.start_api_server(False, False, "127.0.0.1") == (None, None)
        assert services.start_api_server(True, True, "127.0.0.1") == ("url", "process")
        assert services.start_api_server(None, False, "127.0.0.1") == ("url", "process")
        # 127.0.0.1 stays 127.0.0.1 (else Ray swaps in the machine's address).
        assert ray_constants.ENABLE_RAY_CLUSTER is False
        assert services.resolve_ip_for_localhost("127.0.0.1") == "127.0.0.1"
    assert started == [True, None]
    assert services.start_api_server is real


def test_cluster_yaml_turns_usage_stats_off_on_the_head_and_sends_no_notice():
    cfg = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    start = next(c for c in cfg["head_start_ray_commands"] if "ray start" in c)
    before, ray_start = start.split("ray start")
    assert "--disable-usage-stats" in ray_start.split()
    assert f"export RAY_USAGE_STATS_REPORT_URL={quietray.QUIET_ENV['RAY_USAGE_STATS_REPORT_URL']};" in before


def test_a_user_who_opted_in_to_usage_stats_gets_rays_api_server(no_ray_env):
    from ray._private import services

    no_ray_env.setenv("RAY_USAGE_STATS_ENABLED", "1")
    no_ray_env.setattr(services, "start_api_server", lambda *a, **kw: ("url", "process"))
    with quietray.quiet_head():
        assert services.start_api_server(False, False, "127.0.0.1") == ("url", "process")
