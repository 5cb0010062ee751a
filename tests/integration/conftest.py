"""Integration tier: one local Ray cluster per test session, bound to loopback, quiet
(actors.quietray: nothing sent off the machine, docs/invariants.md #18).

Never ``ray stop`` (it kills every Ray on the machine): the fixture shuts down what it started.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from actors import quietray
from crawler.testing.s3 import S3_ENV, start_loopback_s3


@pytest.fixture(scope="session")
def ray_cluster():
    os.environ.update(quietray.QUIET_ENV)  # the tests send nothing, whatever the shell set
    import ray

    # A short private temp dir: Ray's socket paths must stay under the UNIX path limit.
    temp_dir = tempfile.mkdtemp(prefix="rayt-", dir="/tmp")
    with quietray.quiet_head():
        ray.init(**quietray.INIT_KWARGS, num_cpus=4, _temp_dir=temp_dir, log_to_driver=False, configure_logging=False)
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
