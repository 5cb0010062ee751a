"""Spider-trap rules: a discovered link refused on its shape alone.

A spider trap is a site that generates unbounded URLs: calendars that link to the
next month forever, relative links that nest ``/a/b/a/b/...``, faceted search whose
filter combinations multiply, session ids minted per request. :class:`TrapRules` is the
first of two layers against them: it rejects a single discovered link on its shape
(depth, URL length, query-parameter count, repeated path segments). It is called per
link, so it is a handful of string operations. The second layer, what one host may cost
in all, is :class:`crawler.policy.hostbudget.HostBudget`.
"""

from __future__ import annotations

from crawler.counters import TrapRule

from crawler.errors import ConfigError

__all__ = ["TrapRules", "check_limit"]


def check_limit(name: str, value: object, minimum: int) -> int | None:
    """Validate an optional integer limit from the configuration (None disables it)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(
            f"{name} must be a whole number >= {minimum}, or null to disable it (got {value!r})"
        )
    return value


class TrapRules:
    """Shape rules for one discovered URL; each limit may be None to disable it.

    ``check`` applies the rules in this order and names the first that rejects:

    * ``"depth"``: link depth from its seed (seeds are depth 0) above ``max_depth``;
    * ``"url_length"``: more than ``max_url_length`` characters;
    * ``"query_params"``: more than ``max_query_params`` ``&``-separated parameters;
    * ``"path_repeats"``: one non-empty path segment occurs more than
      ``max_path_repeats`` times (``/a/b/a/b/a/b/...`` relative-link loops,
      ``/cal/2024/cal/2024/...``).

    The URL is expected normalized (no fragment, no empty query parameters).
    """

    __slots__ = ("max_depth", "max_url_length", "max_query_params", "max_path_repeats")

    RULES: tuple[str, ...] = ("depth", "url_length", "query_params", "path_repeats")

    def __init__(
        self,
        max_depth: int | None,
        max_url_length: int | None,
        max_query_params: int | None,
        max_path_repeats: int | None,
    ) -> None:
        self.max_depth = check_limit("max_depth", max_depth, 0)
        self.max_url_length = check_limit("max_url_length", max_url_length, 1)
        self.max_query_params = check_limit("max_query_params", max_query_params, 0)
        self.max_path_repeats = check_limit("max_path_repeats", max_path_repeats, 1)

    def __repr__(self) -> str:
        return (
            f"TrapRules(max_depth={self.max_depth}, max_url_length={self.max_url_length}, "
            f"max_query_params={self.max_query_params}, max_path_repeats={self.max_path_repeats})"
        )

    def check(self, url: str, depth: int) -> TrapRule | None:
        """Name of the first rule that rejects ``url`` found at ``depth``, or None."""
        if self.max_depth is not None and depth > self.max_depth:
            return "depth"
        if self.max_url_length is not None and len(url) > self.max_url_length:
            return "url_length"
        if "?" not in url and "#" not in url:
            # The common case, answered with two C-level scans: no query to count, and
            # the path (which starts after "//" when there is one) has no more segments
            # than it has slashes, so it cannot repeat one too often unless there are
            # more than ``max_path_repeats`` of them. tests/unit/test_url_fast_paths.py
            # checks this against _shape.
            max_repeats = self.max_path_repeats
            if max_repeats is None:
                return None
            start = url.find("//")
            if (url.count("/", start + 2) if start >= 0 else url.count("/")) <= max_repeats:
                return None
        return self._shape(url)

    def _shape(self, url: str) -> TrapRule | None:
        """The rules on the URL's shape alone (all but depth), in full."""
        if self.max_url_length is not None and len(url) > self.max_url_length:
            return "url_length"
        max_params = self.max_query_params
        max_repeats = self.max_path_repeats
        if max_params is None and max_repeats is None:
            return None
        end = url.find("#")
        if end < 0:
            end = len(url)
        qmark = url.find("?", 0, end)
        if max_params is not None and qmark >= 0 and qmark + 1 < end:
            # A normalized query has no empty parameters, so count("&") + 1 is exact.
            if url.count("&", qmark + 1, end) + 1 > max_params:
                return "query_params"
        if max_repeats is not None:
            start = url.find("//")
            start = url.find("/", start + 2) if start >= 0 else url.find("/")
            if start >= 0:
                path = url[start : qmark if qmark >= 0 else end]
                segments = path.split("/")
                # A path with no more segments than the limit cannot repeat one too often.
                if len(segments) - 1 > max_repeats:
                    counts: dict[str, int] = {}
                    for segment in segments:
                        if segment:
                            seen = counts.get(segment, 0) + 1
                            if seen > max_repeats:
                                return "path_repeats"
                            counts[segment] = seen
        return None
