"""A synthetic web for testing the crawler (shipped in the package, like trio.testing).

:class:`SyntheticWeb` generates a deterministic multi-host web and knows the ground truth
of crawling it; :class:`WebServer` serves it on loopback and logs every request;
:func:`running_web` and :func:`crawl_config_for` wire both into tests and demos.

Names are imported lazily (PEP 562), so ``python -m crawler.testing.server`` does not
import the server module twice and importing ``crawler.testing.web`` needs no aiohttp.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "PROFILES": "crawler.testing.web",
    "USER_AGENT": "crawler.testing.web",
    "Reply": "crawler.testing.web",
    "SyntheticWeb": "crawler.testing.web",
    "canonical_path_qs": "crawler.testing.web",
    "RequestRecord": "crawler.testing.server",
    "WebServer": "crawler.testing.server",
    "serve_forever": "crawler.testing.server",
    "crawl_config_for": "crawler.testing.fixtures",
    "running_web": "crawler.testing.fixtures",
}

# The keys of _EXPORTS, sorted; spelled out because tools read ``__all__`` only as a literal.
__all__ = [
    "PROFILES", "Reply", "RequestRecord", "SyntheticWeb", "USER_AGENT", "WebServer",
    "canonical_path_qs", "crawl_config_for", "running_web", "serve_forever",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'crawler.testing' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
