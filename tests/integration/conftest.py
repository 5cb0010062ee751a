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


@pytest.fixture(scope="session")
def s3_server():
    """moto's S3 API on 127.0.0.1 with a bucket ``crawl-test``; (endpoint, env for children).

    Credentials are fake and instance metadata is off, so nothing reaches AWS.
    """
    moto_server = pytest.importorskip("moto.server")
    boto3 = pytest.importorskip("boto3")
    env = {
        "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    }
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        env["AWS_ENDPOINT_URL"] = endpoint
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                     aws_secret_access_key="testing").create_bucket(Bucket="crawl-test")
        yield endpoint, env
    finally:
        server.stop()
