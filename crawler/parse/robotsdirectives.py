"""Robots directives of a page: ``<meta name="robots">`` and the X-Robots-Tag header.

Both say ``noindex`` / ``nofollow`` (``none`` is both) for every crawler, or for one
crawler named by its product token (``<meta name="TOKEN">``, ``TOKEN: noindex`` in the
header). crawler.parse.html reads the ``<meta>`` elements and the headers and asks here
what they say.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["PRODUCT_TOKEN", "header_values", "robots_tokens", "x_robots_tag"]

# Directives whose syntax is "name: value"; any other "word:" prefix names a user agent.
_VALUED_DIRECTIVES = frozenset({"unavailable_after", "max-snippet", "max-image-preview", "max-video-preview"})
#: A robots product token: such a token is compared with a ``<meta>`` name as a whole,
#: ASCII case-insensitively (crawler.parse.html).
PRODUCT_TOKEN = re.compile(r"[A-Za-z0-9_-]+\Z")


def robots_tokens(content: str) -> tuple[bool, bool]:
    """(noindex, nofollow) from a comma/space separated directive list."""
    tokens = content.lower().replace(",", " ").split()
    none = "none" in tokens
    return none or "noindex" in tokens, none or "nofollow" in tokens


def header_values(headers: Mapping[str, str], name: str) -> list[str]:
    """All values of a header, case-insensitively (works for dicts and aiohttp multidicts)."""
    getall = getattr(headers, "getall", None)
    if getall is not None:
        return [str(v) for v in getall(name, ())]
    lname = name.lower()
    return [str(v) for k, v in headers.items() if isinstance(k, str) and k.lower() == lname]


def x_robots_tag(values: list[str], agent_token: str | None) -> tuple[bool, bool]:
    """(noindex, nofollow) from X-Robots-Tag header values.

    A value is a comma-separated list; ``agent: directives`` starts a group that applies
    only to that crawler and lasts to the end of the header line (Google's documented
    form, e.g. ``googlebot: noindex, nofollow``).
    """
    noindex = nofollow = False
    for value in values:
        agent: str | None = None
        for part in value.split(","):
            name, colon, rest = part.partition(":")
            name = name.strip().lower()
            if colon and name and " " not in name and name not in _VALUED_DIRECTIVES:
                agent, part = name, rest
            if agent is not None and agent != agent_token:
                continue
            ni, nf = robots_tokens(part)
            noindex |= ni
            nofollow |= nf
    return noindex, nofollow
