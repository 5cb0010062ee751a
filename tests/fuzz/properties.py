"""The crawler's properties for what it reads from users and from the web, shared by the
property tests (tests/unit/test_fuzz_properties.py, small budgets, in CI) and the long
fuzz runs (``python -m tests.fuzz.run``).

Each property is a plain ``check_*`` function plus strategies, listed in
:data:`PROPERTIES`:

* the config loader: any YAML-shaped mapping, ``--set`` overrides and YAML text either
  load into a usable config or raise :class:`~crawler.errors.ConfigError` (never a
  TypeError/AttributeError/KeyError), and a loaded config round-trips;
* the robots wrapper: any status and bytes give rules whose ``allowed`` answers a bool
  for any URL, agree with RFC 9309's status table, and survive snapshot/restore;
* the link pipeline as the engine runs it: HTML with hostile hrefs -> parse_page ->
  the config's normalizer -> LinkPolicy.decide/follow: never raises, every followed URL
  re-parses with urllib and is a fixed point of the normalizer;
* seeds: any normalized URL is a valid seed that normalizes to itself and is in its own
  host scope.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import string
import tempfile
import types
import typing
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Literal, Mapping, Union
from urllib.parse import urlsplit

import yaml
from hypothesis import strategies as st

from crawler import configcheck
from crawler.counters import DropReason
from crawler.config import settings as config
from crawler.clock import MockClock
from crawler.engine.partbuilders import build_fetcher, build_link_policy
from crawler.errors import ConfigError
from crawler.parse import parse_page
from crawler.policy.politeness import Politeness
from crawler.robots import RobotsCache
from crawler.policy.hostbudget import HostBudget
from crawler.urls import Scope, host_key, join_url, normalize, origin, validate_seed

UA = "raycrawl/0.1 (+https://example.org/bot)"


# ============================================================================ config

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.binary(max_size=6),  # YAML !!binary
    st.dates(),  # YAML timestamps: "seeds: [2024-01-01]" is a date, not a string
    st.sampled_from(["auto", "host", "domain", "any", "127.0.0.1", "10.0.0.0/8", "*.test", "http://ex.com/", ""]),
)
#: Any YAML-ish value: scalars, lists, mappings (keys not always strings).
ANY_VALUE = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.one_of(st.text(max_size=8), st.integers(-3, 3)), inner, max_size=3),
    ),
    max_leaves=8,
)

_HOST_KEYS = st.sampled_from(["a.test", "*.test", "*.a.b", "localhost", "", " ", "*", "1.2.3.4", "a b", "x:1", "[::1]"])
_IPS = st.sampled_from(["127.0.0.1", "::1", "[::1]", "10.1.2.3", "999.1.1.1", "x", "", "2001:db8::1"])


def _typed(tp: Any) -> st.SearchStrategy[Any]:
    """Mostly well-typed values for a config field annotation, sometimes anything."""
    origin_ = typing.get_origin(tp)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _section(tp)
    if origin_ is Literal:
        return st.sampled_from(typing.get_args(tp))
    if origin_ in (Union, types.UnionType):
        return st.one_of([_typed(a) for a in typing.get_args(tp)])
    if tp is type(None):
        return st.none()
    if tp is bool:
        return st.booleans()
    if tp is int:
        return st.integers(min_value=-2, max_value=100_000)
    if tp is float:
        return st.one_of(st.floats(min_value=-1, max_value=1e5), st.sampled_from([math.nan, math.inf, 10**400]))
    if tp is str:
        return st.text(max_size=16)
    if origin_ is tuple:
        return st.lists(_typed(typing.get_args(tp)[0]), max_size=3)
    if origin_ is not None and issubclass(origin_, Mapping):
        kt, vt = typing.get_args(tp)
        if vt is str:  # fetch.resolve
            return st.dictionaries(_HOST_KEYS, _IPS, max_size=3)
        return st.dictionaries(st.text(max_size=6), ANY_VALUE, max_size=3)
    return ANY_VALUE


def _section(cls: type) -> st.SearchStrategy[dict[str, Any]]:
    hints = typing.get_type_hints(cls)
    optional: dict[str, st.SearchStrategy[Any]] = {}
    for f in dataclasses.fields(cls):
        if f.name == "seeds_file":  # a path the loader would read: never a random one
            optional[f.name] = st.none()
        elif f.name == "seeds":
            seed = st.one_of(st.sampled_from(SEEDISH), st.text(max_size=20), ANY_VALUE)
            optional[f.name] = st.lists(seed, max_size=3)
        else:
            optional[f.name] = st.one_of(_typed(hints[f.name]), _typed(hints[f.name]), ANY_VALUE)
    optional["no_such_key"] = ANY_VALUE  # unknown keys must be refused by name
    return st.fixed_dictionaries({}, optional=optional)


SEEDISH = ["http://ex.com/", "https://a.test:8443/x?y=1", "ex.com", "ftp://x/", "http://[::1]/", "http://", "héllo"]
CONFIG_DATA = st.one_of(_section(config.CrawlConfig), ANY_VALUE)

_KEY_PATHS = st.one_of(
    st.sampled_from(
        ["limits.max_pages", "fetch.resolve", "fetch", "politeness.interval_s", "seeds", "scope",
         "urls.tracking_params", "runtime.shards", "fetch.resolve.a.test", "limits", "", ".", "a..b",
         "output.storage_options.key"]
    ),
    st.text(alphabet=string.ascii_lowercase + "._", max_size=16),
)
_YAML_VALUES = st.one_of(
    st.sampled_from(["1", "-1", "1.5", ".nan", ".inf", "true", "null", "~", "[1, 2]", "{a: 1}", '{"*.test": 127.0.0.1}',
                     "2024-01-01", "'x'", "[", "{", ": :", "!!binary aGk=", "!!python/object:os.system x", ""]),
    st.text(max_size=12),
)
OVERRIDES = st.lists(
    st.one_of(st.builds(lambda k, v: f"{k}={v}", _KEY_PATHS, _YAML_VALUES), st.text(max_size=16)), max_size=3
)


def check_config(data: Any, overrides: list[str]) -> None:
    """from_dict raises only ConfigError; a config it returns is usable and round-trips."""
    try:
        cfg = configcheck.from_dict(data, overrides)
    except ConfigError:
        return
    as_dict = config.to_dict(cfg)
    json.dumps(as_dict, allow_nan=False)  # stats.json embeds it; NaN/inf mean nothing here
    assert config.from_dict(as_dict) == cfg
    assert len(cfg.fingerprint()) == 16
    # What the engine builds from a config either works or says what to fix.
    try:
        seeds = configcheck.all_seeds(cfg)
        build_link_policy(cfg, seeds)
        build_fetcher(cfg)
        pol = cfg.politeness
        Politeness(pol.interval_s, pol.max_interval_s, clock=MockClock(), backoff_factor=pol.backoff_factor,
                   recovery_factor=pol.recovery_factor, retry_after_cap_s=pol.retry_after_cap_s)
        RobotsCache(cfg.user_agent, ttl_s=pol.robots_ttl_s, error_ttl_s=pol.robots_error_ttl_s, clock=MockClock())
        HostBudget(cfg.limits.max_pages_per_host, novelty_window=cfg.dedup.novelty_window,
                   novelty_threshold=cfg.dedup.novelty_threshold)
    except ConfigError:
        pass


YAML_TEXT = st.one_of(
    ANY_VALUE.map(lambda v: yaml.safe_dump(v, allow_unicode=True) if not isinstance(v, bytes) else "x: !!binary aGk="),
    _section(config.CrawlConfig).map(lambda v: yaml.safe_dump(_yaml_safe(v))),
    st.text(max_size=60),
    st.sampled_from(["- a\n- b\n", "42\n", "seeds_file: 5\n", "seeds_file: [a]\n", "{1: 2}\n", "a: [\n", "\t",
                     "---\n---\n", "seeds: [2024-01-01]\nlimits: {max_depth: 2}\n", "fetch: {timeout_s: .nan}\n"]),
)


def _yaml_safe(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _yaml_safe(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_yaml_safe(x) for x in v]
    return v


def check_config_file(text: str, overrides: list[str]) -> None:
    """load() on any YAML text raises only ConfigError."""
    fd, path = tempfile.mkstemp(suffix=".yaml")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogatepass") as f:
            f.write(text)
        try:
            config.load(path, overrides)
        except ConfigError:
            pass
    finally:
        os.unlink(path)


# ============================================================================ robots

ORIGIN = "https://ex.com"
_DIRECTIVES = ["User-agent", "user-agent", "USER-AGENT", "Disallow", "disallow", "Allow", "Crawl-delay", "Request-rate",
               "Sitemap", "Host", "Noindex", "Clean-param", "", "#", "\ufeffUser-agent"]
_AGENTS = ["*", "raycrawl", "RayCrawl", "ray", "raycrawl/0.1", "raycrawlx", "other", "", "* raycrawl"]
_PATH_BITS = ["/", "*", "$", "%", "%2F", "%2f", "%zz", "é", "%C3%A9", "?", "#", "a", "b", "/*", "..", ".", "\x00", " ",
              "private", "/a", "=", "&", "~", "\t", "\\"]
_VALUES = st.one_of(st.sampled_from(_AGENTS), st.lists(st.sampled_from(_PATH_BITS), max_size=6).map("".join),
                    st.sampled_from(["1", "0", "-5", "1e9", "nan", "inf", "2/10s", "0/0", "1/0s", "x/ys", "10"]),
                    st.text(max_size=10))
_LINE = st.builds(lambda d, sep, v: f"{d}{sep}{v}", st.sampled_from(_DIRECTIVES),
                  st.sampled_from([":", ": ", " : ", "", "::", ":\t"]), _VALUES)
ROBOTS_BODY = st.one_of(
    st.builds(lambda lines, eol: eol.join(lines).encode("utf-8", "surrogatepass"),
              st.lists(_LINE, max_size=12), st.sampled_from(["\n", "\r\n", "\r"])),
    st.binary(max_size=300),
    st.lists(_LINE, max_size=6).map(lambda ls: "\n".join(ls).encode("utf-16", "surrogatepass")),
)
ROBOTS_STATUS = st.sampled_from([200, 204, 299, 301, 304, 404, 403, 410, 429, 500, 503, 599, None, 0, 99, 600, -1])
URL_PATHS = st.lists(st.lists(st.sampled_from(_PATH_BITS), max_size=8).map(lambda bits: "/" + "".join(bits)),
                     min_size=1, max_size=5)


def check_robots(status: int | None, body: bytes, truncated: bool, paths: list[str]) -> None:
    """Rules from any response answer a bool for any URL, follow RFC 9309's status table
    and survive snapshot/restore."""
    clock = MockClock(start=100.0)
    cache = RobotsCache(UA, clock=clock)
    rules = cache.from_response(ORIGIN, status, body, truncated=truncated)
    urls = [ORIGIN + p for p in paths]
    verdicts = [cache.allowed(u, ORIGIN) for u in urls]
    assert all(v is True or v is False for v in verdicts)
    assert [rules.allowed(u) for u in urls] == verdicts
    assert cache.allowed(ORIGIN + "/robots.txt", ORIGIN) is True  # RFC 9309 2.2.2
    if status is not None and (300 <= status < 400 or (400 <= status < 500 and status != 429)):
        assert all(verdicts), "4xx (and a final 3xx) mean no robots.txt: allow all (2.3.1.3)"
    elif status is None or not 200 <= status < 300:
        assert not any(v for u, v in zip(urls, verdicts) if urlsplit(u).path != "/robots.txt"), \
            "unreachable robots.txt means disallow all (2.3.1.4)"
    delay = cache.crawl_delay(ORIGIN)
    assert delay is None or (math.isfinite(delay) and delay >= 0)
    # A snapshot (as JSON, in another process with another clock) gives the same answers.
    other = RobotsCache(UA, clock=MockClock(start=5.0))
    assert other.restore(json.loads(json.dumps(cache.snapshot()))) == 1
    assert [other.allowed(u, ORIGIN) for u in urls] == verdicts
    assert other.crawl_delay(ORIGIN) == delay


# ========================================================================= links

_HREF_BITS = ["http://", "https://", "//", "/", "../", "./", "..", ".", "?", "#", "&", "=", "%", "%2e", "%2F", "%zz",
              "%00", "a", "ex.com", "EX.COM", ":", ":80", ":443", ":99999", "@", "u:p@", "[::1]", "[::ffff:1.2.3.4]",
              "[zz]", "0x7f.1", "127.1", "xn--", "xn--bcher-kva.de", "bücher", "中", "\u200d", "\ufffd", " ", "\t",
              "\n", "\r", "\x00", "\x7f", "\\", "javascript:", "mailto:a@b", "data:,x", "HTTP:", "h\tttp:",
              "utm_source=x", "&amp;", "&#0;", "&#x2F;", "&lt;", '"', "'", "`", "<", ">", "{}", "|", "^"]
HREF = st.one_of(st.lists(st.sampled_from(_HREF_BITS), max_size=10).map("".join), st.text(max_size=30))


_TAG = st.one_of(
    st.builds(lambda h, q, rel: f"<a href={q.format(h)}{rel}>x</a>", HREF, st.sampled_from(['"{}"', "'{}'", "{}"]),
              st.sampled_from(["", " rel=nofollow", " rel='ugc NOFOLLOW'", " rel"])),
    st.builds(lambda h: f'<area href="{h}">', HREF),
    st.builds(lambda h: f'<base href="{h}">', HREF),
    st.sampled_from(['<meta name="robots" content="nofollow">', '<meta name=raycrawl content="none">',
                     '<meta charset="windows-1251">',
                     '<meta http-equiv="content-type" content="text/html; charset=sjis">',
                     "<a>no href</a>", "<a href>", "<!-- <a href=/c> -->", "<script>'<a href=/s>'</script>",
                     "<template><a href=/t></template>", "<noscript><a href=/n></noscript>", "<div><p><b>", "</a>",
                     "<svg><a href=/svg></a></svg>", "\x00", "\ufeff", "<a href=/" + "x" * 300 + ">"]),
    st.text(max_size=10),
)
HTML = st.lists(_TAG, max_size=12).map("".join)
CODECS = st.sampled_from(["utf-8", "utf-16-le", "cp1251", "shift_jis", "latin-1"])
CONTENT_TYPES = st.sampled_from([None, "text/html", "text/html; charset=windows-1251", "text/html; charset=utf-16be",
                                 "application/xhtml+xml", 'text/html; charset="bogus'])
PAGE_URLS = st.sampled_from(["http://ex.com/a/b", "https://ex.com:8443/dir/", "http://[::1]:8080/x/y?z",
                             "http://xn--bcher-kva.de/", "http://ex.com/a?q=1", "https://sub.ex.co.uk/p/../q"])
POLICY = st.fixed_dictionaries({
    "scope": st.sampled_from(["host", "domain", "any"]),
    "limits": st.fixed_dictionaries({
        "max_depth": st.one_of(st.none(), st.integers(0, 5)),
        "max_url_length": st.one_of(st.none(), st.integers(10, 300)),
        "max_query_params": st.one_of(st.none(), st.integers(0, 4)),
        "max_path_repeats": st.one_of(st.none(), st.integers(1, 3)),
    }),
    "urls": st.fixed_dictionaries({
        "sort_query": st.booleans(),
        "follow_rel_nofollow": st.booleans(),
        "tracking_params": st.one_of(
            st.none(), st.lists(st.sampled_from(["utm_*", "q", "x", "*", "fbclid"]), max_size=3)
        ),
    }),
})


def _assert_canonical(url: str, normalizer: Callable[[str], str | None]) -> None:
    parts = urlsplit(url)  # urllib accepts it...
    assert parts.scheme in ("http", "https") and parts.hostname, url
    _ = parts.port  # ...including the port (reading it raises ValueError otherwise)
    assert not parts.fragment and "#" not in url
    assert url.isascii() and url.isprintable() and " " not in url, url
    assert normalizer(url) == url, url  # a fixed point: the seen set sees one spelling


def check_link_pipeline(html: str, codec: str, ct: str | None, page_url: str, policy: dict, depth: int) -> None:
    """parse -> normalize -> LinkPolicy, as the engine runs them, on hostile HTML."""
    cfg = config.from_dict({"seeds": [page_url], **policy})
    links = build_link_policy(cfg, configcheck.all_seeds(cfg))
    body = html.encode(codec, "replace")
    page = parse_page(body, page_url, ct, user_agent_token="raycrawl", max_links=40)
    assert page.error is None, page.error
    for link in page.links:
        if link.resolved is not None:
            url = links.normalizer(link.resolved)
            if url is not None:
                _assert_canonical(url, links.normalizer)
    decisions = links.decide(page, depth)
    assert len(decisions) == len(page.links)
    followed = [d.url for d in decisions if d.followed]
    assert len(set(followed)) == len(followed)
    counts: Counter[DropReason] = Counter()
    assert links.follow(page, depth, counts) == followed  # `crawl links` and the crawl agree
    assert sum(counts.values()) == len(decisions) - len(followed)  # every drop has a reason
    # ... and the same reason per link: follow() decides a repeated link once, decide() each time.
    assert counts == Counter(d.reason for d in decisions if not d.followed)
    for d in decisions:
        assert d.followed == (d.reason is None)
        if d.followed:
            assert d.url is not None and links.scope.allows(d.url)
            assert links.traps.check(d.url, depth) is None
            _assert_canonical(d.url, links.normalizer)


# ========================================================================== urls

BASES = st.one_of(PAGE_URLS, HREF)
ENCODINGS = st.sampled_from(["utf-8", "windows-1251", "shift_jis", "gb18030", "iso-8859-1", "bogus", ""])


def check_url_as_seed(base: str, href: str, encoding: str) -> None:
    """join -> normalize; a normalized URL is a valid seed of itself and in its own scope."""
    joined = join_url(base, href, encoding)
    if joined is None:
        return
    url = normalize(joined)
    if url is None:
        return
    _assert_canonical(url, normalize)
    assert validate_seed(url) == url
    assert Scope("host", [url]).allows(url) and Scope("domain", [url]).allows(url)
    org, key = origin(url), host_key(url)
    assert url.startswith(org) and url[len(org):].startswith("/") and org.endswith(key)


# ==================================================================== the registry


@dataclass(frozen=True)
class Property:
    """One property: its ``check`` function and a strategy per argument."""

    name: str
    target: str  # "urls" | "parse" | "robots" | "config"
    check: Callable[..., None]
    strategies: dict[str, st.SearchStrategy[Any]]


PROPERTIES: list[Property] = [
    Property("config.from_dict", "config", check_config, {"data": CONFIG_DATA, "overrides": OVERRIDES}),
    Property("config.load", "config", check_config_file, {"text": YAML_TEXT, "overrides": OVERRIDES}),
    Property("robots", "robots", check_robots,
             {"status": ROBOTS_STATUS, "body": ROBOTS_BODY, "truncated": st.booleans(), "paths": URL_PATHS}),
    Property("links.pipeline", "parse", check_link_pipeline,
             {"html": HTML, "codec": CODECS, "ct": CONTENT_TYPES, "page_url": PAGE_URLS, "policy": POLICY,
              "depth": st.integers(0, 6)}),
    Property("urls.seed", "urls", check_url_as_seed, {"base": BASES, "href": HREF, "encoding": ENCODINGS}),
]
TARGETS = ("urls", "parse", "robots", "config")
