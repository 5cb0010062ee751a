"""The config as the crawl's components accept it: each checks its own slice.

:mod:`crawler.config` parses a config and checks what its values say by themselves (types,
keys, ranges); it imports no component. What only a component can judge is asked of the
component here, the way Scrapy's components read their own settings in ``from_crawler``:

* the fetcher: ``fetch.source_address`` (crawler.fetch.fetcher.check_fetch);
* placement: ``runtime.regions`` and the ``placement`` rules and regions
  (crawler.placement.regionpolicy.check_placement);
* rendering: a browser on disk when ``render.mode`` is not ``never``
  (crawler.render.settings.check_render);
* the URL code: each seed (crawler.urls.validate_seed), in :func:`all_seeds`.

Every way a crawl starts goes through :func:`check_components` before anything starts: the
CLI and ``python -m jobs.crawl`` load configs with :func:`load` (so a bad config is one line
and exit status 2 before the output folder is looked at), and
crawler.session.crawlsession.CrawlSession checks the config it is given (notebooks and
scripts build one with crawler.config.settings.from_dict). A Ray actor that rebuilds the
driver's config from a dict (actors/host_shard.py) does not check again: the driver did,
and probing for a browser in every actor would only repeat it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from crawler.config import settings
from crawler.config.settings import CrawlConfig
from crawler.fetch.fetcher import check_fetch
from crawler.placement.regionpolicy import check_placement
from crawler.render.settings import check_render
from crawler.urls import validate_seed

__all__ = ["all_seeds", "check_components", "from_dict", "load"]


def check_components(cfg: CrawlConfig) -> None:
    """Each component's checks of its slice of ``cfg``; ConfigError (one line, naming the key)
    for the first that fails. Seeds are :func:`all_seeds`'s."""
    check_fetch(cfg.fetch)
    check_placement(cfg.runtime.regions, cfg.placement)
    check_render(cfg.render)


def all_seeds(cfg: CrawlConfig) -> list[str]:
    """Seeds from ``seeds`` and ``seeds_file`` (crawler.config.settings.CrawlConfig.seed_lines),
    normalized and without repeats, in order.

    Raises :class:`~crawler.errors.SeedError` for the first malformed seed, quoting it.
    """
    out: list[str] = []
    seen: set[str] = set()
    for s in cfg.seed_lines():
        url = validate_seed(s)
        if url not in seen:
            seen.add(url)
            out.append(url)
    return out


def from_dict(data: Mapping[str, Any] | None, overrides: list[str] | tuple[str, ...] = ()) -> CrawlConfig:
    """crawler.config.settings.from_dict, then :func:`check_components`."""
    cfg = settings.from_dict(data, overrides)
    check_components(cfg)
    return cfg


def load(path: str | os.PathLike[str] | None, overrides: list[str] | tuple[str, ...] = ()) -> CrawlConfig:
    """crawler.config.settings.load (a YAML file, ``None``: defaults only), then :func:`check_components`."""
    cfg = settings.load(path, overrides)
    check_components(cfg)
    return cfg
