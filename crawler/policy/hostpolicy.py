"""An operator's host policy: which politeness keys it names, and what it sets.

Politeness is kept per key, ``host`` or ``host:port`` (crawler.urls.host_key), and each
key is owned by one shard (docs/invariants.md #1). Operators think in hostnames, so a
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

import logging
import math
import re
from dataclasses import dataclass
from typing import Any

from crawler.errors import ConfigError
from crawler.urls import host_key, normalize

log = logging.getLogger(__name__)


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


@dataclass(frozen=True, slots=True)
class PolicyChange:
    """An operator's host policy on its way from the session to the shards, declared once
    for every layer it crosses (runtime seam, actor, shard): what it names and what it
    sets; None leaves a field as it is.

    ``host`` is a politeness key (``host`` or ``host:port``), or with ``hostname_wide``
    a hostname whose every key (any port, keys seen later too) the policy covers.
    ``interval_s`` is the floor between two requests (1/max_rps), ``paused`` stops
    requests, ``max_pages`` bounds the pages the key may be admitted in all.
    """

    host: str
    interval_s: float | None = None
    paused: bool | None = None
    max_pages: int | None = None
    hostname_wide: bool = False

    @classmethod
    def of(cls, target: HostTarget, policy: "HostPolicy") -> "PolicyChange":
        """The change a validated :class:`HostPolicy` makes to ``target``."""
        return cls(target.name if target.hostname_wide else target.key, policy.interval_s, policy.paused,
                   policy.max_pages, target.hostname_wide)


# A DNS label as hosts spell it: letters, digits, inner hyphens (RFC 1123 2.1; an IDN is
# already xn-- here), and "_", which real names carry though RFC 952 forbids it.
_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?").fullmatch


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
        raise ConfigError(f"host: {raw!r} is not a valid hostname (or its port is not 1-65535)")
    key = host_key(url)
    name = name_of(key)
    # The URL parser takes hosts no policy should name: "*" is not a pattern here, and a
    # policy on it would match nothing, silently. (IPv4, made dotted decimal, passes.)
    if name[:1] != "[" and not all(_LABEL(label) for label in name.split(".")):
        raise ConfigError(
            f"host: {raw!r} is not a hostname: each label is letters, digits, '_' and inner '-' "
            "(one host, not a pattern)"
        )
    if key.endswith(":0") and key != name:
        raise ConfigError(f"host: {raw!r}: port 0 is not a port a URL can name (give 1-65535)")
    return HostTarget(name, key, port_given)


#: The slowest pace ``max_rps`` can ask for: one request a week. Slower than that is a
#: pause (``paused: true``), and the bound keeps 1/max_rps a finite number of seconds.
MAX_POLICY_INTERVAL_S = 7 * 86400.0


def check_max_rps(value: Any) -> float:
    """``value`` as a ``max_rps``, or ConfigError naming ``max_rps`` and its range.

    Any rate from one request a week up is accepted; it can only slow a host down: the
    interval 1/max_rps is a floor under the configured ``interval_s`` and Crawl-delay, so
    a rate above 1/interval_s changes nothing (crawler.policy.politeness)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not value >= 1.0 / MAX_POLICY_INTERVAL_S
    ):
        raise ConfigError(
            f"max_rps: expected requests per second >= {1.0 / MAX_POLICY_INTERVAL_S:.3g} (one a week; "
            f"use paused to stop a host), got {value!r}"
        )
    return float(value)


@dataclass(frozen=True, slots=True)
class HostPolicy:
    """Operator settings for a host; None leaves a field as it is.

    ``max_rps``: requests per second at most (the interval 1/max_rps is a floor, like
    Crawl-delay: the larger applies, so it can slow a host, never speed it past
    ``interval_s``); ``paused``: no request starts; ``max_pages``: pages the host may be
    admitted in all (its queue is cut to what is left).
    """

    max_rps: float | None = None
    paused: bool | None = None
    max_pages: int | None = None

    def __post_init__(self) -> None:
        if self.max_rps is not None:
            check_max_rps(self.max_rps)
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


Pacing = tuple[float | None, bool | None]  # (interval override, paused); None: not set here


class PacingOverrides:
    """The pacing half of operator policy (interval floor, pause) for politeness keys.

    Two tables: per key (``host`` or ``host:port``) and hostname-wide (every key of a
    hostname, including keys not seen yet). A key's own field wins over its hostname's;
    a hostname-wide setting replaces what earlier per-key settings said for that field.
    Kept apart from pacing state so forgetting an idle host never drops what an operator
    asked for.
    """

    def __init__(self) -> None:
        self._keys: dict[str, Pacing] = {}
        self._names: dict[str, Pacing] = {}
        self.restore_errors = 0

    def lookup(self, key: str) -> Pacing | None:
        """The policy in force for ``key`` (its own fields, the rest from its hostname's)."""
        pol = self._keys.get(key)
        if not self._names:  # the common case: no hostname-wide policy at all
            return pol
        npol = self._names.get(name_of(key))
        if npol is None:
            return pol
        if pol is None:
            return npol
        return (npol[0] if pol[0] is None else pol[0], npol[1] if pol[1] is None else pol[1])

    def override(self, key: str) -> tuple[float | None, bool]:
        """(interval override or None, paused) in force for ``key``."""
        pol = self.lookup(key)
        return (None, False) if pol is None else (pol[0], bool(pol[1]))

    def name_override(self, name: str) -> tuple[float | None, bool]:
        """The hostname-wide policy of ``name``: (interval or None, paused)."""
        pol = self._names.get(name)
        return (None, False) if pol is None else (pol[0], bool(pol[1]))

    def keys(self) -> list[str]:
        """Keys with a policy of their own."""
        return list(self._keys)

    def set(self, key: str, interval_s: float | None = None, paused: bool | None = None) -> None:
        """Set fields of ``key``'s own policy (None keeps a field as it is)."""
        check_interval(key, interval_s)
        old_interval, old_paused = self._keys.get(key, (None, None))
        new = (
            old_interval if interval_s is None else float(interval_s),
            old_paused if paused is None else bool(paused),
        )
        # An explicit "not paused" matters only against a hostname-wide pause.
        if new[0] is None and not new[1] and (new[1] is None or name_of(key) not in self._names):
            self._keys.pop(key, None)
        else:
            self._keys[key] = new

    def set_name(self, name: str, interval_s: float | None, paused: bool | None, known: list[str]) -> list[str]:
        """Set fields of hostname ``name``'s policy; the keys of ``known`` with that
        hostname lose their own setting of those fields. Returns those keys."""
        check_interval(name, interval_s)
        old_interval, old_paused = self._names.get(name, (None, None))
        new = (
            old_interval if interval_s is None else float(interval_s),
            old_paused if paused is None else bool(paused),
        )
        if new[0] is None and not new[1]:
            self._names.pop(name, None)
        else:
            self._names[name] = new
        touched = [k for k in known if name_of(k) == name]
        for key in touched:
            pol = self._keys.get(key)
            if pol is None:
                continue
            pol = (None if interval_s is not None else pol[0], None if paused is not None else pol[1])
            if pol == (None, None) or (pol[0] is None and not pol[1] and name not in self._names):
                self._keys.pop(key, None)
            else:
                self._keys[key] = pol
        return touched

    def clear(self, key: str) -> None:
        """Remove ``key``'s own policy (its hostname's, if any, applies)."""
        self._keys.pop(key, None)

    def snapshot(self) -> dict[str, dict[str, dict[str, Any]]]:
        """``{"policies": per key, "names": per hostname}``, JSON-ready."""
        return {
            "policies": {h: {"interval_s": iv, "paused": p} for h, (iv, p) in self._keys.items()},
            "names": {h: {"interval_s": iv, "paused": p} for h, (iv, p) in self._names.items()},
        }

    def restore(self, state: dict[str, Any]) -> None:
        """Load the tables of a :meth:`snapshot`; a malformed entry is skipped and counted."""
        for section, table in (("names", self._names), ("policies", self._keys)):
            for host, p in dict(state.get(section, {})).items():
                try:
                    iv, paused = p.get("interval_s"), p.get("paused")
                    check_interval(str(host), iv)
                    if paused is not None and not isinstance(paused, bool):
                        raise ConfigError(f"paused must be true, false or null, got {paused!r}")
                    table[str(host)] = (None if iv is None else float(iv), paused)
                except (ConfigError, AttributeError) as exc:
                    log.warning("host policy: skipping malformed policy for %r: %s", host, exc)
                    self.restore_errors += 1


def check_interval(host: str, interval_s: Any) -> None:
    """Raise ConfigError unless ``interval_s`` is None or a finite number of seconds >= 0."""
    if interval_s is not None and not (
        isinstance(interval_s, (int, float)) and not isinstance(interval_s, bool)
        and math.isfinite(interval_s) and interval_s >= 0
    ):
        raise ConfigError(
            f"host policy for {host!r}: interval must be a finite number of seconds >= 0 "
            f"(max_rps > 0), got {interval_s!r}"
        )
