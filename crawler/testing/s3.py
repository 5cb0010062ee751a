"""A loopback S3 for the s3fs path (moto's server), shared by tests and benchmarks.

Credentials are fake and instance metadata is off (:data:`S3_ENV`), so nothing reaches
AWS: every request goes to 127.0.0.1.
"""

from __future__ import annotations

import os
from typing import Any

#: Environment for processes that talk to the loopback S3 (add AWS_ENDPOINT_URL).
S3_ENV = {
    "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
}


def start_loopback_s3(bucket: str) -> tuple[Any, str]:
    """Start moto's S3 server on 127.0.0.1 (any free port) with ``bucket`` created.
    Returns (server, endpoint URL); the caller stops it with ``server.stop()``."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    create_bucket(endpoint, bucket)
    return server, endpoint


def create_bucket(endpoint: str, bucket: str) -> None:
    """Create ``bucket`` on the loopback S3 at ``endpoint`` (through s3fs, a dependency of
    the crawler: the tests need no boto3 of their own)."""
    import s3fs

    # No region_name: s3fs sends it as the bucket's LocationConstraint, and S3 (moto too)
    # refuses "us-east-1" there (InvalidLocationConstraint); S3_ENV names the region.
    fs = s3fs.S3FileSystem(key="testing", secret="testing", client_kwargs={"endpoint_url": endpoint})
    try:
        fs.mkdir(bucket)
    except FileExistsError:
        pass  # moto keeps its buckets per process, not per server: a second server has it already
