"""Config loading: strict keys and types, --set overrides, the documented defaults file."""

from pathlib import Path

import pytest
import yaml

from crawler import configcheck
from crawler.config import settings as config
from crawler.errors import ConfigError, SeedError

ROOT = Path(__file__).resolve().parents[2]


def test_default_yaml_documents_exactly_the_defaults():
    assert config.load(ROOT / "configs" / "default.yaml") == config.CrawlConfig()


def test_bundled_configs_load_and_every_setting_they_write_is_read():
    paths = sorted((ROOT / "configs").glob("*.yaml"))
    assert [p.name for p in paths][:2] == ["default.yaml", "demo.yaml"]
    for p in paths:
        raw = yaml.safe_load(p.read_text()) or {}
        cfg = config.load(p)
        # A key the file sets and the loader dropped or renamed would read back otherwise.
        for section, values in raw.items():
            if not isinstance(values, dict):
                continue
            for key, value in values.items():
                got = getattr(getattr(cfg, section), key)
                if value == "auto" or isinstance(value, (dict, list)):
                    continue  # resolved or converted on load (shards: auto, tables)
                assert got == value, f"{p.name}: {section}.{key} = {value!r} reads back as {got!r}"


@pytest.mark.parametrize(
    "data, message",
    [
        ({"limits": {"max_pagez": 1}}, "unknown setting limits.max_pagez"),
        ({"colour": 1}, "unknown setting colour"),
        ({"limits": {"max_pages": "ten"}}, "limits.max_pages"),
        ({"scope": "planet"}, "scope: expected one of 'host' | 'domain' | 'any'"),
        ({"politeness": {"interval_s": -1}}, "politeness.interval_s: must be >= 0"),
        ({"politeness": {"interval_s": 5, "max_interval_s": 1}}, "max_interval_s"),
        ({"fetch": {"resolve": {"*.test": "localhost"}}}, "fetch.resolve.*.test: expected an IP address"),
        ({"dedup": {"simhash_distance": 3, "simhash_tables": 3}}, "simhash_tables"),
        ({"runtime": {"shards": 0}}, "runtime.shards"),
        ({"seeds": "http://a.test/"}, "seeds: expected a list"),
        ({"fetch": {"attempts": True}}, "fetch.attempts: expected an integer"),
    ],
)
def test_bad_config_names_the_key(data, message):
    with pytest.raises(ConfigError) as exc:
        config.from_dict(data)
    assert message in str(exc.value)


def test_overrides_parse_yaml_values_and_create_sections():
    cfg = config.from_dict(
        {"limits": {"max_pages": 5}},
        ["limits.max_pages=50", 'fetch.resolve={"*.test": "127.0.0.1"}', "runtime.shards=3", "scope=any"],
    )
    assert cfg.limits.max_pages == 50
    assert cfg.fetch.resolve == {"*.test": "127.0.0.1"}
    assert cfg.runtime.shards == 3 and cfg.scope == "any"


def test_override_without_equals_is_refused():
    with pytest.raises(ConfigError, match="section.key=value"):
        config.from_dict({}, ["limits.max_pages"])


def test_malformed_seed_fails_with_the_seed_quoted(tmp_path):
    cfg = config.from_dict({"seeds": ["http://ok.test/", "http//broken"]})
    with pytest.raises(SeedError) as exc:
        configcheck.all_seeds(cfg)
    assert "http//broken" in str(exc.value)


def test_seeds_file_relative_to_config_and_comments(tmp_path):
    (tmp_path / "seeds.txt").write_text("# comment\nhttp://A.test/\n\nhttp://a.test/\nhttps://b.test/x\n")
    (tmp_path / "c.yaml").write_text("seeds_file: seeds.txt\n")
    cfg = config.load(tmp_path / "c.yaml")
    assert configcheck.all_seeds(cfg) == ["http://a.test/", "https://b.test/x"]


def test_fingerprint_ignores_output_and_runtime_but_not_limits():
    a = config.from_dict({"seeds": ["http://a.test/"]})
    same = config.from_dict({"seeds": ["http://a.test/"], "output": {"path": "/x"}, "runtime": {"shards": 7}})
    assert a.fingerprint() == same.fingerprint()
    assert a.fingerprint() != config.from_dict({"seeds": ["http://a.test/"], "limits": {"max_pages": 3}}).fingerprint()


def test_product_token():
    assert config.from_dict({"user_agent": "MyBot/2.0 (+http://x)"}).product_token() == "mybot"


def test_shards_auto_is_one_per_cpu_at_least_two():
    assert config.resolve_shards("auto", 1) == 2
    assert config.resolve_shards("auto", 8) == 8
    assert config.resolve_shards(3, 8) == 3


def test_render_section_is_strict_and_a_missing_browser_fails_at_start_saying_how_to_install(monkeypatch):
    assert config.CrawlConfig().render.mode == "never"  # no browser needed by default
    with pytest.raises(ConfigError, match="unknown setting render.tab "):
        config.from_dict({"render": {"tab": 4}})
    with pytest.raises(ConfigError, match="render.mode: expected one of"):
        config.from_dict({"render": {"mode": "sometimes"}})
    with pytest.raises(ConfigError, match="render.spot_check_share"):
        config.from_dict({"render": {"spot_check_share": 1.5}})
    with pytest.raises(ConfigError, match="render.block: unknown resource type 'images'"):
        config.from_dict({"render": {"block": ["images"]}})
    with pytest.raises(ConfigError, match="render.max_wait_s: must be below timeout_s"):
        config.from_dict({"render": {"max_wait_s": 30, "timeout_s": 20}})
    with pytest.raises(ConfigError) as err:
        configcheck.from_dict({"render": {"mode": "auto", "browser": "/nonexistent/chromium"}})
    assert "apt-get install chromium" in str(err.value) and "\n" not in str(err.value)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ConfigError, match="none is on PATH; install one with `apt-get install chromium`"):
        configcheck.from_dict({"render": {"mode": "always"}})
    # Turning rendering on continues the same crawl (same output fingerprint).
    assert configcheck.from_dict({"render": {"mode": "auto", "browser": "/bin/true"}}).fingerprint() == config.CrawlConfig().fingerprint()


# -- regions (issue 21): runtime.regions, fetch.source_address, placement ----------------

REGIONS = {"runtime": {"regions": ["eu-west", "us-east"]}}


def test_regions_and_placement_load_with_rules_normalized_as_hosts():
    cfg = configcheck.from_dict({
        **REGIONS,
        "fetch": {"source_address": "127.0.0.2"},
        "placement": {"default_region": "us-east", "rules": {"*.example.de": "eu-west", "shop.example.com": "us-east"},
                      "remeasure_s": 3600, "move_gain": 0.5, "move_min_s": 0.1},
    })
    assert cfg.runtime.regions == ("eu-west", "us-east")
    assert cfg.fetch.source_address == "127.0.0.2"
    assert cfg.placement.default_region == "us-east" and cfg.placement.rules["*.example.de"] == "eu-west"
    assert (cfg.placement.remeasure_s, cfg.placement.move_gain, cfg.placement.move_min_s) == (3600, 0.5, 0.1)
    # Defaults: one region, nothing to place (today's behaviour).
    d = config.CrawlConfig()
    assert d.runtime.regions is None and d.fetch.source_address is None
    assert (d.placement.default_region, dict(d.placement.rules), d.placement.remeasure_s,
            d.placement.move_gain, d.placement.move_min_s) == (None, {}, 86400.0, 0.7, 0.05)


@pytest.mark.parametrize(
    "data, message",
    [
        ({"runtime": {"regions": []}}, "runtime.regions: list at least one region"),
        ({"runtime": {"regions": ["eu-west", ""]}}, "runtime.regions[1]: '' is not a region name"),
        ({"runtime": {"regions": ["EU West"]}}, "runtime.regions[0]: 'EU West' is not a region name"),
        ({"runtime": {"regions": ["eu-west", "-x"]}}, "runtime.regions[1]: '-x' is not a region name"),
        ({"runtime": {"regions": ["eu-west", "eu-west"]}}, "runtime.regions[1]: region 'eu-west' is listed twice"),
        ({"runtime": {"regions": "eu-west"}}, "runtime.regions: expected list of str | null"),
        ({"fetch": {"source_address": "localhost"}}, "fetch.source_address: expected a local IP address"),
        ({"fetch": {"source_address": "127.0.0.300"}}, "fetch.source_address: expected a local IP address"),
        ({"placement": {"rules": {"a.test": "eu-west"}}}, "placement.rules: set, but runtime.regions is null"),
        ({"placement": {"default_region": "eu-west"}}, "placement.default_region: set, but runtime.regions is null"),
        ({"placement": {"move_gain": 0.5}}, "placement.move_gain: set, but runtime.regions is null"),
        ({**REGIONS, "placement": {"default_region": "ap-south"}},
         "placement.default_region: 'ap-south' is not one of runtime.regions (eu-west, us-east)"),
        ({**REGIONS, "placement": {"rules": {"*.example.de": "ap-south"}}},
         "placement.rules.*.example.de: 'ap-south' is not one of runtime.regions"),
        ({**REGIONS, "placement": {"rules": {"http://a.test/": "eu-west"}}}, "placement.rules.http://a.test/: "),
        ({**REGIONS, "placement": {"rules": {"*.*.test": "eu-west"}}}, "placement.rules.*.*.test: "),
        ({**REGIONS, "placement": {"rules": {"*.a.test:8080": "eu-west"}}}, "a *.domain rule takes no port"),
        ({**REGIONS, "placement": {"rules": {"*.10.0.0.1": "eu-west"}}}, "an IP address has no subdomains"),
        ({**REGIONS, "placement": {"rules": {"*.[::1]": "eu-west"}}}, "an IP address has no subdomains"),
        ({**REGIONS, "placement": {"move_gain": 0}}, "placement.move_gain: must be in (0, 1]"),
        ({**REGIONS, "placement": {"move_gain": 1.5}}, "placement.move_gain: must be in (0, 1]"),
        ({**REGIONS, "placement": {"move_min_s": -1}}, "placement.move_min_s: must be >= 0"),
        ({**REGIONS, "placement": {"remeasure_s": -5}}, "placement.remeasure_s: must be >= 0"),
        ({**REGIONS, "placement": {"rulez": {}}}, "unknown setting placement.rulez"),
    ],
)
def test_bad_region_settings_fail_on_one_line_naming_the_key(data, message):
    with pytest.raises(ConfigError) as exc:
        configcheck.from_dict(data)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_regions_placement_and_source_address_keep_the_crawl_fingerprint():
    # Adding regions, rules or a node's address continues the same crawl on the same output.
    base = configcheck.from_dict({"seeds": ["http://a.test/"]})
    placed = configcheck.from_dict({"seeds": ["http://a.test/"], **REGIONS, "fetch": {"source_address": "127.0.0.3"},
                               "placement": {"rules": {"a.test": "us-east"}}})
    assert base.fingerprint() == placed.fingerprint()


def test_parsing_alone_asks_no_component():
    # crawler.config imports no component: the checks that need one (a browser on disk,
    # region names, placement rules, a source address, seeds) run in crawler.configcheck, which
    # every crawl goes through; a Ray actor rebuilding the driver's config does not repeat them.
    data = {"seeds": ["http//broken"], "fetch": {"source_address": "localhost"},
            "placement": {"rules": {"a.test": "eu-west"}}, "render": {"mode": "always", "browser": "/nonexistent/x"}}
    cfg = config.from_dict(data)
    with pytest.raises(ConfigError, match="fetch.source_address: expected a local IP address"):
        configcheck.check_components(cfg)
    with pytest.raises(SeedError, match="http//broken"):
        configcheck.all_seeds(cfg)
