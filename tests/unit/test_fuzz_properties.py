"""Property tests for what the crawler reads from users and from the web (hypothesis).

Complements the per-module properties (tests/unit/test_urls.py: normalize and join_url
alone; tests/unit/test_parse.py: parse_page alone) with what they leave out: the config
loader, the robots wrapper, the link pipeline as the engine runs it, and seeds (each
property is described where it is written, in tests.fuzz.properties). Each is a plain
``check_*`` function plus strategies; the tests here run them with small budgets (the file
takes a few seconds), ``python -m tests.fuzz.run`` runs the same ones for minutes.
"""

from __future__ import annotations

import datetime
import math
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crawler.config import settings as config
from crawler.errors import ConfigError

from tests.fuzz.properties import (
    BASES,
    CODECS,
    CONFIG_DATA,
    CONTENT_TYPES,
    ENCODINGS,
    HREF,
    HTML,
    OVERRIDES,
    PAGE_URLS,
    POLICY,
    ROBOTS_BODY,
    ROBOTS_STATUS,
    URL_PATHS,
    YAML_TEXT,
    check_config,
    check_config_file,
    check_link_pipeline,
    check_robots,
    check_url_as_seed,
)

FAST = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


# ======================================================================= the tests


@FAST
@given(data=CONFIG_DATA, overrides=OVERRIDES)
def test_config_from_dict_raises_only_config_error(data: Any, overrides: list[str]) -> None:
    check_config(data, overrides)


@settings(FAST, max_examples=60)
@given(text=YAML_TEXT, overrides=OVERRIDES)
def test_config_load_raises_only_config_error(text: str, overrides: list[str]) -> None:
    check_config_file(text, overrides)


def test_config_regressions_found_by_fuzzing(tmp_path) -> None:
    """Inputs that raised something other than ConfigError before the loader was fixed."""
    bad: list[tuple[dict[str, Any], list[str]]] = [
        ({"seeds": [datetime.date(2024, 1, 1)]}, ["limits.max_depth=3"]),  # date + override: TypeError
        ({"fetch": {"timeout_s": math.nan}}, []),  # accepted NaN
        ({"politeness": {"interval_s": math.nan}}, []),  # NaN interval: politeness off
        ({"fetch": {"backoff_s": math.inf}}, []),
        ({"limits": {}}, ["fetch.timeout_s=.nan"]),
    ]
    for data, overrides in bad:
        try:
            config.from_dict(data, overrides)
        except ConfigError as exc:
            assert "finite" in str(exc) or "expected" in str(exc), exc
        else:
            raise AssertionError(f"accepted {data!r} {overrides!r}")
    for text, fragment in [("- a\n- b\n", "top level"), ("42\n", "top level"), ("seeds_file: 5\n", "seeds_file")]:
        path = tmp_path / "c.yaml"
        path.write_text(text)
        try:
            config.load(path)
        except ConfigError as exc:
            assert fragment in str(exc), exc
        else:
            raise AssertionError(f"accepted {text!r}")


@FAST
@given(status=ROBOTS_STATUS, body=ROBOTS_BODY, truncated=st.booleans(), paths=URL_PATHS)
def test_robots_rules_never_raise_and_follow_rfc_9309(status, body, truncated, paths) -> None:
    check_robots(status, body, truncated, paths)


@FAST
@given(html=HTML, codec=CODECS, ct=CONTENT_TYPES, page_url=PAGE_URLS, policy=POLICY, depth=st.integers(0, 6))
def test_parse_normalize_and_link_policy_together(html, codec, ct, page_url, policy, depth) -> None:
    check_link_pipeline(html, codec, ct, page_url, policy, depth)


@FAST
@given(base=BASES, href=HREF, encoding=ENCODINGS)
def test_normalized_urls_are_valid_seeds_in_their_own_scope(base: str, href: str, encoding: str) -> None:
    check_url_as_seed(base, href, encoding)
