"""Integration tier: one local Ray cluster per test session, bound to loopback, quiet.

Never ``ray stop`` (it kills every Ray on the machine): the fixture shuts down what it started.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from crawler.testing.s3 import S3_ENV, start_loopback_s3


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


@pytest.fixture(scope="session")
def s3_server():
    """moto's S3 API on 127.0.0.1 with a bucket ``crawl-test``; (endpoint, env for children).

    Credentials are fake and instance metadata is off, so nothing reaches AWS.
    """
    pytest.importorskip("moto.server")
    server, endpoint = start_loopback_s3("crawl-test")
    try:
        yield endpoint, {**S3_ENV, "AWS_ENDPOINT_URL": endpoint}
    finally:
        server.stop()
