"""An operator's host policy: which politeness keys it names, and what it sets.

Politeness is kept per key, ``host`` or ``host:port`` (crawler.urls.host_key), and each
key is owned by one shard (DESIGN.md invariant 1). Operators think in hostnames, so a
policy names either

* a hostname without a port (``example.org``): it applies to every key of that hostname,
  whatever its port, on every shard, including keys first seen after the policy was set;
* a hostname with a port (``example.org:8080``): that one key, on its owning shard.

A host is normalized the way a URL's host is (RFC 3986 3.2.2 with the WHATWG host
parser: lowercase, IDNA, one trailing dot dropped, IPv4 forms to dotted decimal), by
normalizing ``http://<host>/``; so ``example.org:80`` names the key ``example.org``,
which serves the default port of both schemes.

The setting a policy carries is :class:`HostPolicy`; a later policy changes only the
fields it sets, and a hostname-wide setting replaces what earlier per-key settings of
that hostname said for the same field (the newest word of the operator wins).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from crawler.errors import ConfigError
from crawler.urls import host_key, normalize


@dataclass(frozen=True, slots=True)
class HostTarget:
    """What a host spec names: a whole hostname (``port_given`` False) or one key."""

    name: str  # the hostname, no port (IPv6 in brackets)
    key: str  # the politeness key: ``name`` or ``name:port``
    port_given: bool

    @property
    def hostname_wide(self) -> bool:
        """True when the policy applies to every key of :attr:`name`."""
        return not self.port_given

    def spec(self) -> str:
        """The canonical spelling (what the API echoes)."""
        return self.key if self.port_given else self.name


def name_of(key: str) -> str:
    """The hostname of a politeness key (``[::1]:8080`` -> ``[::1]``, ``a.test:81`` -> ``a.test``)."""
    if key[:1] == "[":
        return key[: key.find("]") + 1]
    i = key.rfind(":")
    return key[:i] if i >= 0 else key


def parse_host(spec: str) -> HostTarget:
    """Parse a host as an operator writes it; raises ConfigError naming what is wrong."""
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError("host: expected a hostname such as example.org or example.org:8080")
    raw = spec.strip()
    if any(c in raw for c in "/?#@ ") or "://" in raw:
        raise ConfigError(f"host: {raw!r} is not a hostname (give example.org or example.org:8080, not a URL)")
    close = raw.rfind("]")
    port_given = raw.rfind(":") > close and not (raw[:1] != "[" and raw.count(":") > 1)
    url = normalize(f"http://{raw}/")
    if url is None:
        raise ConfigError(f"host: {raw!r} is not a valid hostname (or its port is not 0-65535)")
    key = host_key(url)
    return HostTarget(name_of(key), key, port_given)


@dataclass(frozen=True, slots=True)
class HostPolicy:
    """Operator settings for a host; None leaves a field as it is.

    ``max_rps``: requests per second at most (the interval 1/max_rps is a floor, like
    Crawl-delay: the larger applies); ``paused``: no request starts; ``max_pages``: pages
    the host may be admitted in all (its queue is cut to what is left).
    """

    max_rps: float | None = None
    paused: bool | None = None
    max_pages: int | None = None

    def __post_init__(self) -> None:
        if self.max_rps is not None and (
            isinstance(self.max_rps, bool)
            or not isinstance(self.max_rps, (int, float))
            or not math.isfinite(self.max_rps)
            or self.max_rps <= 0
        ):
            raise ConfigError(f"max_rps: expected a number > 0 (requests per second), got {self.max_rps!r}")
        if self.paused is not None and not isinstance(self.paused, bool):
            raise ConfigError(f"paused: expected true or false, got {self.paused!r}")
        if self.max_pages is not None and (
            isinstance(self.max_pages, bool) or not isinstance(self.max_pages, int) or self.max_pages < 0
        ):
            raise ConfigError(f"max_pages: expected a whole number >= 0, got {self.max_pages!r}")

    @property
    def interval_s(self) -> float | None:
        """The politeness interval ``max_rps`` asks for (None: unchanged)."""
        return None if self.max_rps is None else 1.0 / self.max_rps

    def is_empty(self) -> bool:
        return self.max_rps is None and self.paused is None and self.max_pages is None

    def to_json(self) -> dict[str, Any]:
        return {"max_rps": self.max_rps, "paused": self.paused, "max_pages": self.max_pages}
