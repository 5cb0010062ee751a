"""The node's source address (issue 21): which local address outgoing connections use.

``crawler.fetch.fetcher.source_address`` picks it (``$RAYCRAWL_SOURCE_ADDRESS`` over
``fetch.source_address``); ``build_fetcher`` binds the fetcher's connections to it. The
evidence is the peer address a real loopback server sees: Linux routes all of 127/8 to
``lo``, so a client bound to 127.0.0.2 or 127.0.0.3 reaches a server on 127.0.0.1 from
that address.
"""

from __future__ import annotations

import pytest
from aiohttp import web

from crawler.config import settings as config
from crawler.errors import ConfigError
from crawler.fetch.fetcher import SOURCE_ADDRESS_ENV, source_address
from crawler.engine.partbuilders import build_fetcher
from crawler.testing.fakes import FakeResolver
from tests.unit.http_kit import loopback_site


def _cfg(addr: str | None = None, **fetch: object):
    return config.from_dict({"fetch": {"source_address": addr, "resolve": {"site.test": "127.0.0.1"}, **fetch}})


@pytest.mark.parametrize(
    "configured, env, expected",
    [
        (None, {}, None),  # the system chooses (today's behaviour)
        ("127.0.0.2", {}, "127.0.0.2"),
        (None, {SOURCE_ADDRESS_ENV: "127.0.0.3"}, "127.0.0.3"),
        ("127.0.0.2", {SOURCE_ADDRESS_ENV: "127.0.0.3"}, "127.0.0.3"),  # the node's own address wins
        ("127.0.0.2", {SOURCE_ADDRESS_ENV: ""}, "127.0.0.2"),  # set but empty: not set
        ("127.0.0.2", {SOURCE_ADDRESS_ENV: " 10.0.0.5 "}, "10.0.0.5"),
        (None, {SOURCE_ADDRESS_ENV: "::1"}, "::1"),
        (None, {SOURCE_ADDRESS_ENV: "0:0:0:0:0:0:0:1"}, "::1"),  # normalized
    ],
)
def test_the_environment_wins_over_the_config(configured, env, expected):
    assert source_address(_cfg(configured), env) == expected


def test_a_bad_address_in_the_environment_fails_naming_the_variable():
    with pytest.raises(ConfigError) as exc:
        source_address(_cfg("127.0.0.2"), {SOURCE_ADDRESS_ENV: "eu-west"})
    assert str(exc.value).startswith(f"{SOURCE_ADDRESS_ENV}: expected a local IP address") and "'eu-west'" in str(exc.value)


@pytest.fixture
async def peer_site():
    """A server on 127.0.0.1 that answers each request with the client's address."""
    async def who(request: web.Request) -> web.Response:
        return web.Response(text=request.remote or "")

    async with loopback_site({"/who": who}) as port:
        yield port


async def _peer_seen(cfg, port: int) -> str:
    fetcher = build_fetcher(cfg, base_resolver=FakeResolver())
    try:
        r = await fetcher.fetch(f"http://site.test:{port}/who")
    finally:
        await fetcher.close()
    assert r.status == 200, r.error
    return r.body.decode()


@pytest.mark.parametrize("addr", ["127.0.0.2", "127.0.0.3"])
async def test_the_server_sees_the_configured_source_address(peer_site, monkeypatch, addr):
    monkeypatch.delenv(SOURCE_ADDRESS_ENV, raising=False)
    assert await _peer_seen(_cfg(addr), peer_site) == addr


async def test_the_environment_variable_read_when_the_fetcher_is_built_wins(peer_site, monkeypatch):
    monkeypatch.setenv(SOURCE_ADDRESS_ENV, "127.0.0.3")
    assert await _peer_seen(_cfg("127.0.0.2"), peer_site) == "127.0.0.3"
    monkeypatch.delenv(SOURCE_ADDRESS_ENV)
    assert await _peer_seen(_cfg(None), peer_site) == "127.0.0.1"  # unset: the system's choice


async def test_the_address_guard_still_refuses_with_a_source_address(peer_site, monkeypatch):
    # The guard judges the remote address; binding the local one must not open a way round
    # it: a name that DNS (not fetch.resolve) sends to loopback, and an IP literal, are refused.
    monkeypatch.delenv(SOURCE_ADDRESS_ENV, raising=False)
    fetcher = build_fetcher(_cfg("127.0.0.2"), base_resolver=FakeResolver({"evil.example": ["127.0.0.1"]}))
    try:
        by_name = await fetcher.fetch(f"http://evil.example:{peer_site}/who")
        literal = await fetcher.fetch(f"http://127.0.0.1:{peer_site}/who")
    finally:
        await fetcher.close()
    for r in (by_name, literal):
        assert r.status is None and r.error_kind == "guard" and not r.transient, r.error
        assert r.error.startswith("refused by address guard")


async def test_a_source_address_this_machine_does_not_have_fails_the_fetch_not_the_crawler(peer_site, monkeypatch):
    # 192.0.2.1 (TEST-NET-1, RFC 5737) is no address of this machine: bind() fails, which is
    # a connect error of that URL (retried like any), not a crash.
    monkeypatch.delenv(SOURCE_ADDRESS_ENV, raising=False)
    fetcher = build_fetcher(_cfg("192.0.2.1"), base_resolver=FakeResolver())
    try:
        r = await fetcher.fetch(f"http://site.test:{peer_site}/who")
    finally:
        await fetcher.close()
    assert r.status is None and r.error_kind == "connect" and r.transient, (r.error_kind, r.error)
