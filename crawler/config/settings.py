"""Crawl configuration: typed, frozen dataclasses loaded once from YAML.

One place holds every default (the sections' dataclasses, :mod:`crawler.config.sections`;
``configs/default.yaml`` documents each key). Loading is strict: an unknown key, a wrong
type or an impossible value raises :class:`~crawler.errors.ConfigError` naming the key,
so a typo in a config fails the run at once instead of silently using a default.

Overrides use the CLI form ``--set section.key=value``; the value is parsed as YAML
(``--set limits.max_pages=500``, ``--set fetch.resolve='{"*.test": "127.0.0.1"}'``).

This package imports no component of the crawler (only crawler.errors): what needs one to
be checked (a browser on disk, region names, placement rules, a source address, the seeds)
is checked by that component, where a crawl starts (:mod:`crawler.configcheck`).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from crawler.config.checks import check_section
from crawler.config.sections import (
    EVENT_SINKS,
    ApiConfig,
    Auto,
    DedupConfig,
    EventsConfig,
    FetchConfig,
    LimitsConfig,
    NewsConfig,
    OutputConfig,
    PlacementConfig,
    PolitenessConfig,
    RecrawlConfig,
    RenderConfig,
    RuntimeConfig,
    SitemapsConfig,
    UrlsConfig,
)
from crawler.config.typed import apply_overrides, build, to_dict
from crawler.errors import ConfigError

__all__ = [
    "EVENT_SINKS", "ApiConfig", "Auto", "CrawlConfig", "DedupConfig", "EventsConfig", "FetchConfig", "LimitsConfig",
    "NewsConfig", "OutputConfig", "PlacementConfig", "PolitenessConfig", "RecrawlConfig", "RenderConfig",
    "RuntimeConfig", "SitemapsConfig", "UrlsConfig", "from_dict", "load", "resolve_shards", "to_dict",
]


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
    recrawl: RecrawlConfig = field(default_factory=RecrawlConfig)
    sitemaps: SitemapsConfig = field(default_factory=SitemapsConfig)
    news: NewsConfig = field(default_factory=NewsConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    placement: PlacementConfig = field(default_factory=PlacementConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    api: ApiConfig = field(default_factory=ApiConfig)
    events: EventsConfig = field(default_factory=EventsConfig)
    render: RenderConfig = field(default_factory=RenderConfig)

    # --- derived values -------------------------------------------------------------

    def seed_lines(self) -> list[str]:
        """The seeds as written: ``seeds``, then the lines of ``seeds_file`` (one URL a line,
        ``#`` comments), not yet validated (crawler.configcheck.all_seeds does that, with
        crawler.urls). ConfigError if the file cannot be read as UTF-8 text."""
        raw = list(self.seeds)
        if self.seeds_file:
            try:
                text = Path(self.seeds_file).read_text(encoding="utf-8")
            except OSError as exc:
                raise ConfigError(f"seeds_file: cannot read {self.seeds_file!r}: {exc.strerror}") from exc
            except UnicodeDecodeError as exc:
                raise ConfigError(f"seeds_file: {self.seeds_file!r}: {_not_utf8(exc)}") from exc
            for line in text.splitlines():
                line = line.strip()
                if line and not line.startswith("#"):
                    raw.append(line)
        return raw

    def product_token(self) -> str:
        """The robots.txt product token of ``user_agent`` (RFC 9309 2.2.1): ``raycrawl``."""
        token = self.user_agent.split("/", 1)[0].split()[0] if self.user_agent.strip() else "raycrawl"
        return token.lower()

    def fingerprint(self) -> str:
        """A stable hash of the settings that change what a crawl fetches.

        Output, runtime, placement, recrawl, news, API, event and render settings are left
        out, and so is ``fetch.source_address``: moving the output, changing the shard
        count or the regions, tuning (or starting) recrawl or news sources, turning the API
        or rendering on continues the same crawl.
        """
        d = to_dict(self)
        for section in ("runtime", "placement", "output", "recrawl", "news", "api", "events", "render"):
            d.pop(section, None)
        d["fetch"].pop("source_address", None)  # where a node connects from, not what it fetches
        blob = json.dumps(d, sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


# ---------------------------------------------------------------------------------------
# loading (the generic part is crawler.config.typed; each section's checks, crawler.config.checks)


def _check(obj: object, prefix: str) -> None:
    """Value checks that types cannot express: the section's, and the whole config's."""
    if isinstance(obj, CrawlConfig):
        if not obj.user_agent.strip():
            raise ConfigError("user_agent: must not be empty (servers identify crawlers by it)")
    else:
        check_section(obj, prefix)


def from_dict(data: Mapping[str, Any] | None, overrides: list[str] | tuple[str, ...] = ()) -> CrawlConfig:
    """Build a config from a YAML-shaped mapping plus ``--set`` overrides."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"config: expected a mapping at the top level, got {type(data).__name__}")
    merged = apply_overrides(dict(data), overrides) if overrides else dict(data)
    return build(CrawlConfig, merged, check=_check)


def _not_utf8(exc: UnicodeDecodeError) -> str:
    """What to say of a file that is not UTF-8: where it stops being so, and the fix."""
    return f"not UTF-8 text (byte {exc.start}: {exc.object[exc.start:exc.end]!r}); save it as UTF-8"


def load(path: str | os.PathLike[str] | None, overrides: list[str] | tuple[str, ...] = ()) -> CrawlConfig:
    """Load a YAML config file (``None``: defaults only) and apply overrides."""
    data: Any = {}
    if path is not None:
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"config {str(p)!r}: cannot read it: {exc.strerror}") from exc
        except UnicodeDecodeError as exc:
            raise ConfigError(f"config {str(p)!r}: {_not_utf8(exc)}") from exc
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            # PyYAML's message spans lines (problem, context, a caret): one line here.
            raise ConfigError(f"config {str(p)!r}: not valid YAML: {' '.join(str(exc).split())}") from exc
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ConfigError(f"config {str(p)!r}: expected a mapping of settings at the top level, "
                              f"got {type(data).__name__}")
        seeds_file = data.get("seeds_file")
        if isinstance(seeds_file, str) and seeds_file and not os.path.isabs(seeds_file):
            # A seeds file is found next to the config that names it.
            data["seeds_file"] = str(p.parent / data["seeds_file"])
    return from_dict(data, overrides)


def resolve_shards(value: int | str, cpus: int) -> int:
    """``runtime.shards: auto`` means one per CPU of the cluster, at least 2."""
    if value == "auto":
        return max(2, int(cpus))
    return int(value)
