"""S3 for the output tests: moto's S3 API on 127.0.0.1, and nothing else reachable.

A socket guard fails any connection that is not to loopback, so nothing can reach a real
AWS endpoint.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import uuid

import pytest

from crawler.testing.s3 import create_bucket


@pytest.fixture(scope="module")
def s3_endpoint():
    """A real S3 API on 127.0.0.1; every socket connect outside loopback fails the test."""
    moto_server = pytest.importorskip("moto.server")
    with pytest.MonkeyPatch.context() as mp:
        for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                     "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": "us-east-1",
                     "AWS_EC2_METADATA_DISABLED": "true",
                     "AWS_CONFIG_FILE": os.devnull,
                     "AWS_SHARED_CREDENTIALS_FILE": os.devnull}.items():
            mp.setenv(k, v)
        mp.delenv("AWS_PROFILE", raising=False)
        real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex

        def check(sock, address):
            if sock.family in (socket.AF_INET, socket.AF_INET6):
                if not ipaddress.ip_address(address[0]).is_loopback:
                    raise AssertionError(f"test tried to connect to {address!r}")

        def connect(sock, address):
            check(sock, address)
            return real_connect(sock, address)

        def connect_ex(sock, address):
            check(sock, address)
            return real_connect_ex(sock, address)

        mp.setattr(socket.socket, "connect", connect)
        mp.setattr(socket.socket, "connect_ex", connect_ex)
        server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        try:
            host, port = server.get_host_and_port()
            endpoint = f"http://{host}:{port}"
            mp.setenv("AWS_ENDPOINT_URL", endpoint)  # belt and braces for any stray client
            create_bucket(endpoint, "crawl-test")
            yield endpoint
        finally:
            server.stop()


@pytest.fixture
def s3_out(s3_endpoint, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    opts = {"key": "testing", "secret": "testing", "client_kwargs": {"endpoint_url": s3_endpoint}}
    return f"s3://crawl-test/{uuid.uuid4().hex}", opts
