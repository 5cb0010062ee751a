"""The control API's HTTP layer on a loopback socket, over a recording stand-in session:
auth, status codes, errors that name the field, nothing half-applied, and the refusal to
serve beyond this machine without a token. (The API over a real crawl: tests/integration/test_api.py.)"""

from __future__ import annotations

import datetime as dt

import aiohttp
import pytest

from crawler.control.api import ControlApi, check_binding, url_view
from crawler.frontier.urlitem import UrlItem
from crawler.frontier.store import FrontierStore
from crawler.output.schema import OutcomeRow
from crawler.frontier.recrawl import Previous, RecrawlPolicy
from crawler.config.settings import ApiConfig
from crawler.errors import ConfigError

TOKEN = "t0ken"
JSON = {"Content-Type": "application/json"}


class FakeSession:
    """Records the session calls the API makes."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.final = None
        self.ready = True
        self.stopping = False
        self.steering = self  # the operator's calls, recorded here too

    def request_stop(self) -> None:
        self.calls.append(("stop",))
        self.stopping = True

    async def add_seeds(self, urls, *, priority=0, strict=True):
        self.calls.append(("seeds", list(urls), priority, strict))
        return {"accepted": len(urls), "already_seen": 0, "refused": 0, "urls": []}

    async def set_host_policy(self, host, **policy):
        from crawler.policy.hostpolicy import parse_host

        self.calls.append(("policy", parse_host(host).spec(), policy))
        return host

    async def host_info(self, host):
        return {"host": host, "keys": []}

    async def url_status(self, url):
        return {"url": url, "url_hash": "00" * 8, "status": "queued", "depth": 0} if url.endswith("/known") else None

    async def url_status_by_hash(self, h):
        return None

    async def live_stats(self):
        return {"outcomes": {"fetched": 3}}


@pytest.fixture
async def api():
    session = FakeSession()
    seen: list[tuple[str, int]] = []
    server = ControlApi(session, ApiConfig(enabled=True, port=0, token=TOKEN), on_request=lambda r, s: seen.append((r, s)))
    await server.start()
    async with aiohttp.ClientSession(server.url, headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        yield server, session, http, seen
    await server.close()


async def call(http, method, path, **kw):
    async with http.request(method, path, **kw) as r:
        return r.status, (await r.json() if r.content_type == "application/json" else None)


async def test_requests_without_the_token_are_refused(api):
    server, session, _, _ = api
    async with aiohttp.ClientSession(server.url) as anon:
        for method, path in (("GET", "/stats"), ("POST", "/stop"), ("PUT", "/hosts/a.test/policy")):
            async with anon.request(method, path, json={"paused": True}) as r:
                assert r.status == 401 and r.headers["WWW-Authenticate"].startswith("Bearer")
        async with anon.get("/stats", headers={"Authorization": "Bearer wrong"}) as r:
            assert r.status == 401
    assert session.calls == []


@pytest.mark.parametrize(
    "method, path, body, field",
    [
        ("POST", "/seeds", b"{not json", "body"),
        ("POST", "/seeds", b"[1]", "body"),
        ("POST", "/seeds", {"urls": []}, "urls"),
        ("POST", "/seeds", {"urls": ["http://a.test/", 7]}, "urls"),
        ("POST", "/seeds", {"urls": ["http://a.test/"], "priority": "high"}, "priority"),
        ("POST", "/seeds", {"urls": ["http://a.test/"], "colour": 1}, "colour"),
        ("PUT", "/hosts/a.test/policy", {"max_rps": 2, "paused": "no"}, "paused"),
        ("PUT", "/hosts/a.test/policy", {"max_rps": -1}, "max_rps"),
        ("PUT", "/hosts/a.test/policy", {"max_pages": 1.5}, "max_pages"),
        ("PUT", "/hosts/a.test/policy", {}, "body"),
        ("PUT", "/hosts/a.test/policy", {"region": 5}, "region"),
        ("PUT", "/hosts/a.test/policy", {"region": ""}, "region"),
        ("PUT", "/hosts/a.test:99999/policy", {"paused": True}, "host"),
        ("GET", "/urls/xyz", None, "url_hash"),
        ("GET", "/urls", None, "url"),
    ],
)
async def test_bad_input_is_a_400_naming_the_field_and_changes_nothing(api, method, path, body, field):
    _, session, http, _ = api
    kw = {"data": body, "headers": JSON} if isinstance(body, bytes) else {"json": body} if body is not None else {}
    status, answer = await call(http, method, path, **kw)
    assert status == 400 and answer["field"] == field, answer
    assert session.calls == []


async def test_each_endpoint_calls_its_session_method(api):
    _, session, http, seen = api
    assert await call(http, "POST", "/seeds", json={"urls": ["http://a.test/"], "priority": 2}) == (
        202, {"accepted": 1, "already_seen": 0, "refused": 0, "urls": []})
    assert (await call(http, "PUT", "/hosts/A.test:8080/policy", json={"max_rps": 0.5, "max_pages": 10}))[0] == 204
    assert (await call(http, "GET", "/hosts/a.test"))[0] == 200
    status, view = await call(http, "GET", "/urls", params={"url": "http://a.test/known"})
    assert status == 200 and view["status"] == "queued" and view["last_crawled_at"] is None and view["depth"] == 0
    assert (await call(http, "GET", "/urls", params={"url": "http://a.test/other"}))[0] == 404
    assert (await call(http, "GET", "/urls/00112233445566ff"))[0] == 404
    assert await call(http, "GET", "/stats") == (200, {"outcomes": {"fetched": 3}})
    assert (await call(http, "GET", "/nowhere"))[0] == 404
    assert await call(http, "POST", "/stop", json={}) == (202, {"stopping": True})
    assert (await call(http, "PUT", "/hosts/a.test/policy", json={"paused": True}))[0] == 409  # stopping
    assert session.calls == [
        ("seeds", ["http://a.test/"], 2, False),
        ("policy", "a.test:8080", {"max_rps": 0.5, "max_pages": 10}),
        ("stop",),
    ]
    routes = {r for r, _ in seen}
    assert {"/seeds", "/hosts/{host}/policy", "/urls/{url_hash}", "/stats", "/stop"} <= routes
    assert all("a.test" not in r for r in routes)  # bounded labels: the template, not the host


def test_url_view_answers_every_field_from_what_the_store_records(tmp_path):
    st = FrontierStore(str(tmp_path / "s.sqlite"))
    url = "http://a.test/p"
    st.add([UrlItem(url, 1)])
    pending = url_view(st.url_status(url))
    assert list(pending)[:8] == ["url", "url_hash", "status", "last_crawled_at", "next_crawl_at", "content_hash", "fetches", "last_outcome"]
    assert (pending["status"], pending["fetches"], pending["content_hash"], pending["depth"]) == ("pending", 0, None, 1)
    row = OutcomeRow(url=url, outcome="fetched", status=200, content_sha256="cd" * 32, simhash=7,
                     fetched_at=dt.datetime.fromtimestamp(1000.0, dt.timezone.utc))
    policy = RecrawlPolicy(min_interval_s=60, max_interval_s=86400, initial_interval_s=3600, grow_factor=2, shrink_factor=0.5)
    st.record([(row, policy.after_fetch(Previous(), 1000.0, 200, "cd" * 32, 7))])
    view = url_view(st.url_status(url))
    # A field the store names differently would read null here: the view and the store agree.
    assert view["content_hash"] == "cd" * 32 and view["fetches"] == 1 and view["last_outcome"] == "fetched"
    assert view["last_crawled_at"] == 1000.0 and view["next_crawl_at"] > 1000.0


@pytest.mark.parametrize("host, token, ok", [("127.0.0.1", None, True), ("::1", None, True), ("localhost", None, True),
                                             ("0.0.0.0", None, False), ("10.1.2.3", None, False), ("0.0.0.0", "x", True)])
def test_serving_beyond_loopback_needs_a_token(host, token, ok, monkeypatch):
    monkeypatch.delenv("CRAWL_API_TOKEN", raising=False)
    if ok:
        check_binding(ApiConfig(host=host), token)
    else:
        with pytest.raises(ConfigError, match="api.token"):
            ControlApi(FakeSession(), ApiConfig(enabled=True, host=host, token=token))


def test_token_from_the_environment(monkeypatch):
    monkeypatch.setenv("CRAWL_API_TOKEN", "from-env")
    assert ControlApi(FakeSession(), ApiConfig(enabled=True, host="0.0.0.0")).token == "from-env"


async def test_503_until_the_shards_run(api):
    _, session, http, _ = api
    session.ready = False
    assert (await call(http, "GET", "/stats"))[0] == 503
    assert (await call(http, "PUT", "/hosts/a.test/policy", json={"paused": True}))[0] == 503
    assert (await call(http, "PUT", "/hosts/a b/policy", json={"paused": True}))[0] == 400  # bad input first
    assert session.calls == []


# -- issue 24: a hostile web page, a careless operator -----------------------------------------

HOST_SPECS = ["*", "*.test", "-bad-.example", "a.test:0"]


@pytest.mark.parametrize(
    "method, path, body, field",
    [
        # every endpoint's bad input, one row each at least (the table above has the rest)
        ("POST", "/stop", {"now": True}, "now"),
        ("POST", "/stop", b"[]", "body"),
        pytest.param("POST", "/seeds", b"[" * 100_000 + b"]" * 100_000, "body", id="nested-100000"),  # RecursionError before
        pytest.param("POST", "/seeds", b'{"urls": ' + b"[" * 5_000 + b"]" * 5_000 + b"}", "body", id="nested-5000"),
        ("GET", "/urls?url=http://a.test/&colour=1", None, "colour"),
        ("GET", "/hosts/a.test:99999", None, "host"),
        *[("PUT", f"/hosts/{h}/policy", {"paused": True}, "host") for h in HOST_SPECS],
        *[("GET", f"/hosts/{h}", None, "host") for h in HOST_SPECS],
    ],
)
async def test_bad_input_of_every_endpoint_is_a_400_naming_the_field(api, method, path, body, field, caplog):
    _, session, http, _ = api
    kw = {"data": body, "headers": JSON} if isinstance(body, bytes) else {"json": body} if body is not None else {}
    status, answer = await call(http, method, path, **kw)
    assert status == 400 and answer["field"] == field, answer
    assert session.calls == []
    assert not [r for r in caplog.records if r.exc_info], "a traceback in the log"


async def test_a_body_over_the_limit_is_a_json_413(api):
    _, session, http, _ = api
    status, answer = await call(http, "POST", "/seeds", data=b" " * (9 * 1024 * 1024), headers=JSON)
    assert status == 413 and "error" in answer
    assert session.calls == []


async def test_a_web_page_cannot_drive_the_api(api):
    """What a page in the operator's browser can send, without a preflight: a "simple"
    request (text/plain, a form type, or no body), from its own Origin; and, after DNS
    rebinding, any request with its own name in Host. All refused, nothing called."""
    server, session, http, _ = api
    port = server.port
    refused = [
        # (method, path, headers, body) -> (status, field)
        (("POST", "/stop", {"Content-Type": "text/plain"}, b"{}"), (415, "Content-Type")),
        (("POST", "/seeds", {"Content-Type": "text/plain"}, b'{"urls": ["http://a.test/"]}'), (415, "Content-Type")),
        (("POST", "/stop", {"Content-Type": "application/x-www-form-urlencoded"}, b"a=1"), (415, "Content-Type")),
        (("POST", "/stop", {}, b""), (415, "Content-Type")),
        (("PUT", "/hosts/a.test/policy", {"Content-Type": "multipart/form-data; boundary=x"}, b"--x--"), (415, "Content-Type")),
        (("POST", "/stop", {"Content-Type": "application/json", "Origin": "http://evil.example"}, b"{}"), (403, "Origin")),
        (("POST", "/stop", {"Content-Type": "application/json", "Origin": "null"}, b"{}"), (403, "Origin")),
        (("POST", "/stop", {"Content-Type": "application/json", "Origin": f"http://localhost:{port + 1}"}, b"{}"), (403, "Origin")),
        (("GET", "/stats", {"Origin": "http://evil.example"}, None), (403, "Origin")),
        # DNS rebinding: the browser thinks it talks to evil.example, and says so in Host
        (("GET", "/stats", {"Host": f"evil.example:{port}"}, None), (400, "Host")),
        (("GET", "/urls?url=http://a.test/known", {"Host": f"evil.example:{port}"}, None), (400, "Host")),
        (("POST", "/stop", {"Host": f"evil.example:{port}", "Content-Type": "application/json",
                            "Origin": f"http://evil.example:{port}"}, b"{}"), (400, "Host")),
        (("GET", "/stats", {"Host": f"127.0.0.1.evil.example:{port}"}, None), (400, "Host")),
    ]
    for (method, path, headers, body), (status, field) in refused:
        got, answer = await call(http, method, path, headers=headers, data=body)
        assert (got, answer and answer.get("field")) == (status, field), (method, path, headers, answer)
    assert session.calls == []
    # The API's own names and origin still work (also through an ssh -L tunnel: any port).
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost:9999", f"[::1]:{port}"):
        assert (await call(http, "GET", "/stats", headers={"Host": host}))[0] == 200, host
    same = {"Content-Type": "application/json; charset=utf-8", "Origin": f"http://127.0.0.1:{port}"}
    assert (await call(http, "POST", "/seeds", headers=same, data=b'{"urls": ["http://a.test/"]}'))[0] == 202


async def test_the_bearer_scheme_is_case_insensitive(api):
    """RFC 9110 11.1: the authentication scheme is case-insensitive; the token is not."""
    server, session, _, _ = api
    async with aiohttp.ClientSession(server.url) as anon:
        for auth, status in ((f"bearer {TOKEN}", 200), (f"BEARER {TOKEN}", 200), (f"Bearer  {TOKEN}", 200),
                             (f"bearer {TOKEN.upper()}", 401), (f"Basic {TOKEN}", 401), (TOKEN, 401), ("bearer", 401)):
            async with anon.get("/stats", headers={"Authorization": auth}) as r:
                assert r.status == status, auth


def _raw(port: int, data: bytes) -> bytes:
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /stats?" + b"a" * 9000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",  # a URL over 8 KB
        b"GET /stats HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n",  # a header over 8 KB
        b"GET /stats HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(200)) + b"\r\n",
        b"GET /stats HTTP/1.1\r\nHo st: x\r\n\r\n",  # not HTTP
    ],
    ids=["long-url", "long-header", "200-headers", "bad-header-name"],
)
async def test_requests_the_http_parser_refuses_are_json_400_without_a_traceback(api, request_bytes, caplog):
    """aiohttp answers these before any middleware: plain text, and a full traceback at
    ERROR in the job log for each one (log flooding for any web page). Here: a JSON 400,
    one log line, no traceback."""
    import asyncio
    import json as _json
    import logging

    server, session, _, seen = api
    caplog.set_level(logging.DEBUG)
    raw = await asyncio.to_thread(_raw, server.port, request_bytes)
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.split(b" ")[1] == b"400", raw[:200]
    assert b"application/json" in head.lower()
    answer = _json.loads(body)
    assert answer["field"] == "request" and answer["error"], answer
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records]
    assert len([r for r in caplog.records if r.levelno >= logging.WARNING]) <= 1
    assert session.calls == []


def test_port_0_resolves_to_the_bound_port_on_uvloop_too() -> None:
    """The CLI's loop is uvloop (jobs.crawl), whose Server is not an asyncio.Server: the
    address the driver prints must still be the real port (it printed :0 once)."""
    uvloop = pytest.importorskip("uvloop")

    async def bind() -> int | None:
        server = ControlApi(FakeSession(), ApiConfig(enabled=True, port=0, token=TOKEN))
        await server.start()
        try:
            return server.port
        finally:
            await server.close()

    loop = uvloop.new_event_loop()
    try:
        port = loop.run_until_complete(bind())
    finally:
        loop.close()
    assert port is not None and port > 0
