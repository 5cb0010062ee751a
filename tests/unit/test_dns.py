"""DnsCache, resolve overrides and the SSRF AddressGuard.

No real DNS query is made here: every DnsCache gets a fake base resolver that answers
from a table and raises OSError for unknown names, and time comes from a MockClock.
"""

from __future__ import annotations

import asyncio
import socket

import pytest

from crawler.clock import MockClock
from crawler.testing.fakes import FakeResolver
from crawler.fetch.addrguard import AddressGuard, AddressRefused, GuardedSocketFactory
from crawler.fetch.dns import DnsCache, DnsLookupError, parse_resolve
from crawler.errors import ConfigError


def make_cache(table=None, resolve=None, guard=True, **kw):
    clock = kw.pop("clock", MockClock(1000.0))
    base = FakeResolver(table)
    cache = DnsCache(
        resolve or {},
        clock=clock,
        base=base,
        guard=AddressGuard(True) if guard else None,
        **kw,
    )
    return cache, base, clock


def ips(results):
    return [r["host"] for r in results]


# ----------------------------------------------------------------------- overrides


def test_resolve_overrides_exact_wildcard_depth_and_priority():
    cache, base, _ = make_cache(
        resolve={
            "*.test": "127.0.0.1",
            "special.test": "127.0.0.2",
            "*.deep.test": "127.0.0.3",
            "Example.COM.": "::1",
        }
    )
    assert cache.override_for("a.test") == "127.0.0.1"
    assert cache.override_for("a.b.c.test") == "127.0.0.1"  # any depth
    assert cache.override_for("special.test") == "127.0.0.2"  # exact wins over wildcard
    assert cache.override_for("x.deep.test") == "127.0.0.3"  # most specific wildcard wins
    assert cache.override_for("test") is None  # "*.test" does not match "test" itself
    assert cache.override_for("EXAMPLE.com.") == "::1"  # case and trailing dot ignored
    assert cache.override_for("notest") is None
    assert cache.override_addresses() == {"127.0.0.1", "127.0.0.2", "127.0.0.3", "::1"}
    assert base.calls == []


async def test_override_answers_without_base_with_requested_port():
    cache, base, _ = make_cache(resolve={"*.test": "127.0.0.1", "v6.example": "::1"})
    res = await cache.resolve("site.test", 8080, socket.AF_UNSPEC)
    assert res == [
        {"hostname": "site.test", "host": "127.0.0.1", "port": 8080, "family": socket.AF_INET, "proto": 0,
         "flags": socket.AI_NUMERICHOST | socket.AI_NUMERICSERV}
    ]
    res6 = await cache.resolve("v6.example", 443, socket.AF_UNSPEC)
    assert ips(res6) == ["::1"] and res6[0]["family"] == socket.AF_INET6 and res6[0]["port"] == 443
    assert base.calls == []  # loopback allowed because the user named it: no guard refusal
    assert cache.stats()["override_hits"] == 2


@pytest.mark.parametrize(
    "resolve, fragment",
    [
        ({"site.test": "not-an-ip"}, "'site.test'"),
        ({"site.test": "127.0.0.256"}, "'site.test'"),
        ({"*.x.test": "1.2.3"}, "'*.x.test'"),
        ({"a.*.test": "127.0.0.1"}, "'a.*.test'"),
        ({"": "127.0.0.1"}, "''"),
        ({"127.0.0.1": "127.0.0.1"}, "allow_networks"),
        ({"site.test": 17}, "'site.test'"),
        ({"host:80": "127.0.0.1"}, "'host:80'"),
    ],
)
def test_bad_resolve_entries_raise_config_error_naming_the_key(resolve, fragment):
    with pytest.raises(ConfigError) as info:
        parse_resolve(resolve)
    assert fragment in str(info.value)
    with pytest.raises(ConfigError):
        DnsCache(resolve, base=FakeResolver())


def test_bad_ttls_raise_config_error():
    with pytest.raises(ConfigError):
        DnsCache({}, ttl_s=-1, base=FakeResolver())
    with pytest.raises(ConfigError):
        DnsCache({}, negative_ttl_s=-5, base=FakeResolver())


# ------------------------------------------------------------------- cache and TTL


async def test_positive_answers_are_cached_until_ttl_expires():
    cache, base, clock = make_cache({"example.com": ["93.184.216.34", "2606:2800:220:1::1"]}, ttl_s=300)
    first = await cache.resolve("example.com", 80, socket.AF_UNSPEC)
    assert ips(first) == ["93.184.216.34", "2606:2800:220:1::1"]
    assert [r["port"] for r in first] == [80, 80]
    clock.advance(299)
    again = await cache.resolve("example.com", 8443, socket.AF_UNSPEC)
    assert ips(again) == ips(first) and again[0]["port"] == 8443  # cached per name, port put back
    assert base.calls == ["example.com"]
    clock.advance(2)  # past the TTL
    await cache.resolve("example.com", 80, socket.AF_UNSPEC)
    assert base.calls == ["example.com", "example.com"]
    stats = cache.stats()
    assert stats["hits"] == 1 and stats["misses"] == 2 and stats["entries"] == 1


async def test_failures_are_negatively_cached_without_asking_base_again():
    cache, base, clock = make_cache({}, negative_ttl_s=60)
    with pytest.raises(DnsLookupError) as first:
        await cache.resolve("nx.example", 80, socket.AF_UNSPEC)
    assert "nx.example" in str(first.value) and "NXDOMAIN" in str(first.value)
    assert isinstance(first.value, OSError)  # so aiohttp wraps it as ClientConnectorDNSError
    for _ in range(5):
        clock.advance(10)
        with pytest.raises(DnsLookupError):
            await cache.resolve("nx.example", 80, socket.AF_UNSPEC)
    assert base.calls == ["nx.example"]  # 50 s of retries: one query
    assert cache.stats()["negative_hits"] == 5
    clock.advance(11)  # 61 s after the failure: ask again, and now it exists
    base.table["nx.example"] = ["93.184.216.34"]
    assert ips(await cache.resolve("nx.example", 80, socket.AF_UNSPEC)) == ["93.184.216.34"]
    assert base.calls == ["nx.example", "nx.example"]


async def test_names_are_case_and_trailing_dot_insensitive_in_cache():
    cache, base, _ = make_cache({"example.com": ["93.184.216.34"]})
    await cache.resolve("Example.COM", 80, socket.AF_UNSPEC)
    await cache.resolve("example.com.", 80, socket.AF_UNSPEC)
    assert base.calls == ["example.com"]


async def test_concurrent_lookups_share_one_query_and_survive_a_cancelled_waiter():
    gate = asyncio.Event()
    base = FakeResolver({"example.com": ["93.184.216.34"]}, gate=gate)
    cache = DnsCache({}, base=base, clock=MockClock(1000.0), guard=AddressGuard())
    tasks = [asyncio.ensure_future(cache.resolve("example.com", 80, socket.AF_UNSPEC)) for _ in range(10)]
    await asyncio.sleep(0)  # let them all reach the in-flight query
    tasks[0].cancel()  # one waiter times out: the others must still get the answer
    await asyncio.sleep(0)
    gate.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(results[0], asyncio.CancelledError)
    assert all(ips(r) == ["93.184.216.34"] for r in results[1:])
    assert base.calls == ["example.com"]
    assert cache.stats()["inflight_joins"] == 9 and cache.stats()["inflight"] == 0


async def test_cache_size_is_bounded():
    table = {f"h{i}.example": ["93.184.216.34"] for i in range(20)}
    cache, base, _ = make_cache(table, max_entries=5)
    for name in table:
        await cache.resolve(name, 80, socket.AF_UNSPEC)
    stats = cache.stats()
    assert stats["entries"] == 5 and stats["evictions"] == 15
    await cache.resolve("h19.example", 80, socket.AF_UNSPEC)  # newest kept
    await cache.resolve("h0.example", 80, socket.AF_UNSPEC)  # oldest evicted: asked again
    assert base.calls.count("h19.example") == 1 and base.calls.count("h0.example") == 2


# ------------------------------------------------------------- guard inside the cache


async def test_cache_refuses_names_resolving_only_to_forbidden_addresses():
    cache, base, clock = make_cache(
        {"meta.example": ["169.254.169.254"], "lan.example": ["10.0.0.5", "192.168.1.1"], "localhost": ["127.0.0.1", "::1"]}
    )
    with pytest.raises(AddressRefused) as info:
        await cache.resolve("meta.example", 80, socket.AF_UNSPEC)
    assert str(info.value) == "refused by address guard: meta.example -> 169.254.169.254 is link-local"
    assert info.value.ip == "169.254.169.254"
    with pytest.raises(AddressRefused):
        await cache.resolve("lan.example", 80, socket.AF_UNSPEC)
    # localhost is a name like any other: refused unless an override names it
    with pytest.raises(AddressRefused, match="loopback"):
        await cache.resolve("localhost", 80, socket.AF_UNSPEC)
    # the refusal is cached with the answer: no new query within the TTL
    with pytest.raises(AddressRefused):
        await cache.resolve("meta.example", 80, socket.AF_UNSPEC)
    assert base.calls == ["meta.example", "lan.example", "localhost"]
    assert cache.stats()["guard_refusals"] == 4


async def test_mixed_answers_keep_only_allowed_addresses():
    # A rebinding-style answer mixing a public and a loopback address: only the public
    # one is ever handed to the connector.
    cache, _, _ = make_cache({"rebind.example": ["127.0.0.1", "93.184.216.34", "::1"]})
    res = await cache.resolve("rebind.example", 80, socket.AF_UNSPEC)
    assert ips(res) == ["93.184.216.34"]
    assert cache.stats()["guard_dropped_addresses"] == 2


async def test_reresolution_after_ttl_is_guarded_again():
    cache, base, clock = make_cache({"flip.example": ["93.184.216.34"]}, ttl_s=5)
    assert ips(await cache.resolve("flip.example", 80, socket.AF_UNSPEC)) == ["93.184.216.34"]
    base.table["flip.example"] = ["127.0.0.1"]  # the attacker rebinds the name
    assert ips(await cache.resolve("flip.example", 80, socket.AF_UNSPEC)) == ["93.184.216.34"]  # cached
    clock.advance(6)
    with pytest.raises(AddressRefused):
        await cache.resolve("flip.example", 80, socket.AF_UNSPEC)


async def test_override_to_loopback_is_allowed_but_same_ip_via_dns_is_not():
    cache, base, _ = make_cache({"other.example": ["127.0.0.1"]}, resolve={"site.test": "127.0.0.1"})
    assert ips(await cache.resolve("site.test", 80, socket.AF_UNSPEC)) == ["127.0.0.1"]
    with pytest.raises(AddressRefused):
        await cache.resolve("other.example", 80, socket.AF_UNSPEC)


async def test_cache_without_guard_returns_everything():
    cache, _, _ = make_cache({"lan.example": ["10.0.0.5"]}, guard=False)
    assert ips(await cache.resolve("lan.example", 80, socket.AF_UNSPEC)) == ["10.0.0.5"]


# ------------------------------------------------------------------- address guard


REFUSED = [
    ("127.0.0.1", "loopback"),
    ("127.8.9.10", "loopback"),
    ("::1", "loopback"),
    ("10.1.2.3", "private"),
    ("172.16.0.1", "private"),
    ("172.31.255.254", "private"),
    ("192.168.0.1", "private"),
    ("100.64.0.1", "shared address space (CGNAT)"),
    ("100.127.255.254", "shared address space (CGNAT)"),
    ("169.254.169.254", "link-local"),
    ("169.254.0.1", "link-local"),
    ("fe80::1", "link-local"),
    ("fe80::1%eth0", "link-local"),
    ("fc00::1", "private"),
    ("fd12:3456:789a::1", "private"),
    ("fec0::1", "site-local"),
    ("224.0.0.1", "multicast"),
    ("239.255.255.250", "multicast"),
    ("ff02::1", "multicast"),
    ("ff0e::1", "multicast"),
    ("0.0.0.0", "unspecified"),
    ("0.1.2.3", "unspecified"),
    ("::", "unspecified"),
    ("240.0.0.1", "reserved"),
    ("255.255.255.255", "reserved"),
    ("192.0.2.1", "private"),  # TEST-NET-1 documentation range
    ("198.18.0.1", "private"),  # benchmarking range
    ("::ffff:127.0.0.1", "loopback (IPv4-mapped)"),
    ("::ffff:169.254.169.254", "link-local (IPv4-mapped)"),
    ("::ffff:10.0.0.1", "private (IPv4-mapped)"),
    ("64:ff9b::a9fe:a9fe", "link-local (NAT64)"),
    ("2002:7f00:1::", "loopback (6to4)"),
    ("::7f00:1", "reserved"),  # deprecated IPv4-compatible ::127.0.0.1
    ("2001:db8::1", "private"),  # documentation
]


@pytest.mark.parametrize("ip, category", REFUSED)
def test_guard_refuses_every_non_public_class(ip, category):
    guard = AddressGuard()
    assert guard.check(ip, via_override=False) == f"{ip} is {category}"
    assert guard.check(ip, via_override=True) is None  # the user named it on purpose
    assert AddressGuard(enabled=False).check(ip, False) is None


@pytest.mark.parametrize(
    "ip", ["8.8.8.8", "93.184.216.34", "1.1.1.1", "2606:4700::1111", "2a00:1450:4001:82b::200e", "::ffff:8.8.8.8", "64:ff9b::808:808"]
)
def test_guard_allows_public_unicast(ip):
    assert AddressGuard().check(ip, False) is None


def test_guard_allow_networks():
    guard = AddressGuard(allow_networks=["10.0.0.0/8", "fd00::/8", "127.0.0.2"])
    assert guard.check("10.200.1.1", False) is None
    assert guard.check("::ffff:10.1.1.1", False) is None  # mapped form of an allowed address
    assert guard.check("fd00::5", False) is None
    assert guard.check("127.0.0.2", False) is None
    assert guard.check("127.0.0.1", False) == "127.0.0.1 is loopback"
    assert guard.check("192.168.1.1", False) == "192.168.1.1 is private"
    assert AddressGuard(allow_networks="10.0.0.0/8").check("10.0.0.1", False) is None


def test_guard_rejects_junk_addresses_and_bad_networks():
    assert AddressGuard().check("not-an-ip", False) == "'not-an-ip' is not an IP address"
    with pytest.raises(ConfigError, match="'10.0.0.0/33'"):
        AddressGuard(allow_networks=["10.0.0.0/33"])
    with pytest.raises(ConfigError, match="'intranet'"):
        AddressGuard(allow_networks=["intranet"])


def test_guarded_socket_factory_checks_the_connect_address():
    factory = GuardedSocketFactory(AddressGuard(), override_ips=["127.0.0.1"])
    info4 = (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("169.254.169.254", 80))
    with pytest.raises(AddressRefused, match="169.254.169.254 is link-local"):
        factory(info4)
    info6 = (socket.AF_INET6, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("::ffff:10.0.0.1", 80, 0, 0))
    with pytest.raises(AddressRefused):
        factory.check(info6)
    factory.check((socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 80)))  # an override target
    factory.check((socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", 80)))
    sock = factory((socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("93.184.216.34", 80)))
    try:  # an unconnected socket: nothing is sent
        assert sock.family == socket.AF_INET
    finally:
        sock.close()
    assert factory.refusals == 2
