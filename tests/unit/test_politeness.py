"""Per-host pacing (docs/invariants.md #2): spacing measured at the server, one in flight,
Crawl-delay floor, 429/503 backoff and Retry-After, recovery, operator overrides."""

from __future__ import annotations

import email.utils
import json
import math
import random

import pytest

from crawler.clock import MockClock
from crawler.errors import ConfigError
from crawler.policy.politeness import Politeness, parse_retry_after

H = "ex.com"


@pytest.fixture
def clock() -> MockClock:
    return MockClock(start=0.0)


@pytest.fixture
def pol(clock: MockClock) -> Politeness:
    return Politeness(1.0, 60.0, clock=clock)


def request(pol: Politeness, clock: MockClock, host: str, *, headers_after: float | None, total: float,
            status: int | None = 200, retry_after: str | None = None) -> None:
    """Run one request: start now, headers after ``headers_after`` s (None: never), done after ``total`` s."""
    pol.on_start(host)
    if headers_after is not None:
        clock.advance(headers_after)
        pol.on_headers(host)
        clock.advance(total - headers_after)
    else:
        clock.advance(total)
    pol.on_finish(host, status, retry_after)


def wait_until_ready(pol: Politeness, clock: MockClock, host: str) -> None:
    clock.advance(max(0.0, pol.next_allowed(host) - clock.now()))
    assert pol.ready(host)


# -- spacing ----------------------------------------------------------------------------------


def test_unseen_host_is_ready(pol: Politeness) -> None:
    assert pol.next_allowed(H) == 0.0
    assert pol.ready(H)
    assert pol.interval(H) == 1.0


def test_next_start_follows_the_headers_rule(pol: Politeness, clock: MockClock) -> None:
    # fast body: headers at 0.25, done at 0.5 -> server started by 0.25 -> next at 1.25
    request(pol, clock, H, headers_after=0.25, total=0.5)
    assert pol.next_allowed(H) == 1.25
    assert not pol.ready(H)
    clock.advance(0.75 - 1e-9)
    assert not pol.ready(H)
    clock.advance(1e-9)
    assert pol.ready(H)


def test_slow_body_next_start_is_after_finish(pol: Politeness, clock: MockClock) -> None:
    request(pol, clock, H, headers_after=0.25, total=5.0)  # body took 4.75 s
    assert pol.next_allowed(H) == 5.0  # max(0.25 + 1, 5.0): never overlaps
    assert pol.ready(H)


def test_no_headers_counts_from_the_finish(pol: Politeness, clock: MockClock) -> None:
    request(pol, clock, H, headers_after=None, total=2.0, status=None)  # timed out
    # the server may have started it as late as t=2.0; a backoff widened the interval too
    assert pol.next_allowed(H) >= 2.0 + 1.0


def test_late_headers_push_the_next_start(pol: Politeness, clock: MockClock) -> None:
    request(pol, clock, H, headers_after=3.0, total=3.0)  # server queued us for 3 s
    assert pol.next_allowed(H) == 4.0  # not start + 1 = 1.0


def test_server_side_spacing_holds_for_random_latencies(clock: MockClock) -> None:
    """Adversarial server: logs each start as late as possible (at headers, or at our
    give-up time without headers); the next one as early as possible (when we send)."""
    interval = 1.0
    pol = Politeness(interval, 60.0, clock=clock)
    rng = random.Random(7)
    last_server_start = -math.inf
    for _ in range(2000):
        wait_until_ready(pol, clock, H)
        pol.on_start(H)
        send = clock.now()
        assert send - last_server_start >= interval
        total = rng.randrange(1, 400) / 64
        if rng.random() < 0.2:
            clock.advance(total)
            last_server_start = clock.now()
            status = None
        else:
            headers_after = rng.randrange(0, 64 * int(total) + 1) / 64 if total >= 1 else total
            clock.advance(headers_after)
            pol.on_headers(H)
            last_server_start = clock.now()
            clock.advance(total - headers_after)
            status = rng.choice([200, 200, 200, 404, 301])
        pol.on_finish(H, status)
        assert not pol.in_flight(H)


def test_one_request_in_flight(pol: Politeness, clock: MockClock) -> None:
    pol.on_start(H)
    assert pol.in_flight(H) and pol.in_flight_count() == 1
    assert not pol.ready(H)
    with pytest.raises(RuntimeError, match="already in flight"):
        pol.on_start(H)
    pol.on_start("other.com")  # other hosts are independent
    assert pol.in_flight_count() == 2
    clock.advance(10)
    assert not pol.ready(H)  # however long it takes
    pol.on_finish(H, 200)
    pol.on_finish("other.com", 200)
    assert pol.in_flight_count() == 0 and not pol.in_flight(H)


def test_lifecycle_misuse_raises(pol: Politeness) -> None:
    with pytest.raises(RuntimeError):
        pol.on_headers(H)
    with pytest.raises(RuntimeError):
        pol.on_finish(H, 200)


def test_early_start_is_counted(pol: Politeness, clock: MockClock) -> None:
    request(pol, clock, H, headers_after=0.0, total=0.0)
    pol.on_start(H)  # a caller that did not check ready()
    assert pol.stats()["early_starts"] == 1


def test_next_allowed_while_in_flight_is_a_lower_bound(pol: Politeness, clock: MockClock) -> None:
    pol.on_start(H)
    clock.advance(0.5)
    pol.on_headers(H)
    clock.advance(0.25)
    assert pol.next_allowed(H) == 1.5
    pol.on_finish(H, 200)
    assert pol.next_allowed(H) == 1.5


# -- Crawl-delay --------------------------------------------------------------------------------


def test_crawl_delay_is_a_floor(pol: Politeness, clock: MockClock) -> None:
    pol.set_crawl_delay(H, 5)
    assert pol.interval(H) == 5.0
    request(pol, clock, H, headers_after=0.5, total=1.0)
    assert pol.next_allowed(H) == 5.5
    pol.set_crawl_delay(H, 0.25)  # smaller than the configured interval: the interval wins
    assert pol.interval(H) == 1.0
    pol.set_crawl_delay(H, None)
    assert pol.interval(H) == 1.0 and pol.crawl_delay(H) is None


def test_crawl_delay_above_the_cap_is_honoured(pol: Politeness) -> None:
    pol.set_crawl_delay(H, 120)
    assert pol.interval(H) == 120.0


def test_crawl_delay_learnt_after_a_fetch_applies_to_the_pending_wait(pol: Politeness, clock: MockClock) -> None:
    request(pol, clock, H, headers_after=0.25, total=0.5)  # the robots.txt fetch
    assert pol.next_allowed(H) == 1.25
    pol.set_crawl_delay(H, 10)  # parsed from that robots.txt
    assert pol.next_allowed(H) == 10.25


def test_invalid_crawl_delay_is_ignored(pol: Politeness) -> None:
    for bad in (-1, float("nan"), float("inf")):
        pol.set_crawl_delay(H, bad)
        assert pol.interval(H) == 1.0
    assert pol.stats()["invalid_crawl_delays"] == 3


# -- backoff, Retry-After, recovery -----------------------------------------------------------


def test_429_with_retry_after_seconds(pol: Politeness, clock: MockClock) -> None:
    request(pol, clock, H, headers_after=0.5, total=1.0, status=429, retry_after="120")
    assert pol.next_allowed(H) == 121.0
    assert pol.interval(H) == 2.0  # and the host is backed off
    assert pol.stats()["retry_after_applied"] == 1


def test_503_with_retry_after_http_date(pol: Politeness, clock: MockClock) -> None:
    clock.advance(10)
    when = email.utils.formatdate(clock.wall() + 300, usegmt=True)
    request(pol, clock, H, headers_after=0.0, total=0.0, status=503, retry_after=when)
    assert pol.next_allowed(H) == pytest.approx(clock.now() + 300, abs=1.0)  # HTTP-date has 1 s resolution


def test_retry_after_is_capped(clock: MockClock) -> None:
    pol = Politeness(1.0, 60.0, clock=clock, retry_after_cap_s=600)
    request(pol, clock, H, headers_after=0.0, total=0.0, status=503, retry_after="999999")
    assert pol.next_allowed(H) == 600.0


def test_garbage_retry_after_is_ignored(pol: Politeness, clock: MockClock) -> None:
    request(pol, clock, H, headers_after=0.0, total=0.0, status=429, retry_after="soon, please")
    assert pol.next_allowed(H) == 2.0  # only the widened interval
    assert pol.stats()["retry_after_ignored"] == 1


def test_retry_after_on_a_success_is_ignored(pol: Politeness, clock: MockClock) -> None:
    request(pol, clock, H, headers_after=0.0, total=0.0, status=200, retry_after="3600")
    assert pol.next_allowed(H) == 1.0


def test_backoff_doubles_and_is_capped(pol: Politeness, clock: MockClock) -> None:
    seen = []
    for _ in range(8):
        wait_until_ready(pol, clock, H)
        request(pol, clock, H, headers_after=0.0, total=0.0, status=503)
        seen.append(pol.interval(H))
    assert seen == [2, 4, 8, 16, 32, 60, 60, 60]
    assert pol.next_allowed(H) == clock.now() + 60


@pytest.mark.parametrize("outcome", [{"status": None}, {"status": 500}, {"status": 200, "transient": True}])
def test_transient_failures_widen(pol: Politeness, outcome: dict) -> None:
    pol.on_start(H)
    pol.on_finish(H, **outcome)
    assert pol.interval(H) == 2.0


@pytest.mark.parametrize("status", [200, 301, 304, 404, 410])
def test_final_answers_do_not_widen(pol: Politeness, status: int) -> None:
    pol.on_start(H)
    pol.on_finish(H, status)
    assert pol.interval(H) == 1.0


def test_recovery_after_consecutive_successes(pol: Politeness, clock: MockClock) -> None:
    for _ in range(3):
        wait_until_ready(pol, clock, H)
        request(pol, clock, H, headers_after=0.0, total=0.0, status=429)
    assert pol.interval(H) == 8.0

    def successes(n: int, status: int = 200) -> None:
        for _ in range(n):
            wait_until_ready(pol, clock, H)
            request(pol, clock, H, headers_after=0.0, total=0.0, status=status)

    successes(4)
    assert pol.interval(H) == 8.0  # not yet: 5 are needed
    successes(1, status=404)  # a final 4xx is a success for pacing
    assert pol.interval(H) == pytest.approx(6.4)
    successes(4)
    wait_until_ready(pol, clock, H)
    request(pol, clock, H, headers_after=0.0, total=0.0, status=503)  # streak broken, widened
    assert pol.interval(H) == pytest.approx(12.8)
    successes(5 * 30)
    assert pol.interval(H) == 1.0  # fully back to the configured interval
    clock.advance(1.0)
    assert pol.forget(H)  # and no backoff memory is left to keep
    assert pol.stats()["recoveries"] >= 2


def test_backoff_with_crawl_delay_above_cap_keeps_the_floor(pol: Politeness, clock: MockClock) -> None:
    pol.set_crawl_delay(H, 100)
    request(pol, clock, H, headers_after=0.0, total=0.0, status=503)
    assert pol.interval(H) == 100.0


def test_zero_interval_host_still_backs_off(clock: MockClock) -> None:
    pol = Politeness(0.0, 60.0, clock=clock)
    request(pol, clock, H, headers_after=0.0, total=0.0, status=429)
    assert pol.interval(H) == 2.0


# -- operator overrides, pause -------------------------------------------------------------


@pytest.mark.parametrize("asked", [0.25, 1e-308, 0.0, 0.999999])
def test_an_operator_interval_never_goes_below_the_configured_one(pol: Politeness, clock: MockClock, asked: float) -> None:
    # max_rps 4, 1e308, ...: a floor like Crawl-delay, never a way to turn politeness off.
    pol.set_override(H, interval_s=asked)
    assert pol.interval(H) == 1.0
    request(pol, clock, H, headers_after=0.0, total=0.0)
    assert pol.next_allowed(H) == clock.now() + 1.0
    pol.set_name_override("ex.com", interval_s=asked)
    assert pol.interval(H) == 1.0


def test_override_interval(pol: Politeness) -> None:
    pol.set_override(H, interval_s=0.25)  # max_rps = 4: faster than configured, no effect
    assert pol.interval(H) == 1.0
    pol.set_override(H, interval_s=1.5)  # slower: a floor
    assert pol.interval(H) == 1.5
    assert pol.interval("other.com") == 1.0
    pol.set_crawl_delay(H, 2)  # the site's floor still applies
    assert pol.interval(H) == 2.0
    pol.set_override(H, interval_s=300)  # operator slower than the cap: honoured
    assert pol.interval(H) == 300.0
    pol.clear_override(H)
    assert pol.interval(H) == 2.0


def test_pause_and_resume(pol: Politeness, clock: MockClock) -> None:
    pol.set_override(H, interval_s=1.5)
    pol.set_override(H, paused=True)
    assert not pol.ready(H) and pol.next_allowed(H) == math.inf
    clock.advance(1000)
    assert not pol.ready(H)
    assert pol.override(H) == (1.5, True)  # pausing kept the interval
    pol.set_override(H, paused=False)
    assert pol.ready(H) and pol.interval(H) == 1.5


def test_pause_lets_the_in_flight_request_finish(pol: Politeness, clock: MockClock) -> None:
    pol.on_start(H)
    pol.set_override(H, paused=True)
    pol.on_finish(H, 200)
    assert pol.in_flight_count() == 0 and not pol.ready(H)


def test_bad_override_is_a_config_error(pol: Politeness) -> None:
    for bad in (-1.0, float("nan"), float("inf"), "fast"):
        with pytest.raises(ConfigError, match="interval"):
            pol.set_override(H, interval_s=bad)  # type: ignore[arg-type]  # "fast" on purpose: refused at run time


# -- memory and persistence --------------------------------------------------------------------------


def test_forget_only_idle_hosts(pol: Politeness, clock: MockClock) -> None:
    pol.set_override(H, interval_s=2.0)
    pol.on_start(H)
    assert pol.forget(H) is False  # in flight
    pol.on_finish(H, 200)
    assert pol.forget(H) is False  # its next slot is still ahead
    clock.advance(2)
    assert pol.forget(H) is True
    assert pol.stats()["hosts"] == 0
    assert pol.interval(H) == 2.0  # operator policy survives
    request(pol, clock, "bad.com", headers_after=0.0, total=0.0, status=503)
    clock.advance(100)
    assert pol.forget("bad.com") is False  # backed off: keep that memory


def test_snapshot_restore_on_a_new_clock(clock: MockClock) -> None:
    pol = Politeness(1.0, 60.0, clock=clock)
    clock.advance(5000)
    request(pol, clock, "slow.com", headers_after=0.0, total=0.0, status=429, retry_after="30")
    pol.set_crawl_delay("cd.com", 7)
    request(pol, clock, "cd.com", headers_after=0.5, total=1.0)
    pol.set_override("paused.com", interval_s=0.5, paused=True)
    pol.on_start("busy.com")
    data = json.loads(json.dumps(pol.snapshot()))
    waits = {h: pol.next_allowed(h) - clock.now() for h in ("slow.com", "cd.com")}

    clock2 = MockClock(start=3.0)
    fresh = Politeness(1.0, 60.0, clock=clock2)
    assert fresh.restore(data) == 3
    for host, wait in waits.items():
        assert fresh.next_allowed(host) - clock2.now() == pytest.approx(wait)
    assert fresh.interval("slow.com") == 2.0 and fresh.interval("cd.com") == 7.0
    assert fresh.next_allowed("paused.com") == math.inf and fresh.override("paused.com") == (0.5, True)
    # busy.com was in flight: restored as finished at the snapshot without headers
    assert not fresh.in_flight("busy.com") and fresh.in_flight_count() == 0
    assert fresh.next_allowed("busy.com") == pytest.approx(clock2.now() + 1.0)


def test_restore_skips_malformed_hosts(pol: Politeness) -> None:
    state = {"hosts": {"a.com": {"anchor_age_s": "x"}, "b.com": {
        "anchor_age_s": None, "finished_age_s": None, "not_before_in_s": 0, "crawl_delay": 2,
        "adaptive": 0, "successes": 0}}}
    assert pol.restore(state) == 1
    assert pol.stats()["restore_errors"] == 1
    assert pol.interval("b.com") == 2.0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"interval_s": -1},
        {"interval_s": 10, "max_interval_s": 5},
        {"backoff_factor": 0.5},
        {"recovery_factor": 0},
        {"recovery_successes": 0},
        {"retry_after_cap_s": -1},
        {"interval_s": "1"},
        {"max_interval_s": float("nan")},
    ],
)
def test_config_errors(clock: MockClock, kwargs: dict) -> None:
    with pytest.raises(ConfigError):
        Politeness(clock=clock, **kwargs)


# -- Retry-After parsing (RFC 9110 10.2.3) ---------------------------------------------------------

NOW = 784_111_777.0  # Sun, 06 Nov 1994 08:49:37 GMT


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("120", 120.0),
        (" 120 ", 120.0),
        ("0", 0.0),
        ("Sun, 06 Nov 1994 08:51:37 GMT", 120.0),  # IMF-fixdate
        ("Sunday, 06-Nov-94 08:51:37 GMT", 120.0),  # obsolete RFC 850
        ("Sun Nov  6 08:51:37 1994", 120.0),  # obsolete asctime
        ("Sun, 06 Nov 1994 08:00:00 GMT", 0.0),  # in the past
        ("-5", None),
        ("1.5", None),
        ("", None),
        (None, None),
        ("soon", None),
        ("²", None),
        ("Sun, 99 Nov 1994 08:51:37 GMT", None),
    ],
)
def test_parse_retry_after(value, expected) -> None:
    assert parse_retry_after(value, NOW) == expected


def test_parse_retry_after_huge_number_is_finite() -> None:
    wait = parse_retry_after("9" * 5000, NOW)
    assert wait is not None and math.isfinite(wait)
