"""Crawl configuration: typed, frozen dataclasses loaded once from YAML.

One place holds every default (the dataclass fields below; ``configs/default.yaml``
documents each key). Loading is strict: an unknown key, a wrong type or an impossible
value raises :class:`~crawler.errors.ConfigError` naming the key, so a typo in a config
fails the run at once instead of silently using a default.

Overrides use the CLI form ``--set section.key=value``; the value is parsed as YAML
(``--set limits.max_pages=500``, ``--set fetch.resolve='{"*.test": "127.0.0.1"}'``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping, Union

import yaml

from crawler.errors import ConfigError, SeedError

Auto = Literal["auto"]


@dataclass(frozen=True)
class UrlsConfig:
    """How discovered links are canonicalized and which are followed."""

    tracking_params: tuple[str, ...] | None = None  # None: crawler.urls.DEFAULT_TRACKING_PARAMS
    sort_query: bool = False
    follow_rel_nofollow: bool = False
    max_links_per_page: int = 5000


@dataclass(frozen=True)
class LimitsConfig:
    """Crawl budgets and spider-trap caps (None disables a cap)."""

    max_pages: int | None = None
    max_depth: int | None = 16
    max_pages_per_host: int | None = 100_000
    max_url_length: int | None = 2048
    max_query_params: int | None = 12
    max_path_repeats: int | None = 3
    max_body_bytes: int = 10_000_000


@dataclass(frozen=True)
class PolitenessConfig:
    """Per-host pacing and robots.txt (RFC 9309)."""

    interval_s: float = 1.0
    respect_robots: bool = True
    robots_ttl_s: float = 86_400.0
    robots_error_ttl_s: float = 600.0
    max_interval_s: float = 60.0
    backoff_factor: float = 2.0
    recovery_factor: float = 0.8
    retry_after_cap_s: float = 3600.0


@dataclass(frozen=True)
class FetchConfig:
    """HTTP client behaviour."""

    timeout_s: float = 10.0
    connect_timeout_s: float = 5.0
    attempts: int = 3
    backoff_s: float = 2.0
    max_backoff_s: float = 600.0
    resolve: Mapping[str, str] = field(default_factory=dict)
    dns_ttl_s: float = 300.0
    dns_negative_ttl_s: float = 60.0
    max_in_flight: int = 256
    ssrf_guard: bool = True
    allow_networks: tuple[str, ...] = ()


@dataclass(frozen=True)
class DedupConfig:
    """Seen-URL set and duplicate-content detection."""

    simhash_distance: int = 3
    simhash_tables: int = 4
    min_text_tokens: int = 20
    seen_capacity: int = 10_000_000
    seen_error_rate: float = 0.01
    seen_exact: bool = True
    seen_bloom: Literal["pybloom", "rbloom"] = "pybloom"
    novelty_window: int = 20
    novelty_threshold: float = 0.5


@dataclass(frozen=True)
class RuntimeConfig:
    """How the crawl is spread over processes (Ray) and how batches move."""

    shards: int | Auto = "auto"
    seen_shards: int | Auto = "auto"
    address: str | None = None
    batch_size: int = 1000
    link_flush_interval_s: float = 0.05
    content_batch_size: int = 256
    content_batch_delay_s: float = 0.05
    budget_lease_max: int = 256
    progress_interval_s: float = 1.0
    frontier_window: int = 4
    state_dir: str | None = None
    checkpoint_interval_s: float = 10.0
    state_ship_interval_s: float = 60.0
    content_snapshot_interval_s: float = 30.0
    content_shards: int = 1
    lease_ttl_s: float = 6.0
    driver_timeout_s: float = 1.5
    max_restarts: int = 5


@dataclass(frozen=True)
class OutputConfig:
    """Where results go (a local folder or any fsspec URL such as s3://bucket/prefix)."""

    path: str = "./crawl-out"
    rows_per_file: int = 5000
    row_flush_interval_s: float = 1.0
    outbox_interval_s: float = 0.25
    blob_compresslevel: int = 1
    store_bodies: bool = True
    storage_options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CrawlConfig:
    """The whole crawl configuration."""

    seeds: tuple[str, ...] = ()
    seeds_file: str | None = None
    scope: Literal["host", "domain", "any"] = "host"
    user_agent: str = "raycrawl/0.1 (+https://github.com/raycrawl/raycrawl)"
    urls: UrlsConfig = field(default_factory=UrlsConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    politeness: PolitenessConfig = field(default_factory=PolitenessConfig)
    fetch: FetchConfig = field(default_factory=FetchConfig)
    dedup: DedupConfig = field(default_factory=DedupConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    output: OutputConfig = field(default_factory=OutputConfig)

    # --- derived values -------------------------------------------------------------

    def all_seeds(self) -> list[str]:
        """Seeds from ``seeds`` and ``seeds_file`` (one URL a line, ``#`` comments), validated.

        Raises :class:`SeedError` for the first malformed seed, quoting it.
        """
        from crawler.urls import validate_seed

        raw = list(self.seeds)
        if self.seeds_file:
            try:
                text = Path(self.seeds_file).read_text(encoding="utf-8")
            except OSError as exc:
                raise ConfigError(f"seeds_file: cannot read {self.seeds_file!r}: {exc.strerror}") from exc
            for line in text.splitlines():
                line = line.strip()
                if line and not line.startswith("#"):
                    raw.append(line)
        out: list[str] = []
        seen: set[str] = set()
        for s in raw:
            url = validate_seed(s)
            if url not in seen:
                seen.add(url)
                out.append(url)
        return out

    def product_token(self) -> str:
        """The robots.txt product token of ``user_agent`` (RFC 9309 2.2.1): ``raycrawl``."""
        token = self.user_agent.split("/", 1)[0].split()[0] if self.user_agent.strip() else "raycrawl"
        return token.lower()

    def fingerprint(self) -> str:
        """A stable hash of the settings that change what a crawl fetches.

        Output and runtime settings are left out: moving the output or changing the
        shard count does not make a different crawl.
        """
        d = to_dict(self)
        d.pop("runtime", None)
        d.pop("output", None)
        blob = json.dumps(d, sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


# ---------------------------------------------------------------------------------------
# loading


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in typing.get_args(tp))
    if origin in (Union, types.UnionType):
        return " | ".join(_type_name(a) for a in typing.get_args(tp))
    if origin in (tuple, list):
        return "list of " + _type_name(typing.get_args(tp)[0])
    if origin in (dict, Mapping, typing.get_origin(Mapping[str, str])):
        return "mapping"
    if tp is type(None):
        return "null"
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Check ``value`` against the annotation ``tp``; return the typed value."""
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if value is None:
            return tp()
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key}: expected a mapping of settings, got {type(value).__name__}")
        return _build(tp, value, key + ".")
    if origin is Literal:
        if value in typing.get_args(tp):
            return value
        raise ConfigError(f"{key}: expected one of {_type_name(tp)}, got {value!r}")
    if origin in (Union, types.UnionType):
        errors = []
        for arg in typing.get_args(tp):
            try:
                return _coerce(value, arg, key)
            except ConfigError as exc:
                errors.append(exc)
        raise ConfigError(f"{key}: expected {_type_name(tp)}, got {value!r}")
    if tp is type(None):
        if value is None:
            return None
        raise ConfigError(f"{key}: expected null")
    if origin is tuple:
        if isinstance(value, str) or not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {type(value).__name__}")
        (item_tp, *_rest) = typing.get_args(tp)
        return tuple(_coerce(v, item_tp, f"{key}[{i}]") for i, v in enumerate(value))
    if origin is not None and issubclass(origin, Mapping):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key}: expected a mapping, got {type(value).__name__}")
        kt, vt = typing.get_args(tp)
        return {str(_coerce(k, kt, key)): _coerce(v, vt, f"{key}.{k}") for k, v in value.items()}
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                number = float(value)
            except OverflowError:  # an int too large for a float
                number = math.inf
            # YAML's .nan / .inf parse as floats; no setting means anything with them
            # (a NaN interval would silently disable politeness comparisons).
            if not math.isfinite(number):
                raise ConfigError(f"{key}: expected a finite number, got {value!r}")
            return number
        raise ConfigError(f"{key}: expected a number, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{key}: expected a string, got {value!r}")
    raise ConfigError(f"{key}: unsupported setting type {_type_name(tp)}")  # pragma: no cover


def _build(cls: type, data: Mapping[str, Any], prefix: str = "") -> Any:
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(map(str, data)) - names)
    if unknown:
        raise ConfigError(
            f"unknown setting {prefix}{unknown[0]} (known keys here: {', '.join(sorted(names))})"
        )
    kwargs = {name: _coerce(data[name], hints[name], prefix + name) for name in names if name in data}
    obj = cls(**kwargs)
    _validate(obj, prefix)
    return obj


def _positive(obj: Any, prefix: str, *names: str, allow_zero: bool = False) -> None:
    for n in names:
        v = getattr(obj, n)
        if v is None:
            continue
        if v < 0 or (v == 0 and not allow_zero):
            raise ConfigError(f"{prefix}{n}: must be {'>= 0' if allow_zero else '> 0'}, got {v!r}")


def _validate(obj: Any, prefix: str) -> None:
    """Value checks that types cannot express."""
    if isinstance(obj, LimitsConfig):
        _positive(obj, prefix, "max_pages", "max_pages_per_host", "max_url_length", "max_body_bytes", "max_path_repeats")
        _positive(obj, prefix, "max_depth", "max_query_params", allow_zero=True)
    elif isinstance(obj, PolitenessConfig):
        _positive(obj, prefix, "robots_ttl_s", "robots_error_ttl_s", "max_interval_s")
        _positive(obj, prefix, "interval_s", allow_zero=True)
        if obj.backoff_factor < 1.0:
            raise ConfigError(f"{prefix}backoff_factor: must be >= 1.0, got {obj.backoff_factor}")
        if not 0.0 < obj.recovery_factor <= 1.0:
            raise ConfigError(f"{prefix}recovery_factor: must be in (0, 1], got {obj.recovery_factor}")
        if obj.max_interval_s < obj.interval_s:
            raise ConfigError(
                f"{prefix}max_interval_s: must be >= interval_s ({obj.interval_s}), got {obj.max_interval_s}"
            )
    elif isinstance(obj, FetchConfig):
        _positive(obj, prefix, "timeout_s", "connect_timeout_s", "attempts", "max_in_flight", "max_backoff_s")
        _positive(obj, prefix, "backoff_s", "dns_ttl_s", "dns_negative_ttl_s", allow_zero=True)
        import ipaddress

        for name, ip in obj.resolve.items():
            try:
                ipaddress.ip_address(ip)
            except ValueError as exc:
                raise ConfigError(
                    f"{prefix}resolve.{name}: expected an IP address like 127.0.0.1, got {ip!r}"
                ) from exc
        for net in obj.allow_networks:
            try:
                ipaddress.ip_network(net, strict=False)
            except ValueError as exc:
                raise ConfigError(f"{prefix}allow_networks: {net!r} is not a network like 10.0.0.0/8") from exc
    elif isinstance(obj, DedupConfig):
        if not 0 <= obj.simhash_distance <= 16:
            raise ConfigError(f"{prefix}simhash_distance: must be in 0..16, got {obj.simhash_distance}")
        if obj.simhash_tables < obj.simhash_distance + 1:
            raise ConfigError(
                f"{prefix}simhash_tables: must be >= simhash_distance + 1 ({obj.simhash_distance + 1}) "
                "so every near-duplicate shares one exact block"
            )
        if not 0.0 < obj.seen_error_rate < 1.0:
            raise ConfigError(f"{prefix}seen_error_rate: must be in (0, 1), got {obj.seen_error_rate}")
        _positive(obj, prefix, "seen_capacity", "novelty_window")
    elif isinstance(obj, RuntimeConfig):
        for n in ("shards", "seen_shards"):
            v = getattr(obj, n)
            if v != "auto" and v < 1:
                raise ConfigError(f"{prefix}{n}: must be 'auto' or >= 1, got {v!r}")
        _positive(
            obj, prefix, "batch_size", "link_flush_interval_s", "content_batch_size", "content_batch_delay_s",
            "budget_lease_max", "progress_interval_s", "frontier_window", "checkpoint_interval_s",
            "state_ship_interval_s", "content_snapshot_interval_s", "lease_ttl_s", "driver_timeout_s",
            "content_shards",
        )
        _positive(obj, prefix, "max_restarts", allow_zero=True)
    elif isinstance(obj, OutputConfig):
        if not obj.path:
            raise ConfigError(f"{prefix}path: must not be empty")
        _positive(obj, prefix, "rows_per_file", "row_flush_interval_s", "outbox_interval_s")
        if not 0 <= obj.blob_compresslevel <= 9:
            raise ConfigError(f"{prefix}blob_compresslevel: must be a compression level 0-9, got {obj.blob_compresslevel}")
    elif isinstance(obj, CrawlConfig):
        if not obj.user_agent.strip():
            raise ConfigError("user_agent: must not be empty (servers identify crawlers by it)")


def parse_override(item: str) -> tuple[list[str], Any]:
    """Split ``section.key=value`` into a key path and a YAML-parsed value."""
    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected section.key=value")
    key, _, raw = item.partition("=")
    path = [p for p in key.strip().split(".") if p]
    if not path:
        raise ConfigError(f"--set {item!r}: empty key")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as exc:
        raise ConfigError(f"--set {item!r}: value is not valid YAML: {exc}") from exc
    return path, value


def _copy_tree(value: Any) -> Any:
    """Copy the dict/list structure (values as they are): overrides mutate the copy.

    Not a JSON round trip: YAML values such as dates are not JSON, and they must reach
    the type checks (which name the key) rather than fail here with a TypeError.
    """
    if isinstance(value, Mapping):
        return {k: _copy_tree(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_copy_tree(v) for v in value]
    return value


def apply_overrides(data: dict[str, Any], overrides: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """Return ``data`` with each ``section.key=value`` override applied (a deep copy)."""
    out = _copy_tree(data) if data else {}
    for item in overrides:
        path, value = parse_override(item)
        node = out
        for p in path[:-1]:
            nxt = node.get(p)
            if nxt is None:
                nxt = node[p] = {}
            if not isinstance(nxt, dict):
                raise ConfigError(f"--set {item!r}: {p} is not a section")
            node = nxt
        node[path[-1]] = value
    return out


def from_dict(data: Mapping[str, Any] | None, overrides: list[str] | tuple[str, ...] = ()) -> CrawlConfig:
    """Build a config from a YAML-shaped mapping plus ``--set`` overrides."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"config: expected a mapping at the top level, got {type(data).__name__}")
    merged = apply_overrides(dict(data), overrides) if overrides else dict(data)
    return _build(CrawlConfig, merged)


def load(path: str | os.PathLike[str] | None, overrides: list[str] | tuple[str, ...] = ()) -> CrawlConfig:
    """Load a YAML config file (``None``: defaults only) and apply overrides."""
    data: Any = {}
    if path is not None:
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"config {str(p)!r}: cannot read it: {exc.strerror}") from exc
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"config {str(p)!r}: not valid YAML: {exc}") from exc
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ConfigError(f"config {str(p)!r}: expected a mapping of settings at the top level, "
                              f"got {type(data).__name__}")
        seeds_file = data.get("seeds_file")
        if isinstance(seeds_file, str) and seeds_file and not os.path.isabs(seeds_file):
            # A seeds file is found next to the config that names it.
            data["seeds_file"] = str(p.parent / data["seeds_file"])
    try:
        return from_dict(data, overrides)
    except SeedError:
        raise


def to_dict(cfg: Any) -> dict[str, Any]:
    """A JSON/YAML-ready dict of a config (tuples become lists)."""

    def conv(v: Any) -> Any:
        if dataclasses.is_dataclass(v):
            return {f.name: conv(getattr(v, f.name)) for f in dataclasses.fields(v)}
        if isinstance(v, (tuple, list)):
            return [conv(x) for x in v]
        if isinstance(v, Mapping):
            return {str(k): conv(x) for k, x in v.items()}
        return v

    return conv(cfg)


def resolve_shards(value: int | str, cpus: int) -> int:
    """``runtime.shards: auto`` means one per CPU of the cluster, at least 2."""
    if value == "auto":
        return max(2, int(cpus))
    return int(value)
