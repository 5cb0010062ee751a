"""Which region fetches each host: operator rules, measurements, and a default.

A crawl may run its shards in several regions (``runtime.regions``; Ray nodes labelled
``region=...``). Every host belongs to exactly one region at a time, chosen by, in order:

1. an operator **rule** (``placement.rules`` in config, or set through the API): a
   hostname, ``host:port`` or ``*.example.com`` (the subdomains of example.com);
2. a **measurement**: the host's time to first byte from each region, taken on first
   contact and again every ``remeasure_s``; the host goes where it answered fastest;
3. the **default** region, until it has been measured.

A measured host moves only when the best region is clearly better than the one it is in
(hysteresis: at most ``move_gain`` of the current region's time *and* at least
``move_min_s`` faster). Moving a host costs a hand-over of its queue and politeness
state; without the margin, two regions with nearly equal times would trade the host back
and forth on every re-measurement because of network jitter.

:class:`RegionPlacement` is the policy: a plain class with an injected clock and random
generator, no Ray and no I/O. The probe that produces the figures is
:func:`time_to_first_byte`, run by the caller from each region.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from crawler.clock import Clock
from crawler.errors import ConfigError

__all__ = [
    "Placement",
    "RegionPlacement",
    "check_region_names",
    "rule_key",
    "time_to_first_byte",
]

# A region name as Ray label values and DNS labels both accept it: lower-case letters,
# digits and inner hyphens, at most 63 characters ("eu-west", "us-east-1").
_REGION_NAME = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?").fullmatch

How = Literal["rule", "measured", "default"]


def check_region_names(names: Iterable[str], key: str = "runtime.regions") -> tuple[str, ...]:
    """``names`` as a tuple, or ConfigError naming ``key``: at least one, each a valid
    name (lower-case letters, digits, inner '-'), no two alike."""
    out = tuple(names)
    if not out:
        raise ConfigError(f"{key}: list at least one region (e.g. [eu-west, us-east]), or null for one region")
    seen: set[str] = set()
    for i, name in enumerate(out):
        if not isinstance(name, str) or not _REGION_NAME(name):
            raise ConfigError(
                f"{key}[{i}]: {name!r} is not a region name (lower-case letters, digits and inner '-', "
                "at most 63 characters, e.g. eu-west)"
            )
        if name in seen:
            raise ConfigError(f"{key}[{i}]: region {name!r} is listed twice")
        seen.add(name)
    return out


def rule_key(spec: str, key: str = "placement.rules") -> str:
    """The canonical spelling of a rule's host: ``example.com``, ``example.com:8080`` or
    ``*.example.com`` (normalized the way URL hosts are); ConfigError naming ``key``."""
    from crawler.hostpolicy import parse_host  # crawler.urls is heavy; only rules need it

    raw = spec.strip() if isinstance(spec, str) else spec
    wildcard = isinstance(raw, str) and raw.startswith("*.")
    try:
        target = parse_host(raw[2:] if wildcard else raw)
    except ConfigError as exc:
        detail = str(exc).split(": ", 1)[-1]
        raise ConfigError(f"{key}.{spec}: {detail} (a rule names a host, host:port or *.domain)") from exc
    if wildcard:
        if target.port_given:
            raise ConfigError(f"{key}.{spec}: a *.domain rule takes no port (it covers every port of every subdomain)")
        return "*." + target.name
    return target.spec()


def _name_of(host: str) -> str:
    """``host`` without its port (a politeness key is ``host`` or ``host:port``)."""
    if host.startswith("["):
        return host[: host.find("]") + 1]
    return host.rpartition(":")[0] if ":" in host else host
