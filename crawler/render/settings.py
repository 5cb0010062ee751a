"""The ``render`` section of the crawl config, as the render code sees it.

The section is declared with the others (crawler.config.sections.RenderConfig, which
``configs/default.yaml`` documents key by key) and its values are checked when the config
is loaded (crawler.config.checks.validate_render). What only the render code can tell, that
a browser is there to run, is :func:`check_render`, which crawler.configcheck runs before a
crawl starts.
"""

from __future__ import annotations

from crawler.config.sections import MIN_ACTOR_CPUS, RESOURCE_TYPES, RenderConfig
from crawler.render.browser import find_browser

__all__ = ["MIN_ACTOR_CPUS", "RESOURCE_TYPES", "RenderConfig", "check_render"]


def check_render(render: RenderConfig) -> None:
    """With rendering on, a browser must be there: none fails the crawl at start, on one
    line saying how to install one (ConfigError, from crawler.render.browser.find_browser)."""
    if render.mode != "never":
        find_browser(render.browser)
