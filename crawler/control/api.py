"""The HTTP control API of a running crawl, served by the driver (aiohttp, in its event loop).

A thin layer over :class:`crawler.session.crawlsession.CrawlSession`: each endpoint validates its
input completely, then calls one session method (the one the notebook handle and
``crawl ctl`` use), so nothing is half-applied and there is one implementation of each
operation. Endpoints (README "Operating a crawl"):

* ``POST /seeds {urls, priority?}`` -> 202, per-URL results;
* ``GET /urls/{url_hash}``, ``GET /urls?url=...`` -> 200 status, or 404;
* ``PUT /hosts/{host}/policy {max_rps?, paused?, max_pages?, region?}`` -> 204;
* ``GET /hosts/{host}`` -> policy, queue, next allowed time, robots, backoff;
* ``GET /stats`` -> the numbers of stats.json; ``POST /stop`` -> 202, a clean stop.

Errors are JSON ``{"error": ..., "field": ...}``: 400 for bad JSON, unknown fields and
wrong types (naming the field), 401 without the right ``Authorization: Bearer`` token
when one is set, 404, 409 once the crawl is stopping, 503 while it is starting. Binding
a host other than loopback without a token is refused (ConfigError) before anything
listens. No Ray here: request counts go to an injected ``on_request`` (actors/metrics).

A web page in the operator's browser can send requests to a loopback API, so it is
refused in three ways (README "Operating a crawl": the threat model): a write (POST,
PUT) must say ``Content-Type: application/json`` (415), which a page cannot send across
origins without a CORS preflight, and this API answers none; a request with an
``Origin`` other than the API's own is a browser's cross-origin request (403); on a
loopback binding, a ``Host`` that is not a loopback address or ``localhost`` is DNS
rebinding (400). Requests aiohttp's HTTP parser refuses (request line or a header over
:data:`MAX_LINE_BYTES`, more than :data:`MAX_HEADERS` headers, bad syntax) are answered
in JSON too, and logged as one line, never a traceback per request.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import logging
import os
import re
import socket
from typing import Any, Awaitable, Callable, Protocol, Sequence, cast

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError, LineTooLong

from crawler.config.settings import ApiConfig
from crawler.errors import ConfigError, CrawlError
from crawler.frontier.urlitem import check_priority
from crawler.policy.hostpolicy import check_max_rps, parse_host
from crawler.frontier.store import UrlStatus

log = logging.getLogger(__name__)

TOKEN_ENV = "CRAWL_API_TOKEN"
#: Most URLs one POST /seeds takes (a bigger list is a seeds file, not an API call).
MAX_SEEDS_PER_REQUEST = 10_000
#: The fields of GET /urls answers (a public contract: README), by the names the shard
#: store's per-URL state uses (crawler.frontier.store ``FrontierStore.url_status``).
URL_FIELDS: tuple[str, ...] = (
    "url", "url_hash", "status", "last_crawled_at", "next_crawl_at", "content_hash", "fetches", "last_outcome",
)
_HEX16 = re.compile(r"[0-9a-fA-F]{16}").fullmatch
#: The longest request line or header line, and the most headers, a request may have
#: (aiohttp's own defaults, stated here because the README promises them).
MAX_LINE_BYTES = 8190
MAX_HEADERS = 128
#: Most bytes a request body may have (413 beyond).
MAX_BODY_BYTES = 8 * 1024 * 1024



class _Listening(Protocol):
    @property
    def sockets(self) -> Sequence[socket.socket]: ...


class ApiSteering(Protocol):
    """An operator's calls (crawler.session.steering.Steering implements them)."""

    async def add_seeds(self, urls: Sequence[str], *, priority: int = 0, strict: bool = True) -> dict[str, Any]: ...
    async def set_host_policy(self, host: str, *, max_rps: float | None = None, paused: bool | None = None,
                              max_pages: int | None = None, region: str | None = None) -> str: ...
    async def host_info(self, host: str) -> dict[str, Any]: ...
    async def url_status(self, url: str) -> UrlStatus | None: ...
    async def url_status_by_hash(self, url_hash_hex: str) -> UrlStatus | None: ...


class ApiSession(Protocol):
    """What the API asks of a crawl (crawler.session.crawlsession.CrawlSession implements it)."""

    @property
    def steering(self) -> ApiSteering: ...

    @property
    def final(self) -> dict[str, Any] | None: ...
    @property
    def stopping(self) -> bool: ...
    @property
    def ready(self) -> bool: ...
    def request_stop(self) -> None: ...
    async def live_stats(self) -> dict[str, Any]: ...


class BadRequest(CrawlError):
    """Input the API refuses (400), naming the field."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


def is_loopback(host: str) -> bool:
    """True for an address that only this machine reaches (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def resolve_token(cfg: ApiConfig) -> str | None:
    """``api.token``, else the ``CRAWL_API_TOKEN`` environment variable, else None."""
    return cfg.token or os.environ.get(TOKEN_ENV) or None


def check_binding(cfg: ApiConfig, token: str | None) -> None:
    """Refuse to serve beyond this machine without a token."""
    if not is_loopback(cfg.host) and not token:
        raise ConfigError(
            f"api.host: {cfg.host} is reachable from other machines; set api.token (or {TOKEN_ENV}) "
            "so requests need a bearer token, or bind 127.0.0.1"
        )


def url_view(status: UrlStatus) -> dict[str, Any]:
    """A shard's per-URL state as the API answers it: every field of :data:`URL_FIELDS`
    (null when the state does not know it), plus depth and referrer when known."""
    out = {name: status.get(name) for name in URL_FIELDS}
    for extra in ("depth", "referrer", "host"):
        if extra in status:
            out[extra] = status[extra]
    return out


# -- request bodies ---------------------------------------------------------------------


async def _json_object(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    try:
        body = json.loads(raw) if raw.strip() else {}
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"the body is not valid JSON: {exc}", "body") from exc
    except RecursionError as exc:  # json nests by recursion: "[[[[..." deep enough overflows it
        raise BadRequest("the body nests too deeply (a request body here is at most two levels deep)", "body") from exc
    if not isinstance(body, dict):
        raise BadRequest(f"the body must be a JSON object, got {type(body).__name__}", "body")
    return body


def _only(body: dict[str, Any], allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        known = f"known: {', '.join(allowed)}" if allowed else "this endpoint takes none"
        raise BadRequest(f"unknown field {unknown[0]!r} ({known})", unknown[0])


def _int(body: dict[str, Any], name: str, minimum: int | None = None) -> int | None:
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise BadRequest(f"{name}: expected an integer, got {json.dumps(v)}", name)
    if minimum is not None and v < minimum:
        raise BadRequest(f"{name}: must be >= {minimum}, got {v}", name)
    return v


def parse_seeds(body: dict[str, Any]) -> tuple[list[str], int]:
    """``{urls: [str, ...], priority?: int}`` -> (urls, priority)."""
    _only(body, ("urls", "priority"))
    urls = body.get("urls")
    if not isinstance(urls, list) or not urls:
        raise BadRequest("urls: expected a non-empty list of URLs", "urls")
    if len(urls) > MAX_SEEDS_PER_REQUEST:
        raise BadRequest(f"urls: at most {MAX_SEEDS_PER_REQUEST} per request, got {len(urls)}", "urls")
    for i, u in enumerate(urls):
        if not isinstance(u, str):
            raise BadRequest(f"urls[{i}]: expected a string, got {json.dumps(u)}", "urls")
    priority = body.get("priority")
    if priority is None:
        return urls, 0
    try:
        return urls, check_priority(priority)
    except ConfigError as exc:
        raise BadRequest(str(exc), "priority") from exc


def parse_policy(body: dict[str, Any]) -> dict[str, Any]:
    """``{max_rps?: number > 0, paused?: bool, max_pages?: int >= 0, region?: name or
    "auto"}``, at least one (the region is checked against the crawl's regions later)."""
    _only(body, ("max_rps", "paused", "max_pages", "region"))
    out: dict[str, Any] = {}
    if body.get("max_rps") is not None:
        try:
            out["max_rps"] = check_max_rps(body["max_rps"])
        except ConfigError as exc:
            raise BadRequest(str(exc), "max_rps") from exc
    if body.get("paused") is not None:
        if not isinstance(body["paused"], bool):
            raise BadRequest(f"paused: expected true or false, got {json.dumps(body['paused'])}", "paused")
        out["paused"] = body["paused"]
    if body.get("max_pages") is not None:
        out["max_pages"] = _int(body, "max_pages", 0)
    if body.get("region") is not None:
        if not isinstance(body["region"], str) or not body["region"]:
            raise BadRequest(f"region: expected a region name or \"auto\", got {json.dumps(body['region'])}", "region")
        out["region"] = body["region"]
    if not out:
        raise BadRequest("nothing to set: give max_rps, paused, max_pages or region", "body")
    return out


def _field_of(exc: ConfigError, default: str) -> str:
    head = str(exc).split(":", 1)[0]
    return head if re.fullmatch(r"[a-z_]+", head) else default


# -- the server ---------------------------------------------------------------------------


def _reply(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=lambda d: json.dumps(d, default=str))


def _error(status: int, message: str, field: str | None = None) -> web.Response:
    body: dict[str, Any] = {"error": message}
    if field is not None:
        body["field"] = field
    return _reply(body, status)


def _host_name(host_header: str) -> str:
    """The name part of a Host header (``[::1]:8077`` -> ``::1``, ``a:80`` -> ``a``)."""
    h = host_header.strip().lower()
    if h.startswith("["):
        return h[1 : h.find("]")] if "]" in h else h
    return h.rsplit(":", 1)[0] if h.count(":") == 1 else h


def bearer_token(authorization: str) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, else None. RFC 9110 11.1:
    the scheme is case-insensitive (``bearer`` is as good as ``Bearer``); the token is not."""
    scheme, _, token = authorization.strip().partition(" ")
    return (token.strip() or None) if scheme.lower() == "bearer" else None


class _Protocol(web.RequestHandler):
    """aiohttp's connection handler, but a request its HTTP parser refuses (a request line
    or header over MAX_LINE_BYTES, too many headers, bad syntax) is answered here in JSON
    and logged as one line. aiohttp answers such a request before any middleware, in
    plain text, and logs its traceback at ERROR: one per request, which any web page can
    make by the thousand (issue 24)."""

    __slots__ = ()
    refused = 0  # parser refusals in this process (class-wide: a handler is per connection)

    def handle_error(
        self, request: Any, status: int = 500, exc: BaseException | None = None, message: str | None = None,
    ) -> web.StreamResponse:
        if not isinstance(exc, HttpProcessingError) or request.writer.output_size > 0:
            return super().handle_error(request, status, exc, message)
        cls = type(self)
        cls.refused += 1
        if isinstance(exc, LineTooLong):
            text = f"the request line or a header is longer than {MAX_LINE_BYTES} bytes"
        elif "too many headers" in str(message or "").lower():
            text = f"more than {MAX_HEADERS} headers"
        else:
            text = f"not a valid HTTP request ({type(exc).__name__})"
        # One line for the 1st, 10th, 100th... such request: the job log stays readable.
        if str(cls.refused).rstrip("0") == "1":
            log.warning("control API: refused a malformed request from %s: %s (%d so far)", request.remote, text, cls.refused)
        resp = _error(400, f"{text}; the API takes requests of at most {MAX_LINE_BYTES} bytes a line and "
                      f"{MAX_HEADERS} headers", "request")
        resp.force_close()
        return resp


class _Server(web.Server):
    """Makes a :class:`_Protocol` for each connection: no access log, the parser limits
    of this module."""

    def __call__(self) -> web.RequestHandler:
        # access_log None: no access log (aiohttp tests for it, but types it Logger).
        return _Protocol(self, loop=asyncio.get_running_loop(), access_log=None,  # type: ignore[arg-type]  # None: see above
                         max_line_size=MAX_LINE_BYTES, max_field_size=MAX_LINE_BYTES, max_headers=MAX_HEADERS)


class _Runner(web.AppRunner):
    """An AppRunner whose server is a :class:`_Server`: aiohttp has no public switch for
    the connection handler's class, so this overrides the runner's one hook for making
    its server (``_make_server``), keeping the app's own request handler and factory."""

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()  # starts the app and freezes it
        return _Server(server.request_handler, request_factory=server.request_factory)


class ControlApi:
    """Serves the endpoints of the module docstring for one session.

    Args:
        session: the crawl (a :class:`~crawler.session.crawlsession.CrawlSession`).
        cfg: the ``api`` section; ``port: 0`` binds any free port (see :attr:`url`).
        on_stop: what ``POST /stop`` calls (default: ``session.request_stop``).
        on_request: called with (route, HTTP status) after every request (metrics).
    """

    def __init__(
        self,
        session: ApiSession,
        cfg: ApiConfig,
        *,
        on_stop: Callable[[], Any] | None = None,
        on_request: Callable[[str, int], None] | None = None,
    ) -> None:
        self.session = session
        self.cfg = cfg
        self.token = resolve_token(cfg)
        check_binding(cfg, self.token)
        self._on_stop = on_stop or session.request_stop
        self._on_request = on_request
        self._runner: web.AppRunner | None = None
        self.port: int | None = None
        self.requests = 0

    @property
    def url(self) -> str:
        host = f"[{self.cfg.host}]" if ":" in self.cfg.host else self.cfg.host
        return f"http://{host}:{self.port}"

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._middleware], client_max_size=MAX_BODY_BYTES)
        app.router.add_post("/seeds", self._seeds)
        app.router.add_get("/urls/{url_hash}", self._url_by_hash)
        app.router.add_get("/urls", self._url_by_url)
        app.router.add_put("/hosts/{host}/policy", self._put_policy)
        app.router.add_get("/hosts/{host}", self._host)
        app.router.add_get("/stats", self._stats)
        app.router.add_post("/stop", self._stop)
        return app

    async def start(self) -> str:
        """Listen; returns the base URL (also printed by the owner for the job log)."""
        self._runner = _Runner(self.app())
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.cfg.host, self.cfg.port)
        try:
            await site.start()
        except OSError as exc:
            await self._runner.cleanup()
            self._runner = None
            raise ConfigError(f"api.port: cannot listen on {self.cfg.host}:{self.cfg.port}: {exc.strerror or exc}") from exc
        # aiohttp keeps the server there; port 0 needs the real one. An asyncio.Server, or
        # uvloop's (not a subclass of it): both have the sockets, which AbstractServer lacks.
        server = cast("_Listening | None", site._server)
        bound = server.sockets if server is not None else ()
        self.port = bound[0].getsockname()[1] if bound else self.cfg.port
        log.info("control API at %s", self.url)
        return self.url

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- plumbing -------------------------------------------------------------------------

    @web.middleware
    async def _middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
    ) -> web.StreamResponse:
        route = request.match_info.route.resource.canonical if request.match_info.route.resource else "other"
        status = 500
        try:
            response = await self._guarded(request, handler)
            status = response.status
            return response
        finally:
            self.requests += 1
            if self._on_request is not None:
                self._on_request(route, status)

    def _refuse_browser(self, request: web.Request) -> web.Response | None:
        """A request a web page made: DNS rebinding (Host) or cross-origin (Origin)."""
        host = request.headers.get("Host")
        # On loopback, only a page whose name resolved to 127.0.0.1 (DNS rebinding) sends a
        # name that is not a loopback address or localhost. Any port: ssh -L tunnels.
        if host is not None and is_loopback(self.cfg.host) and not is_loopback(_host_name(host)):
            return _error(400, f"Host {host!r} is not this API's address (a loopback address or localhost): "
                          "refused as DNS rebinding", "Host")
        origin = request.headers.get("Origin")
        if origin is not None and (host is None or origin.lower() != f"http://{host.strip().lower()}"):
            return _error(403, f"cross-origin request from {origin!r} refused: a web page may not steer the crawl "
                          "(use crawl ctl or curl, which send no Origin)", "Origin")
        return None

    async def _guarded(self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        if (refused := self._refuse_browser(request)) is not None:
            return refused
        if self.token is not None:
            given = bearer_token(request.headers.get("Authorization", "")) or ""
            if not hmac.compare_digest(given.encode("utf-8", "surrogateescape"), self.token.encode()):
                resp = _error(401, "missing or wrong token: send Authorization: Bearer <token>")
                resp.headers["WWW-Authenticate"] = 'Bearer realm="raycrawl"'
                return resp
        if request.method in ("POST", "PUT") and request.content_type != "application/json":
            # A page can send text/plain, form types or no body across origins without a
            # CORS preflight (WHATWG Fetch, "CORS-safelisted request-header"); not JSON.
            return _error(415, f"Content-Type must be application/json, got {request.headers.get('Content-Type')!r}",
                          "Content-Type")
        try:
            return await handler(request)
        except web.HTTPException as exc:  # aiohttp's own 404/405
            return _error(exc.status, exc.reason)
        except BadRequest as exc:
            return _error(400, str(exc), exc.field)
        except ConfigError as exc:
            return _error(400, str(exc), _field_of(exc, "body"))
        except Exception as exc:  # noqa: BLE001 - a JSON 500 for the operator; logged with its stack
            log.exception("control API: %s %s failed", request.method, request.path)
            return _error(500, f"internal error: {exc!r}")

    def _ready(self, *, mutating: bool) -> web.Response | None:
        s = self.session
        if s.final is not None or (mutating and s.stopping):
            return _error(409, "the crawl has stopped" if s.final is not None else "the crawl is stopping")
        if not s.ready:
            return _error(503, "the crawl is starting; try again in a moment")
        return None

    # -- endpoints -------------------------------------------------------------------------

    async def _seeds(self, request: web.Request) -> web.Response:
        urls, priority = parse_seeds(await _json_object(request))
        if (busy := self._ready(mutating=True)) is not None:
            return busy
        return _reply(await self.session.steering.add_seeds(urls, priority=priority, strict=False), 202)

    async def _url_by_hash(self, request: web.Request) -> web.Response:
        h = request.match_info["url_hash"]
        if not _HEX16(h):
            raise BadRequest(f"url_hash: expected 16 hex digits, got {h!r}", "url_hash")
        if (busy := self._ready(mutating=False)) is not None:
            return busy
        status = await self.session.steering.url_status_by_hash(h)
        return _error(404, f"no URL with url_hash {h} in this crawl") if status is None else _reply(url_view(status))

    async def _url_by_url(self, request: web.Request) -> web.Response:
        _only(dict(request.query), ("url",))
        url = request.query.get("url")
        if not url:
            raise BadRequest("url: give the URL as ?url=... (or use /urls/{url_hash})", "url")
        if (busy := self._ready(mutating=False)) is not None:
            return busy
        status = await self.session.steering.url_status(url)
        return _error(404, f"{url} is not in this crawl") if status is None else _reply(url_view(status))

    async def _put_policy(self, request: web.Request) -> web.Response:
        policy = parse_policy(await _json_object(request))
        parse_host(request.match_info["host"])  # a bad host is a 400 whatever the crawl's state
        if (busy := self._ready(mutating=True)) is not None:
            return busy
        await self.session.steering.set_host_policy(request.match_info["host"], **policy)
        return web.Response(status=204)

    async def _host(self, request: web.Request) -> web.Response:
        parse_host(request.match_info["host"])
        if (busy := self._ready(mutating=False)) is not None:
            return busy
        return _reply(await self.session.steering.host_info(request.match_info["host"]))

    async def _stats(self, request: web.Request) -> web.Response:
        if self.session.final is not None:
            return _reply(self.session.final)
        if (busy := self._ready(mutating=False)) is not None:
            return busy
        return _reply(await self.session.live_stats())

    async def _stop(self, request: web.Request) -> web.Response:
        _only(await _json_object(request), ())  # an empty body or {}
        if self.session.final is not None:
            return _error(409, "the crawl has stopped")
        self._on_stop()
        return _reply({"stopping": True}, 202)
