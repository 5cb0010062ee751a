"""Helpers for tests and demos that crawl the synthetic web.

``tests/conftest.py`` turns these into pytest fixtures::

    with running_web(seed=0, profile="test") as server:
        cfg = crawl_config_for(server, output={"path": str(tmp_path)})
        ...                        # crawl with cfg
        assert server.request_counts()[url] == 1
"""

from __future__ import annotations

import copy
from contextlib import contextmanager
from typing import Any, Iterator, Mapping

from crawler.testing.server import WebServer
from crawler.testing.web import USER_AGENT, SyntheticWeb

__all__ = ["crawl_config_for", "running_web"]


@contextmanager
def running_web(seed: int = 0, profile: str = "test", **kw: Any) -> Iterator[WebServer]:
    """Serve ``SyntheticWeb(seed, profile, **kw)`` on an ephemeral loopback port.

    ``kw`` goes to :class:`SyntheticWeb` (``hosts``, ``pages_per_host``) except ``host``
    and ``port``, which go to :class:`WebServer`.
    """
    server_kw = {k: kw.pop(k) for k in ("host", "port") if k in kw}
    server = WebServer(SyntheticWeb(seed=seed, profile=profile, **kw), **server_kw)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(base.get(k), dict):
            _merge(base[k], v)
        else:
            base[k] = copy.deepcopy(v)
    return base


def web_limits(web: Any) -> dict[str, Any]:
    """The ``limits`` section that crawls a synthetic web completely."""
    return {
        # Generous: a crawler records the depth at which it *first* discovers a URL,
        # which can be far above the shortest path (test profile: 7 by BFS, up to 11
        # in random order, 32 depth-first). Traps stay bounded by the per-host budget.
        "max_depth": max(32, 4 * web.required_depth()),
        "max_pages_per_host": web.max_pages_on_host() + 6,
        "max_body_bytes": web.profile.max_body_bytes,
        "max_path_repeats": 3,
        "max_query_params": 4,
    }


def crawl_config_for(server: WebServer, **overrides: Any) -> dict[str, Any]:
    """A YAML-shaped crawl config (crawler.config.settings keys) for crawling ``server``'s web.

    Seeds, scope ``any``, the ``raycrawl`` user agent, ``*.test`` resolved to the server,
    and limits the ground truth assumes: ``max_depth`` well above ``web.required_depth()``, a
    per-host budget a little above the largest non-trap host (so trap hosts are bounded
    by it), a fetch timeout below the stalling page's sleep and ``max_body_bytes`` below
    the oversized body. Politeness interval and timeouts follow the profile. Sections in
    ``overrides`` are merged key by key (``fetch={"attempts": 2}`` keeps the resolve).
    """
    web = server.web
    prof = web.profile
    cfg: dict[str, Any] = {
        "seeds": web.seeds(),
        "scope": "any",
        "user_agent": USER_AGENT,
        "urls": {"follow_rel_nofollow": False},
        "limits": web_limits(web),
        "politeness": {
            "interval_s": prof.interval,
            # Test-sized backoff: the 503/429 hosts must not dominate an e2e test.
            "max_interval_s": max(prof.interval, 2.0),
        },
        "fetch": {
            "resolve": {"*.test": server.host},
            "timeout_s": prof.fetch_timeout,
            "connect_timeout_s": prof.fetch_timeout,
            "attempts": 3,
            "backoff_s": prof.interval * 5,
            "max_backoff_s": 2.0,
        },
    }
    return _merge(cfg, overrides)
