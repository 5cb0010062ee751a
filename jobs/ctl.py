"""``crawl ctl``: steer a running crawl through its HTTP control API (crawler.control.api), no curl.

    crawl ctl [--api URL] [--token T] seeds add URL [URL ...] [--priority N]
    crawl ctl ... url URL_OR_URL_HASH
    crawl ctl ... host pause|resume|show HOST
    crawl ctl ... host set HOST [--max-rps R] [--max-pages N]
    crawl ctl ... stats
    crawl ctl ... stop

``--api`` defaults to ``$CRAWL_API`` or http://127.0.0.1:8077, ``--token`` to
``$CRAWL_API_TOKEN``. The answer is printed as JSON; the exit status is 0 for a 2xx
answer, 1 otherwise (the API's error message goes to stderr), 2 for an ``--api`` that is
not an http(s) base URL.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote, urlsplit

from crawler.errors import ConfigError

DEFAULT_API = "http://127.0.0.1:8077"
TIMEOUT_S = 30.0


def request(api: str, method: str, path: str, body: Any = None, token: str | None = None) -> tuple[int, Any]:
    """One call to the API: (HTTP status, decoded JSON answer or None)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(api.rstrip("/") + path, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, {"error": raw.decode("utf-8", "replace")}


def _host_path(host: str) -> str:
    return "/hosts/" + quote(host, safe="[]:")


def call_for(args: argparse.Namespace) -> tuple[str, str, Any]:
    """(method, path, body) of the API call a parsed ``crawl ctl`` command means."""
    if args.ctl == "seeds":
        body: dict[str, Any] = {"urls": args.urls}
        if args.priority is not None:
            body["priority"] = args.priority
        return "POST", "/seeds", body
    if args.ctl == "url":
        if re.fullmatch(r"[0-9a-fA-F]{16}", args.target):
            return "GET", f"/urls/{args.target.lower()}", None
        return "GET", "/urls?url=" + quote(args.target, safe=""), None
    if args.ctl == "host":
        if args.action == "show":
            return "GET", _host_path(args.host), None
        if args.action in ("pause", "resume"):
            return "PUT", _host_path(args.host) + "/policy", {"paused": args.action == "pause"}
        body = {k: v for k, v in (("max_rps", args.max_rps), ("max_pages", args.max_pages)) if v is not None}
        return "PUT", _host_path(args.host) + "/policy", body
    if args.ctl == "stats":
        return "GET", "/stats", None
    return "POST", "/stop", {}


def check_api(api: str) -> str:
    """``--api`` as a base URL (http or https, a host); ConfigError naming the option."""
    try:
        parts = urlsplit(api)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number 0-65535
    except ValueError as exc:
        raise ConfigError(f"--api {api!r}: {exc}; give the API's base URL, such as {DEFAULT_API}") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"--api {api!r}: expected the API's base URL, such as {DEFAULT_API}")
    return api


def cmd_ctl(args: argparse.Namespace) -> int:
    check_api(args.api)
    method, path, body = call_for(args)
    try:
        status, answer = request(args.api, method, path, body, args.token)
    except (urllib.error.URLError, OSError) as exc:
        print(f"error: cannot reach the control API at {args.api}: {getattr(exc, 'reason', exc)}", file=sys.stderr)
        return 1
    if 200 <= status < 300:
        print(json.dumps(answer if answer is not None else {"ok": True, "status": status}, indent=2, default=str))
        return 0
    message = answer.get("error") if isinstance(answer, dict) else answer
    print(f"error: HTTP {status}: {message}", file=sys.stderr)
    return 1


def add_parser(sub: Any) -> None:
    """The ``ctl`` subcommand of the ``crawl`` CLI (jobs/cli.py)."""
    c = sub.add_parser("ctl", help="steer a running crawl through its control API")
    c.add_argument("--api", default=os.environ.get("CRAWL_API", DEFAULT_API), help=f"API base URL (default: $CRAWL_API or {DEFAULT_API})")
    c.add_argument("--token", default=os.environ.get("CRAWL_API_TOKEN"), help="bearer token (default: $CRAWL_API_TOKEN)")
    ctl = c.add_subparsers(dest="ctl", required=True)
    seeds = ctl.add_parser("seeds", help="add seed URLs").add_subparsers(dest="seeds_action", required=True)
    add = seeds.add_parser("add", help="add seed URLs to the running crawl")
    add.add_argument("urls", nargs="+", metavar="URL")
    add.add_argument("--priority", type=int, help="ahead of this many levels of the host's queue")
    url = ctl.add_parser("url", help="what the crawl knows of one URL")
    url.add_argument("target", metavar="URL_OR_URL_HASH")
    host = ctl.add_parser("host", help="a host's policy and state")
    actions = host.add_subparsers(dest="action", required=True)
    for name, text in (("pause", "start no request to the host"), ("resume", "unpause the host"),
                       ("show", "policy, queue, robots, backoff")):
        actions.add_parser(name, help=text).add_argument("host", help="example.org (every port) or example.org:8080")
    hset = actions.add_parser("set", help="set max_rps / max_pages")
    hset.add_argument("host")
    hset.add_argument("--max-rps", type=float)
    hset.add_argument("--max-pages", type=int)
    ctl.add_parser("stats", help="the crawl's numbers now")
    ctl.add_parser("stop", help="stop the crawl cleanly")
    c.set_defaults(func=cmd_ctl)
