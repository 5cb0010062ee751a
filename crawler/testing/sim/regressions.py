"""Named regression seeds: each a defect the simulator reproduced, and the faults that did it.

A regression is a seed (it decides the web, the timing and every random draw), a shape
(how many shards, seen shards and workers) and an explicit fault plan, so it keeps
meeting its fault even when the nemesis's own draws change. ``before`` is what the
checker said on the code before the fix (``benchmarks/results/simulate_regressions.json``
holds both runs); tests/unit/test_sim.py runs each and requires it to pass.
"""

from __future__ import annotations

from dataclasses import dataclass

from crawler.testing.sim.nemesis import Fault, FaultPlan
from crawler.testing.sim.world import Shape

TWO_SHARDS = Shape(hosts=4, shards=2, seen_shards=1, workers=2)
ONE_SHARD = Shape(hosts=4, shards=1, seen_shards=1, workers=2)


@dataclass(frozen=True)
class Regression:
    """One defect as a simulated crawl."""

    finding: str  # what went wrong, in one line
    seed: int
    shape: Shape
    plan: FaultPlan
    before: str  # the first violation the checker reported before the fix


def _plan(*faults: Fault) -> FaultPlan:
    return FaultPlan(list(faults))


REGRESSIONS: dict[str, Regression] = {
    "driver_pause_refused_deliveries": Regression(
        "a driver paused past driver_timeout_s: the shards' dispatch loops spin on the shut gate; behind that, "
        "deliveries refused and pages acked as internal-error rows",
        1, TWO_SHARDS, _plan(Fault("driver_stall", 3.0, 16.0)),
        "the simulation stopped: no simulated time passed in 200000 loop iterations at t=3.980"),
    "driver_killed_during_pause": Regression(
        "the driver killed during a pause and the job resubmitted: the shards spin on the shut gate; behind that, "
        "URLs lost and the resume ends finished, exit 0",
        1, TWO_SHARDS,
        _plan(Fault("driver_kill", 3.0, 0.0, (("resubmit_after", 30.0), ("stalled_first", True)))),
        "the simulation stopped: no simulated time passed in 200000 loop iterations at t=3.980"),
    "zombie_incarnation": Regression(
        "a shard's machine cut off from the cluster: the zombie spins on its shut gate while its successor works",
        1, ONE_SHARD, _plan(Fault("partition", 4.0, 30.0, (("machine", 0),))),
        "the simulation stopped: no simulated time passed in 200000 loop iterations at t=5.897"),
    "restore_misses_a_segment": Regression(
        "a listing that misses a middle object during a restart: a silent partial restore",
        2, TWO_SHARDS,
        _plan(Fault("store_list", 2.0, 60.0, (("list_lag_s", 0.0), ("list_drop", 0.6), ("list_shuffle", False))),
              Fault("shard_crash", 6.0, 0.0, (("shard", 0),))),
        "run 1: exit 0 with an unbalanced ledger: admitted 390 != rows 240 + dropped 138 + queued 0: +12 URLs unacco..."),
    "clock_skew": Regression(
        "machines' wall clocks up to a minute apart: a healthy shard fenced for good",
        1, TWO_SHARDS, _plan(Fault("clock_skew", 0.0, 0.0, (("max_offset_s", 60.0), ("max_drift", 1e-4)))),
        "the crawl never finished (12 runs; last run 12: exit 1, ServiceUnavailableError: 2 seeds could not be queue..."),
    "budget_refunded_after_node_loss": Regression(
        "a node lost with its disk: host budgets and trap cuts refunded, trap hosts crawled past their limit",
        1, ONE_SHARD, _plan(Fault("machine_loss", 8.0, 40.0, (("machine", 0), ("wipe_disk", True)))),
        "trap-calendar.web.test: 34 pages fetched, limits.max_pages_per_host is 19"),
    "idle_snapshots_while_a_loop_is_blocked": Regression(
        "a shard's loop blocked for 90 s: the other shard, idle, writes the same unchanged state to OUT again",
        1, TWO_SHARDS, _plan(Fault("loop_block", 4.0, 90.0, (("shard", 0),))),
        "shard-001: 2 snapshots of generation 1 at change 50 (nothing changed)"),
    "late_listing_ledger": Regression(
        "an object store that lists late: the ledger miscounts, the run still exits 0 and marks the crawl finished",
        1, TWO_SHARDS,
        _plan(Fault("store_list", 2.0, 60.0, (("list_lag_s", 5.0), ("list_drop", 0.0), ("list_shuffle", True)))),
        "run 1: exit 0 with an unbalanced ledger: admitted 340 != rows 168 + dropped 112 + queued 0: +60 URLs unacco..."),
    "store_write_failures": Regression(
        "object-store PUTs failing while a run starts and stops: the lease and the state copies end the run with a traceback",
        1, TWO_SHARDS, _plan(Fault("store_put", 0.5, 30.0, (("put_fail", 0.5), ("put_unknown", 0.2)))),
        "the simulation stopped: simulated time passed 14400s"),
    # Found by the simulator's sweeps (seeds 237, 664, 1839, 470 of the first 2,000).
    "zombie_gate_reopened_by_parked_calls": Regression(
        "a shard's loop blocked, then its machine cut off and a successor started: the calls parked during "
        "the block reopened the zombie's gate and it fetched beside its successor (on the old code the shut "
        "gate's spin comes first)",
        237, Shape(hosts=6, shards=1, seen_shards=1, workers=3),
        _plan(Fault("loop_block", 4.543, 24.15, (("shard", 6),)), Fault("store_get", 7.334, 16.72, (("get_fail", 0.13),)),
              Fault("partition", 9.995, 42.97, (("machine", 6),))),
        "the simulation stopped: no simulated time passed in 200000 loop iterations at t=30.073"),
    "crawl_record_get_failure": Regression(
        "a passing GET failure while a run starts: the lease and the crawl record read without a retry, a traceback",
        664, Shape(hosts=6, shards=3, seen_shards=1, workers=3),
        _plan(Fault("shard_crash", 0.555, 0.0, (("shard", 1),)), Fault("partition", 0.744, 40.73, (("machine", 7),)),
              Fault("store_get", 9.044, 27.9, (("get_fail", 0.28),))),
        "run 1: internal error: StoreUnavailable: simulated GET failure: out/state/lease.json"),
    "service_restarting_at_the_stop": Regression(
        "the seen service restarting when the run stops: its state copy (and the seen-marks audit) failed the stop",
        1839, Shape(hosts=3, shards=3, seen_shards=1, workers=2),
        _plan(Fault("service_crash", 2.662, 0.0, (("service", "content"),)),
              Fault("service_crash", 3.443, 0.0, (("service", "content"),)),
              Fault("service_crash", 9.961, 0.0, (("service", "seen"),))),
        "run 1: internal error: ActorUnavailable: r1/seen-0 is restarting"),
    "snapshot_retried_under_a_new_name": Regression(
        "a snapshot PUT reported failed (it landed) and tried again under a new name, while the driver is paused "
        "(on the old code the shut gate's spin comes first)",
        470, Shape(hosts=3, shards=3, seen_shards=2, workers=2),
        _plan(Fault("store_put", 4.907, 6.25, (("put_fail", 0.37), ("put_unknown", 0.27))), Fault("driver_stall", 8.737, 31.13)),
        "the simulation stopped: no simulated time passed in 200000 loop iterations at t=9.748"),
}
