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

import logging
import math
import random
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal, Protocol

from crawler.clock import Clock
from crawler.config.settings import PlacementConfig
from crawler.errors import ConfigError

__all__ = [
    "Placement",
    "RegionPlacement",
    "check_placement",
    "check_region_names",
    "rule_key",
    "time_to_first_byte",
]

log = logging.getLogger(__name__)

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
    from crawler.policy.hostpolicy import parse_host  # crawler.urls is heavy; only rules need it

    raw = spec.strip() if isinstance(spec, str) else spec
    wildcard = isinstance(raw, str) and raw.startswith("*.")
    try:
        target = parse_host(raw[2:] if wildcard else raw)
    except ConfigError as exc:
        detail = str(exc).split(": ", 1)[-1]
        raise ConfigError(f"{key}.{spec}: {detail} (a rule names a host, host:port or *.domain)") from exc
    if wildcard:
        if target.name.startswith("[") or target.name.replace(".", "").isdigit():
            raise ConfigError(f"{key}.{spec}: an IP address has no subdomains (name the address itself)")
        if target.port_given:
            raise ConfigError(f"{key}.{spec}: a *.domain rule takes no port (it covers every port of every subdomain)")
        return "*." + target.name
    return target.spec()


def check_placement(regions: tuple[str, ...] | None, p: PlacementConfig) -> None:
    """Placement's checks of ``runtime.regions`` and its ``placement`` section, before a crawl
    starts (crawler.configcheck; crawler.config checks the section's numbers): valid region
    names, rules that name hosts, and only regions of ``runtime.regions``, which placement needs."""
    if regions is not None:
        check_region_names(regions, "runtime.regions")
    for spec in p.rules:
        rule_key(spec, "placement.rules")
    if regions is None:
        default = PlacementConfig()
        changed = [f.name for f in fields(PlacementConfig) if getattr(p, f.name) != getattr(default, f.name)]
        if changed:
            raise ConfigError(f"placement.{changed[0]}: set, but runtime.regions is null (one region: nothing to "
                              "place); list the regions first, e.g. runtime.regions: [eu-west, us-east]")
        return
    known = ", ".join(regions)
    if p.default_region is not None and p.default_region not in regions:
        raise ConfigError(f"placement.default_region: {p.default_region!r} is not one of runtime.regions ({known})")
    for spec, region in p.rules.items():
        if region not in regions:
            raise ConfigError(f"placement.rules.{spec}: {region!r} is not one of runtime.regions ({known})")


def _name_of(host: str) -> str:
    """``host`` without its port (a politeness key is ``host`` or ``host:port``)."""
    if host.startswith("["):
        return host[: host.find("]") + 1]
    return host.rpartition(":")[0] if ":" in host else host


@dataclass(frozen=True)
class Placement:
    """Where a host is fetched from, and why (what stats, metrics and ``GET /hosts/{host}`` say).

    ``how`` is ``"rule"`` (an operator's rule), ``"measured"`` (its figures chose, or kept,
    the region) or ``"default"`` (not measured yet). ``figures`` are the last measurement's
    seconds to first byte per region (None: that region got no answer); empty for a rule
    or the default. ``decided_at`` is wall-clock seconds; ``moves`` counts the times the
    host's region changed (by a measurement or a rule).
    """

    region: str
    how: How
    figures: dict[str, float | None] = field(default_factory=dict)
    decided_at: float = 0.0
    moves: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (for stats and the API)."""
        return {"region": self.region, "how": self.how, "figures": dict(self.figures),
                "decided_at": self.decided_at, "moves": self.moves}


@dataclass
class _Host:
    """What the policy remembers of one host: its last measurement, and its moves."""

    region: str | None = None  # the region measurements put it in (None: not measured)
    figures: dict[str, float | None] = field(default_factory=dict)
    measured_at: float = 0.0
    due_at: float = math.inf  # when it is to be measured again
    moves: int = 0


#: Re-measurement is due after remeasure_s times a factor drawn from this range, so hosts
#: first met together (a seed list) do not all come due in the same minute again.
REMEASURE_JITTER = (0.9, 1.1)
SNAPSHOT_VERSION = 1


class RegionPlacement:
    """The region of every host: rule > measurement > default (see the module docstring).

    Hosts are politeness keys (``host`` or ``host:port``, crawler.urls.host_key). A rule
    names a hostname (all its ports), one ``host:port``, or ``*.domain`` (every subdomain
    of domain, not domain itself); the most specific rule wins (``host:port``, then the
    hostname, then the longest ``*.`` suffix). Rules from config come in at construction;
    :meth:`set_rule` adds or removes an operator's, which outlives a restart through
    :meth:`snapshot` / :meth:`restore` and wins over the config's for the same spelling.

    Only hosts that were measured or moved take memory: an unmeasured host without a rule
    is in the default region by computation.
    """

    def __init__(
        self,
        regions: Iterable[str],
        default_region: str | None,
        rules: Mapping[str, str],
        *,
        remeasure_s: float,
        move_gain: float,
        move_min_s: float,
        clock: Clock,
        rng: random.Random,
    ) -> None:
        self.regions = check_region_names(regions)
        self.default_region = self._known(default_region, "default_region") if default_region else self.regions[0]
        if not remeasure_s >= 0 or not 0 < move_gain <= 1 or not move_min_s >= 0:
            raise ConfigError(f"placement: need remeasure_s >= 0, 0 < move_gain <= 1, move_min_s >= 0 "
                              f"(got {remeasure_s}, {move_gain}, {move_min_s})")
        self.remeasure_s = float(remeasure_s)
        self.move_gain = float(move_gain)
        self.move_min_s = float(move_min_s)
        self._clock = clock
        self._rng = rng
        self._started = clock.wall()
        # Config rules, then the operator's overrides on top (None: the operator removed
        # the rule of that spelling, the config's included).
        self._config_rules = {rule_key(k): self._known(v, f"rules.{k}") for k, v in rules.items()}
        self._overrides: dict[str, str | None] = {}
        self._override_at: dict[str, float] = {}
        self._rules: dict[str, str] = dict(self._config_rules)
        self._hosts: dict[str, _Host] = {}

    # -- reading ----------------------------------------------------------------------

    def region_of(self, host: str) -> str:
        """The host's region now: its rule's, else its measured one, else the default."""
        spec = self._rule_for(host)
        if spec is not None:
            return self._rules[spec]
        rec = self._hosts.get(host)
        return rec.region if rec is not None and rec.region is not None else self.default_region

    def placement(self, host: str) -> Placement:
        """:meth:`region_of` with how it was chosen, the figures and the moves."""
        rec = self._hosts.get(host)
        moves = rec.moves if rec is not None else 0
        spec = self._rule_for(host)
        if spec is not None:
            at = self._override_at.get(spec, self._started)
            return Placement(self._rules[spec], "rule", {}, at, moves)
        if rec is not None and rec.region is not None:
            return Placement(rec.region, "measured", dict(rec.figures), rec.measured_at, moves)
        return Placement(self.default_region, "default", {}, self._started, moves)

    def needs_measurement(self, host: str) -> bool:
        """True when a probe from each region should be run for ``host``: no rule places
        it, and it was never measured or its re-measurement came due."""
        if self._rule_for(host) is not None:
            return False
        rec = self._hosts.get(host)
        return rec is None or rec.region is None or self._clock.wall() >= rec.due_at

    def rules(self) -> dict[str, str]:
        """The rules in force (config and operator), by canonical spelling."""
        return dict(self._rules)

    def summary(self) -> dict[str, Any]:
        """Crawl-wide figures: rules in force, measured hosts per region, moves in all."""
        per_region = {r: 0 for r in self.regions}
        for rec in self._hosts.values():
            if rec.region is not None:
                per_region[rec.region] += 1
        return {"rules": len(self._rules), "measured": per_region,
                "moves": sum(rec.moves for rec in self._hosts.values())}

    # -- deciding ---------------------------------------------------------------------

    def set_rule(self, host: str, region: str | None) -> Placement:
        """An operator's rule for ``host`` (a hostname or ``host:port``; the API's
        ``PUT /hosts/{host}/policy {"region": ...}``); ``region=None`` removes the rule of
        that spelling, the config's included. Returns the host's placement after it.

        Raises :class:`ConfigError` (the API's 400) naming ``host`` or ``region``.
        """
        from crawler.policy.hostpolicy import parse_host

        target = parse_host(host)  # a *.domain rule is a config matter: this names one host
        if region is not None:
            self._known(region, "region", field_name="region")
        spec = target.spec()
        # Hosts whose region this may change: the one named, and every key of the
        # hostname the policy remembers (a hostname-wide rule covers all its ports).
        affected = {target.key} | {h for h in self._hosts if h == target.name or h.startswith(target.name + ":")}
        before = {h: self.region_of(h) for h in affected}
        self._overrides[spec] = region
        self._override_at[spec] = self._clock.wall()
        self._rebuild_rules()
        for h, was in before.items():
            if self.region_of(h) != was:
                self._hosts.setdefault(h, _Host()).moves += 1
        return self.placement(target.key)

    def measured(self, host: str, figures: Mapping[str, float | None]) -> Placement:
        """Record a measurement of ``host`` (seconds to first byte per region; None or a
        missing region: no answer from it) and return its placement.

        The measured region changes only when the fastest region is clearly faster than
        the current one: at most ``move_gain`` of its time and ``move_min_s`` less (or the
        current region got no answer). A region without an answer never wins; if no region
        answered, the host stays where it is. Ties go to the current region, then to the
        order of ``runtime.regions``. A rule in force still decides the region; the
        measurement is kept for when the rule goes.
        """
        clean: dict[str, float | None] = {r: None for r in self.regions}
        for region, secs in figures.items():
            self._known(region, "figures", field_name="region")
            if secs is not None and not (isinstance(secs, (int, float)) and math.isfinite(secs) and secs >= 0):
                raise ValueError(f"figures[{region!r}]: expected seconds >= 0 or None, got {secs!r}")
            clean[region] = None if secs is None else float(secs)
        before = self.region_of(host)
        rec = self._hosts.setdefault(host, _Host())
        current = rec.region if rec.region is not None else self.default_region
        rec.region = self._choose(current, clean)
        rec.figures = clean
        now = self._clock.wall()
        rec.measured_at = now
        rec.due_at = now + self.remeasure_s * self._rng.uniform(*REMEASURE_JITTER)
        if self.region_of(host) != before:
            rec.moves += 1
        return self.placement(host)

    def _choose(self, current: str, figures: Mapping[str, float | None]) -> str:
        answered = [(secs, r != current, i, r) for i, r in enumerate(self.regions)
                    if (secs := figures.get(r)) is not None]
        if not answered:
            return current  # nobody got an answer: nothing says another region is better
        best_secs, _, _, best = min(answered)
        if best == current:
            return current
        cur = figures.get(current)
        if cur is None:
            return best  # the current region got no answer, another one did
        # 1e-9: a margin met exactly (0.12 - 0.07 is 0.04999... in floats) counts as met.
        if best_secs <= self.move_gain * cur + 1e-9 and cur - best_secs >= self.move_min_s - 1e-9:
            return best
        return current

    # -- a host changing shards (crawler.placement.handover) -------------------------------------

    def export(self, host: str) -> dict[str, Any] | None:
        """One host's record (measurement, moves, and an operator's rule for that very
        spelling), to travel with the host; None if there is none."""
        from crawler.policy.hostpolicy import parse_host

        rec = self._hosts.get(host)
        spec = parse_host(host).spec()
        if rec is None and spec not in self._overrides:
            return None
        rec = rec or _Host()
        out: dict[str, Any] = {"region": rec.region, "figures": dict(rec.figures), "measured_at": rec.measured_at,
                               "due_at": None if math.isinf(rec.due_at) else rec.due_at, "moves": rec.moves}
        if spec in self._overrides:
            out["rule"] = [self._overrides[spec], self._override_at[spec]]
        return out

    def adopt(self, host: str, data: Mapping[str, Any]) -> None:
        """Take over a host's record from :meth:`export` (the shard it came from); its
        rule comes along as it was (the move it caused is already counted)."""
        from crawler.policy.hostpolicy import parse_host

        if data.get("rule") is not None:
            region, at = data["rule"]
            if region is None or region in self.regions:
                spec = parse_host(host).spec()
                self._overrides[spec], self._override_at[spec] = region, float(at)
                self._rebuild_rules()
        region = data.get("region")
        due = data.get("due_at")
        self._hosts[host] = _Host(
            region=region if region in self.regions else None,
            figures={r: v for r, v in dict(data.get("figures") or {}).items() if r in self.regions},
            measured_at=float(data.get("measured_at") or 0.0),
            due_at=math.inf if due is None else float(due),
            moves=int(data.get("moves") or 0),
        )

    def forget(self, host: str) -> None:
        """Drop a host's record (it lives on another shard now)."""
        self._hosts.pop(host, None)

    # -- checkpoints ------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The operator's rules and every measured or moved host, JSON-ready."""
        return {
            "version": SNAPSHOT_VERSION,
            "overrides": {spec: [region, self._override_at[spec]] for spec, region in self._overrides.items()},
            "hosts": {
                h: {"region": rec.region, "figures": rec.figures, "measured_at": rec.measured_at,
                    "due_at": None if math.isinf(rec.due_at) else rec.due_at, "moves": rec.moves}
                for h, rec in self._hosts.items()
            },
        }

    def restore(self, data: Mapping[str, Any]) -> None:
        """Replace the operator's rules and the hosts' records with a :meth:`snapshot`.

        Regions the crawl no longer has are forgotten: a rule to one is dropped (with a
        warning), a measurement in one is dropped (the host is measured again), and their
        figures are left out.
        """
        if data.get("version") != SNAPSHOT_VERSION:
            raise ValueError(f"region placement snapshot: version {data.get('version')!r}, expected {SNAPSHOT_VERSION}")
        overrides: dict[str, str | None] = {}
        override_at: dict[str, float] = {}
        for spec, (region, at) in data["overrides"].items():
            if region is not None and region not in self.regions:
                log.warning("placement: dropping the rule %s -> %s: %s is no longer one of runtime.regions",
                            spec, region, region)
                continue
            overrides[spec], override_at[spec] = region, float(at)
        hosts: dict[str, _Host] = {}
        for h, d in data["hosts"].items():
            region = d["region"] if d["region"] in self.regions else None
            due = d["due_at"]
            hosts[h] = _Host(
                region=region,
                figures={r: v for r, v in d["figures"].items() if r in self.regions},
                measured_at=float(d["measured_at"]),
                due_at=math.inf if due is None else float(due),
                moves=int(d["moves"]),
            )
        self._overrides, self._override_at, self._hosts = overrides, override_at, hosts
        self._rebuild_rules()

    # -- helpers ----------------------------------------------------------------------

    def _known(self, region: Any, key: str, *, field_name: str | None = None) -> str:
        if region not in self.regions:
            where = field_name or f"placement.{key}"
            raise ConfigError(f"{where}: {region!r} is not one of the crawl's regions ({', '.join(self.regions)})")
        return str(region)  # one of self.regions: a str already

    def _rebuild_rules(self) -> None:
        rules = dict(self._config_rules)
        for spec, region in self._overrides.items():
            if region is None:
                rules.pop(spec, None)
            else:
                rules[spec] = region
        self._rules = rules

    def _rule_for(self, host: str) -> str | None:
        """The spelling of the most specific rule covering ``host``, or None."""
        rules = self._rules
        if not rules:
            return None
        if host in rules:
            return host
        name = _name_of(host)
        if name in rules:
            return name
        if name.startswith("["):
            return None  # an IPv6 literal has no subdomains
        labels = name.split(".")
        for i in range(1, len(labels)):
            spec = "*." + ".".join(labels[i:])
            if spec in rules:
                return spec
        return None


class TimedResponse(Protocol):
    """What :func:`time_to_first_byte` reads of a response (a crawler.fetch.fetcher.FetchResult)."""

    @property
    def status(self) -> int | None: ...

    @property
    def started_at(self) -> float: ...

    @property
    def headers_at(self) -> float | None: ...


async def time_to_first_byte(fetch: Callable[[str], Awaitable[TimedResponse]], url: str, clock: Clock) -> float | None:
    """Seconds from sending a GET of ``url`` to its response headers, or None if no
    response came (timeout, refused, reset, guard).

    ``fetch`` is a :class:`crawler.fetch.fetcher.Fetcher`'s ``fetch`` (it never raises); ``url``
    the host's ``/robots.txt``: every host has that URL, it is small, and the crawl
    fetches it anyway. Any status is an answer (a 404 robots.txt still came back from the
    host). The probe is a request to the host like any other: the caller runs it through
    the host's politeness gate, one region after another, never two at once.
    """
    start = clock.now()
    result = await fetch(url)
    if result.status is None:
        return None
    if result.headers_at is not None:
        return max(0.0, result.headers_at - result.started_at)
    return max(0.0, clock.now() - start)
