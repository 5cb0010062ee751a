"""Region placement (crawler.placement.regionpolicy): rule > measurement > default, hysteresis, re-measurement.

Everything runs on a MockClock; times are wall-clock seconds from MockClock's epoch.
"""

from __future__ import annotations

import json
import random

import pytest

from crawler.clock import MockClock
from crawler.errors import ConfigError
from crawler.placement.regionpolicy import Placement, RegionPlacement, check_region_names, rule_key, time_to_first_byte

EU, US, AP = "eu-west", "us-east", "ap-south"
DAY = 86_400.0


def make(rules=None, default=None, *, regions=(EU, US, AP), remeasure_s=DAY, gain=0.7, min_s=0.05, clock=None, seed=1):
    clock = clock or MockClock()
    return RegionPlacement(regions, default, rules or {}, remeasure_s=remeasure_s, move_gain=gain,
                           move_min_s=min_s, clock=clock, rng=random.Random(seed)), clock


# -- which source decides ---------------------------------------------------------------


@pytest.mark.parametrize(
    "rules, measure, host, expected",
    [
        # nothing known: the default region (the first of the regions)
        ({}, None, "a.test", (EU, "default")),
        # a measurement puts the host where it answers fastest
        ({}, {EU: 0.65, US: 0.05, AP: 0.7}, "a.test", (US, "measured")),
        # a rule beats a measurement
        ({"a.test": AP}, {EU: 0.65, US: 0.05, AP: 0.7}, "a.test", (AP, "rule")),
        # a hostname rule covers every port of it
        ({"a.test": AP}, None, "a.test:8080", (AP, "rule")),
        # a host:port rule covers that key only
        ({"a.test:8080": AP}, None, "a.test:8080", (AP, "rule")),
        ({"a.test:8080": AP}, None, "a.test:9090", (EU, "default")),
        ({"a.test:8080": AP}, None, "a.test", (EU, "default")),
        # *.example.com: its subdomains at any depth, not example.com itself
        ({"*.example.com": US}, None, "shop.example.com", (US, "rule")),
        ({"*.example.com": US}, None, "a.b.example.com:8443", (US, "rule")),
        ({"*.example.com": US}, None, "example.com", (EU, "default")),
        ({"*.example.com": US}, None, "badexample.com", (EU, "default")),
        # the most specific rule wins: host:port, then the hostname, then the longest suffix
        ({"*.example.com": US, "*.eu.example.com": AP}, None, "x.eu.example.com", (AP, "rule")),
        ({"*.example.com": US, "shop.example.com": AP}, None, "shop.example.com", (AP, "rule")),
        ({"shop.example.com": US, "shop.example.com:8080": AP}, None, "shop.example.com:8080", (AP, "rule")),
        # rules are read as hosts are: case and a trailing dot do not matter
        ({"Shop.Example.COM.": AP}, None, "shop.example.com", (AP, "rule")),
        ({"*.Example.com": AP}, None, "shop.example.com", (AP, "rule")),
    ],
)
def test_rule_beats_measurement_beats_default(rules, measure, host, expected):
    p, _ = make(rules)
    if measure is not None:
        p.measured(host, measure)
    got = p.placement(host)
    assert (got.region, got.how) == expected
    assert p.region_of(host) == expected[0]
    if got.how == "measured":
        assert got.figures == measure
    else:
        assert got.figures == {}


def test_default_region_can_be_named():
    p, _ = make(default=US)
    assert p.placement("a.test") == Placement(US, "default", {}, MockClock().wall(), 0)


# -- hysteresis -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "current_s, best_s, moves",
    [
        (0.65, 0.05, True),     # 600 ms across regions: far past both margins
        (1.0, 0.70, True),      # exactly move_gain of the current time, 0.3 s less
        (1.0, 0.71, False),     # 71%: not enough gain
        (0.10, 0.06, False),    # 60% but only 40 ms faster (< move_min_s)
        (0.12, 0.07, True),     # 58%, 50 ms faster: both margins met
        (0.30, 0.29, False),    # jitter-sized difference
        (0.30, 0.30, False),    # a tie stays
        (0.30, None, False),    # a region that did not answer never wins
        (None, 0.30, True),     # the current region did not answer, another did
        (None, None, False),    # nobody answered: stay
    ],
)
def test_a_host_moves_only_past_both_margins(current_s, best_s, moves):
    p, clock = make(regions=(EU, US))
    placed = p.measured("a.test", {EU: current_s, US: best_s})  # EU is the default: the current region
    assert placed.region == (US if moves else EU)
    assert placed.how == "measured" and placed.moves == (1 if moves else 0)
    assert placed.decided_at == clock.wall()


def test_hysteresis_holds_both_ways_on_remeasurement():
    p, clock = make(regions=(EU, US))
    assert p.measured("a.test", {EU: 0.65, US: 0.05}).region == US
    # The host is in US now: EU must be clearly better to win it back.
    clock.advance(2 * DAY)
    assert p.measured("a.test", {EU: 0.20, US: 0.25}).region == US  # 80%: not enough
    clock.advance(2 * DAY)
    assert p.measured("a.test", {EU: 0.04, US: 0.06}).region == US  # 67% but 20 ms
    clock.advance(2 * DAY)
    back = p.measured("a.test", {EU: 0.05, US: 0.65})
    assert (back.region, back.moves) == (EU, 2)
    assert p.placement("a.test").figures == {EU: 0.05, US: 0.65}


def test_missing_regions_count_as_no_answer_and_ties_go_to_region_order():
    p, _ = make()
    # AP not probed (missing): None. EU (current) did not answer; US and AP... only US answered.
    assert p.measured("a.test", {EU: None, US: 0.3}).figures == {EU: None, US: 0.3, AP: None}
    q, _ = make()
    # The current region did not answer; two others tie: the first of runtime.regions wins.
    assert q.measured("b.test", {EU: None, US: 0.3, AP: 0.3}).region == US


def test_a_rule_keeps_its_region_while_measurements_go_on_beneath_it():
    p, clock = make({"a.test": AP})
    assert not p.needs_measurement("a.test")
    placed = p.measured("a.test", {EU: 0.6, US: 0.05, AP: 0.6})  # measured anyway (a probe in flight)
    assert (placed.region, placed.how, placed.moves) == (AP, "rule", 0)
    p.set_rule("a.test", None)  # the rule goes: the measurement decides
    now = p.placement("a.test")
    assert (now.region, now.how, now.moves) == (US, "measured", 1)


# -- operator rules ---------------------------------------------------------------------


def test_set_rule_moves_the_host_and_removing_it_hands_back_to_the_measurement():
    p, clock = make(regions=(EU, US))
    p.measured("a.test", {EU: 0.65, US: 0.05})
    clock.advance(30)
    ruled = p.set_rule("a.test", EU)
    assert ruled == Placement(EU, "rule", {}, clock.wall(), 2)  # moved by the measurement, then by the rule
    assert p.region_of("a.test") == EU and p.rules() == {"a.test": EU}
    freed = p.set_rule("a.test", None)
    assert (freed.region, freed.how, freed.moves) == (US, "measured", 3)
    # A rule naming the region the host is in already is not a move.
    assert p.set_rule("a.test", US).moves == 3


def test_an_operator_can_remove_a_config_rule_and_override_a_wildcard():
    p, _ = make({"a.test": US, "*.example.com": AP})
    assert p.set_rule("a.test", None).how == "default"  # the config's rule of that spelling is gone
    assert p.set_rule("shop.example.com", EU).region == EU  # the more specific rule wins
    assert p.region_of("www.example.com") == AP


def test_a_hostname_rule_moves_every_remembered_port_of_it():
    p, _ = make(regions=(EU, US))
    p.measured("a.test:8080", {EU: 0.65, US: 0.05})
    p.measured("a.test:9090", {EU: 0.05, US: 0.65})
    p.set_rule("a.test", US)
    assert [p.placement(h).moves for h in ("a.test:8080", "a.test:9090")] == [1, 1]  # 8080 was in US already
    assert p.placement("a.test:9090").region == US


@pytest.mark.parametrize(
    "host, region, message",
    [
        ("a.test", "mars", "region: 'mars' is not one of the crawl's regions (eu-west, us-east, ap-south)"),
        ("a.test", "", "region: '' is not one of the crawl's regions"),
        ("*.example.com", EU, "host: '*.example.com' is not a hostname"),
        ("http://a.test/", EU, "host: 'http://a.test/' is not a hostname"),
        ("", EU, "host: expected a hostname"),
    ],
)
def test_bad_rules_are_config_errors_the_api_answers_with_400(host, region, message):
    p, _ = make()
    with pytest.raises(ConfigError) as exc:
        p.set_rule(host, region)
    assert isinstance(exc.value, ValueError) and message in str(exc.value)
    assert p.rules() == {} and p.placement("a.test").how == "default"  # nothing changed


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"default": "mars"}, "placement.default_region: 'mars' is not one of"),
        ({"rules": {"a.test": "mars"}}, "placement.rules.a.test: 'mars' is not one of"),
        ({"rules": {"a b": EU}}, "placement.rules.a b: "),
        ({"regions": ()}, "runtime.regions: list at least one region"),
        ({"regions": (EU, EU)}, "region 'eu-west' is listed twice"),
        ({"gain": 0.0}, "0 < move_gain <= 1"),
    ],
)
def test_bad_construction_fails_naming_the_setting(kwargs, message):
    rules = kwargs.pop("rules", None)
    default = kwargs.pop("default", None)
    with pytest.raises(ConfigError, match=None) as exc:
        make(rules, default, **kwargs)
    assert message in str(exc.value)


def test_unknown_regions_and_impossible_times_in_figures_are_refused():
    p, _ = make()
    with pytest.raises(ConfigError, match="region: 'mars' is not one of"):
        p.measured("a.test", {"mars": 0.1})
    for bad in (-0.1, float("nan"), float("inf"), "fast"):
        with pytest.raises(ValueError, match="expected seconds >= 0 or None"):
            p.measured("a.test", {EU: bad})
    assert p.placement("a.test").how == "default"


# -- re-measurement ---------------------------------------------------------------------


def test_measurement_comes_due_again_after_remeasure_s_with_jitter():
    p, clock = make(regions=(EU, US))
    assert p.needs_measurement("a.test")  # never measured
    p.measured("a.test", {EU: 0.65, US: 0.05})
    assert not p.needs_measurement("a.test")
    clock.advance(0.89 * DAY)
    assert not p.needs_measurement("a.test")  # jitter is within 10%
    clock.advance(0.22 * DAY)
    assert p.needs_measurement("a.test")
    p.measured("a.test", {EU: 0.65, US: 0.05})
    assert not p.needs_measurement("a.test") and p.placement("a.test").moves == 1


def test_hosts_measured_together_come_due_at_different_times():
    p, clock = make(regions=(EU, US))
    hosts = [f"h{i}.test" for i in range(200)]
    for h in hosts:
        p.measured(h, {EU: 0.1, US: 0.1})
    clock.advance(0.9 * DAY - 1)
    due_after = []
    for _ in range(41):  # 0.9 .. 1.1 days in 40 steps
        due_after.append(sum(p.needs_measurement(h) for h in hosts))
        clock.advance(0.2 * DAY / 40)
    assert due_after[0] < 20 and due_after[-1] == 200
    assert len(set(due_after)) > 20  # they come due a few at a time, not at once


def test_remeasure_zero_measures_on_every_contact():
    p, _ = make(regions=(EU, US), remeasure_s=0)
    p.measured("a.test", {EU: 0.1, US: 0.1})
    assert p.needs_measurement("a.test")


# -- checkpoints ------------------------------------------------------------------------


def test_snapshot_restore_round_trip_through_json():
    p, clock = make({"*.example.com": AP})
    q, _ = make({"*.example.com": AP}, clock=clock)  # the same config, read at the same start
    p.measured("a.test", {EU: 0.65, US: 0.05, AP: None})
    p.measured("b.test:8080", {EU: 0.05, US: 0.65, AP: 0.7})
    clock.advance(10)
    p.set_rule("c.test", AP)
    p.set_rule("shop.example.com", None)  # a removal of a spelling no rule has: the wildcard still holds
    q.restore(json.loads(json.dumps(p.snapshot())))
    for h in ("a.test", "b.test:8080", "c.test", "shop.example.com", "d.test"):
        assert q.placement(h) == p.placement(h)
        assert q.needs_measurement(h) == p.needs_measurement(h)
    assert q.rules() == p.rules() and q.summary() == p.summary()
    assert q.summary() == {"rules": 2, "measured": {EU: 1, US: 1, AP: 0}, "moves": 2}


def test_restore_into_fewer_regions_forgets_what_named_the_gone_one():
    p, clock = make(regions=(EU, US, AP))
    p.measured("a.test", {EU: 0.65, US: 0.7, AP: 0.05})  # -> AP
    p.measured("b.test", {EU: 0.65, US: 0.05, AP: 0.7})  # -> US
    p.set_rule("c.test", AP)
    q, _ = make(regions=(EU, US), clock=clock)
    q.restore(json.loads(json.dumps(p.snapshot())))
    assert q.placement("a.test").how == "default" and q.needs_measurement("a.test")
    assert q.placement("b.test").figures == {EU: 0.65, US: 0.05}
    assert q.placement("c.test").how == "default" and q.rules() == {}


def test_restore_refuses_an_unknown_snapshot_version():
    p, _ = make()
    with pytest.raises(ValueError, match="version"):
        p.restore({"version": 99, "overrides": {}, "hosts": {}})


# -- names and rule spellings -----------------------------------------------------------


@pytest.mark.parametrize(
    "spec, canonical",
    [
        ("example.com", "example.com"),
        ("EXAMPLE.com.", "example.com"),
        ("example.com:8080", "example.com:8080"),
        ("example.com:80", "example.com"),  # the default port names the hostname key
        ("*.example.com", "*.example.com"),
        ("*.Bücher.example", "*.xn--bcher-kva.example"),
    ],
)
def test_rule_spellings_are_normalized_as_url_hosts(spec, canonical):
    assert rule_key(spec) == canonical


def test_region_names():
    assert check_region_names(["eu-west", "us-east-1", "a"]) == ("eu-west", "us-east-1", "a")
    for bad in (["eu_west"], ["Eu"], ["x" * 64], ["eu-"], [1]):
        with pytest.raises(ConfigError, match=r"runtime.regions\[0\]: .* is not a region name"):
            check_region_names(bad)


# -- the probe --------------------------------------------------------------------------


class _Result:
    def __init__(self, status, started_at, headers_at):
        self.status, self.started_at, self.headers_at = status, started_at, headers_at


async def test_time_to_first_byte_is_the_wait_for_the_headers():
    clock = MockClock()

    async def answers(url):
        assert url == "http://a.test/robots.txt"
        start = clock.now()
        clock.advance(0.6)  # headers after 600 ms
        headers = clock.now()
        clock.advance(5.0)  # then a slow body, which is not the host's distance
        return _Result(404, start, headers)

    async def silent(url):
        clock.advance(10.0)
        return _Result(None, clock.now() - 10.0, None)

    assert await time_to_first_byte(answers, "http://a.test/robots.txt", clock) == pytest.approx(0.6)
    assert await time_to_first_byte(silent, "http://a.test/robots.txt", clock) is None
