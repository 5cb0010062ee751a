"""The test kit serves the same bytes for the same seed and profile, release after release.

Every end-to-end test, the demo and the benchmarks judge a crawl against the synthetic
web; if a refactoring of ``crawler.testing`` changed one byte of a page, a link
spelling or a ground-truth answer, old results and new ones would stop being
comparable without anyone noticing. So the digests below were taken from the kit as it
was, and a change to them must be deliberate (and say so in its commit).

Pinned per host (test profile: every reply a crawler can get there, and the ground
truth about each URL), over a sample of the demo and bench profiles, and for the
hostile server: the raw bytes each behaviour writes for one request.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import defaultdict
from types import SimpleNamespace
from typing import Any, Awaitable, Callable

import pytest

from crawler.testing.hostile import BEHAVIOURS, Conn, HostileServer
from crawler.testing.web import SyntheticWeb

# --------------------------------------------------------------------- synthetic web


def _reply_digest(web: SyntheticWeb, host: str, path_qs: str, h: Any) -> None:
    """Feed every reply a crawler can get for one URL (both attempts, gzip or not)."""
    for attempt in (1, 2):
        for gz in (False, True):
            r = web.reply(host, path_qs, attempt=attempt, accept_gzip=gz)
            h.update(repr((r.status, r.headers, r.delay, r.chunk_size, len(r.body))).encode())
            h.update(r.body)


def _split(web: SyntheticWeb, url: str) -> tuple[str, str]:
    """(host, path_qs) of a URL of the web (every one parses)."""
    parts = web.split(url)
    assert parts is not None, url
    return parts


def _host_digests(web: SyntheticWeb) -> dict[str, str]:
    """Host -> digest of its robots.txt, its reachable pages' replies and their ground truth."""
    urls: dict[str, list[str]] = defaultdict(list)
    reachable = web.must_fetch() | set(web.failure_urls()) | web.robots_blocked_urls()
    for url in reachable:
        urls[_split(web, url)[0]].append(url)
    out = {}
    for host in web.hosts():
        h = hashlib.sha256()
        _reply_digest(web, host, "/robots.txt", h)
        for url in sorted(urls[host]):
            path_qs = _split(web, url)[1]
            h.update(repr((url, web.depth(url), web.expected_outcome(url), web.expected_requests(url),
                           web.must_not_fetch(url))).encode())
            _reply_digest(web, host, path_qs, h)
        out[host] = h.hexdigest()[:16]
    return out


TEST_PROFILE_SEED0 = {
    "h0000.web.test": "0b0a74afed964ab5",
    "h0001.web.test": "7bd21722710bbb37",
    "h0002.web.test": "71e1699d7ee36e18",
    "h0003.web.test": "d1db4caf6d8345a8",  # links the chrome hosts (added after the split)
    "h0004.web.test": "5ce52d64cbfabfad",  # links the chrome hosts (added after the split)
    "h0005.web.test": "83e06b14d4cffed9",
    "h0006.web.test": "b76255e87f30cfde",
    "h0007.web.test": "a8c5e3a171efaa22",
    "h0008.web.test": "a87c150aeaaa0122",
    "h0009.web.test": "4a88ac5834c964a4",
    "h0010.web.test": "5f9824d607c8ec30",
    "h0011.web.test": "650646cd8c3a7767",
    "robots-private.web.test": "ada524e42bc955f7",
    "robots-agent.web.test": "e1504c23120ed9f9",
    "robots-otherbot.web.test": "7698de8d35d3bfa8",
    "robots-delay.web.test": "b2fc02a3f0f7c57f",
    "robots-404.web.test": "09ab87930c52c54c",
    "robots-500.web.test": "55fd870f583eaf1f",
    "robots-redirect.web.test": "39b6078588a4bd46",
    "retry-503-once.web.test": "5fb5bd7ed31317bf",
    "retry-503-always.web.test": "54e835e41ab20e06",
    "retry-429-once.web.test": "d0dab5bb7312adf5",
    "stall.web.test": "1c0d2af73e6f501b",
    "status-4xx.web.test": "8f8fbce852cf0b18",
    "redirect.web.test": "02f45d21d8455321",
    "redirect-dest.web.test": "7f7f743e71a1d4c7",
    "trap-calendar.web.test": "ddd70e466f5a69aa",
    "trap-loop.web.test": "14ffa806501e8ed6",
    "trap-session.web.test": "f95ca075651c0c89",
    "trap-facets.web.test": "d31efe1672467cfb",
    "trap-deep.web.test": "2f2e337f56109ed4",
    "mirror.web.test": "7dfcdd6e2e85008b",
    "near-dup.web.test": "f60ca5e6747df01e",
    "binary.web.test": "f5cb8a86a5b20d50",
    "oversized.web.test": "79777ce4f9c8617a",
    "meta-nofollow.web.test": "7e03128986cd6af7",
    "rel-nofollow.web.test": "b01a21f552d40d91",
    "malformed.web.test": "e79d84cb7649648d",
    "cp1251.web.test": "5c06bf9ccb657be2",
    "gzip.web.test": "cf5a3db1c346da88",
    "chrome-origin.web.test": "5f2e5b1c91139a01",
    "chrome-syndicate.web.test": "7710780a6614f86e",
}


def test_test_profile_serves_pinned_bytes_and_ground_truth() -> None:
    web = SyntheticWeb(seed=0, profile="test")
    web.bind(8080)
    got = _host_digests(web)
    changed = sorted(h for h in set(got) | set(TEST_PROFILE_SEED0) if got.get(h) != TEST_PROFILE_SEED0.get(h))
    assert not changed, f"hosts whose bytes or ground truth changed: {changed}"


def _sample_digest(web: SyntheticWeb, hosts: list[int]) -> str:
    h = hashlib.sha256()
    for i in hosts:
        host = web.normal_host(i)
        k = 0
        while web.page(host, f"/p/{k}" if k else "/") is not None:
            _reply_digest(web, host, f"/p/{k}" if k else "/", h)
            k += 1
    return h.hexdigest()[:16]


@pytest.mark.parametrize(("profile", "seed", "hosts", "pinned"), [
    ("test", 7, [0, 1, 5], "20539f7370ccd837"),
    ("demo", 0, [100, 101, 299], "a25115311c0aef2e"),
    ("bench", 3, [0, 1234], "d718e2f9388ebefe"),
])
def test_normal_hosts_of_each_profile_serve_pinned_bytes(profile: str, seed: int, hosts: list[int], pinned: str) -> None:
    web = SyntheticWeb(seed=seed, profile=profile)
    web.bind(4321)
    assert _sample_digest(web, hosts) == pinned


def test_ground_truth_summary_is_pinned() -> None:
    web = SyntheticWeb(seed=0, profile="test")
    web.bind(8080)
    summary = (web.required_depth(), web.max_pages_on_host(), sorted(web.trap_hosts().items()),
               web.mirror_pairs(), [sorted(g) for g in web.near_duplicate_groups()], web.robots_delay_hosts(),
               web.seeds())
    assert hashlib.sha256(repr(summary).encode()).hexdigest()[:16] == "3522a08845fbd677"


# -------------------------------------------------------------------- hostile server


class _Writer:
    """Just enough of an asyncio StreamWriter to capture what a behaviour writes."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.transport = SimpleNamespace(abort=lambda: None, is_closing=lambda: False)

    def write(self, data: bytes) -> None:
        self.data += data

    async def drain(self) -> None:
        return None

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name: str) -> None:
        return None


class _Reader:
    async def read(self, n: int) -> bytes:
        return b""  # the client has gone: pauses and waits end at once


async def _play(behaviour: Callable[[Conn], Awaitable[None]], conn: Conn) -> None:
    await behaviour(conn)  # asyncio.run takes a coroutine, a behaviour returns an awaitable


def _behaviour_bytes(name: str, path: str) -> bytes:
    # Small settings so the endless, oversized, bomb and big-robots behaviours end fast.
    server = HostileServer(max_body_bytes=1000, endless_cap_bytes=200_000, robots_bytes=700_000,
                           bomb_bytes=3 << 20, redirect_chain=3, normal_pages=4)
    server.port = 5555
    writer = _Writer()
    conn = Conn(server, _Reader(), writer, "GET", path, f"{name}.hostile.test")  # type: ignore[arg-type]
    try:
        asyncio.run(_play(BEHAVIOURS[name], conn))
    except Exception:  # noqa: BLE001 - slowloris and reset end by "client gone"
        writer.data += b"<raised>"
    return bytes(writer.data)


HOSTILE = {
    "bad_chunked": "63a2c9a2e18a0e7e",
    "bad_status": "20719ad467243397",
    "bigrobots": "c0c9187ae85324b3",
    "bomb": "edbc80ed02d5b432",
    "broken_gzip": "8ffc3603aab01978",
    "endless": "1713449ee7717d67",
    "huge_headers": "2cad9098aa1a9b5b",
    "lying_length": "99ba2633a8bafa5f",
    "normal": "bef9e60a915af329",
    "oversized": "009761f904c309b6",
    "redirects": "cfce2a02fe2a4dee",
    "reset": "a5f9d2b8c94b4d0d",
    "secret": "c3cc28c723b66864",
    "silent": "e3b0c44298fc1c14",
    "slowloris": "82aa215dad29117b",
    "ssrf": "9ba00a5eb36dde19",
    "traversal": "566a212022579f81",
}


@pytest.mark.parametrize("name", sorted(BEHAVIOURS))
def test_hostile_behaviours_write_pinned_bytes(name: str) -> None:
    path = "/robots.txt" if name == "bigrobots" else "/go/1" if name == "ssrf" else "/"
    got = hashlib.sha256(_behaviour_bytes(name, path)).hexdigest()[:16]
    assert got == HOSTILE.get(name), name
