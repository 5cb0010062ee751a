"""Session fixtures shared by both tiers: the loopback synthetic web."""

from __future__ import annotations

import pytest
from hypothesis import settings

from crawler.testing.server import WebServer
from crawler.testing.web import SyntheticWeb

# Property tests judge results, not speed: on a loaded 2-core machine one example can take
# longer than hypothesis's 200 ms default deadline, which then reports a "flaky" failure.
settings.register_profile("raycrawl", deadline=None)
settings.load_profile("raycrawl")


@pytest.fixture(scope="session")
def web_server():
    """One synthetic web ("test" profile) on 127.0.0.1 for the whole session."""
    server = WebServer(SyntheticWeb(seed=0, profile="test"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def web(web_server):
    """The session web with a fresh request log and fresh 503-once/429-once state."""
    web_server.reset()
    yield web_server
    web_server.reset()
