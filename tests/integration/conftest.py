"""Integration tier: one local Ray cluster per test session, bound to loopback, quiet.

Never ``ray stop`` (it kills every Ray on the machine): the fixture shuts down what it started.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest


@pytest.fixture(scope="session")
def ray_cluster():
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # else agents bind to the machine's address
    import ray

    # A short private temp dir: Ray's socket paths must stay under the UNIX path limit.
    temp_dir = tempfile.mkdtemp(prefix="rayt-", dir="/tmp")
    ray.init(
        _node_ip_address="127.0.0.1",
        num_cpus=4,
        include_dashboard=False,
        _temp_dir=temp_dir,
        log_to_driver=False,
        configure_logging=False,
    )
    try:
        yield ray
    finally:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)
