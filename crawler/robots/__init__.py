"""Per-origin robots.txt rules and their cache (RFC 9309). No I/O happens here.

:class:`RobotsClient` fetches ``origin + "/robots.txt"`` through the shard's own
politeness-paced fetch (following up to :data:`MAX_ROBOTS_REDIRECTS` redirects) and
hands the *final* response to :meth:`RobotsCache.from_response`, which decides what that
response means; the cache answers "may we fetch this URL?" from the rules.

Decisions, with the RFC 9309 section that makes them:

* 2xx: the body is parsed (2.3.1.1) with protego. At most :data:`ROBOTS_MAX_BYTES` are
  considered (2.5 requires parsing *at least* 500 KiB; parsing no more bounds the cost of
  a hostile 10 MB file). When the body was cut, the trailing partial line is dropped so
  a rule such as ``Allow: /public-only`` cut to ``Allow: /p`` cannot widen what we fetch.
  The file is UTF-8 (2.3); undecodable bytes are replaced, a BOM is skipped. A file the
  parser chokes on means allow-all and is counted in ``stats()["parse_errors"]``.
* 4xx (including 401 and 403, 2.3.1.3): the file is unavailable, everything is allowed.
  429 is the exception: it is a rate limit, not an absence, so it is treated like a 5xx
  (the RFC says "MAY access", so being stricter is allowed; Google does the same).
* 5xx, or no response at all (DNS failure, refused, timeout): the file is unreachable,
  everything is disallowed (2.3.1.4) for ``error_ttl_s`` so that we retry soon. If a copy
  obtained from a 2xx response is younger than ``stale_ok_s`` (default 30 days), that
  copy is used instead (2.4: a cached copy may be kept while the file is unreachable).
  The RFC also allows assuming allow-all after 30 days of errors; we do not (politeness
  first): the origin stays disallowed until it answers again.
* A final 3xx (the engine gave up following redirects) and :meth:`RobotsCache.
  from_redirect_overflow` mean "unavailable", i.e. 4xx semantics (2.3.1.2). A 304 to a
  conditional refetch refreshes the copy we have.
* Rules are cached for ``ttl_s`` (default 24 h, 2.4: "SHOULD NOT use the cached version
  for more than 24 hours").
* The ``/robots.txt`` URL itself is always allowed (2.2.2).

Group selection (2.2.1) uses the *product token* of the configured user agent
(``raycrawl`` from ``raycrawl/0.1 (+https://...)``), matched case-insensitively and
*exactly*: a group for ``ray`` does not apply to ``raycrawl`` (protego alone would match
it as a prefix), a group for ``raycrawl`` overrides ``*``, and with neither, no rule
applies. Longest match wins between Allow and Disallow, Allow on a tie (2.2.2) - protego
implements that ordering.
"""

from __future__ import annotations

from crawler.robots.cache import RobotsCache
from crawler.robots.client import RobotsClient
from crawler.robots.rules import DEFAULT_STALE_OK_S, MAX_ROBOTS_REDIRECTS, ROBOTS_MAX_BYTES, RobotsRules, product_token

__all__ = [
    "DEFAULT_STALE_OK_S",
    "MAX_ROBOTS_REDIRECTS",
    "ROBOTS_MAX_BYTES",
    "RobotsCache",
    "RobotsClient",
    "RobotsRules",
    "product_token",
]
