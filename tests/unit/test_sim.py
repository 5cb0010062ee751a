"""The fault simulator in CI (crawler.testing.sim): named regression seeds, a sweep of 200
seeds, replay, and the checker catching a crawler that loses a delivery.

Each regression seed is one defect of issue 31 (or one the simulator found since): a
seed and the faults it meets, named for the defect. Each failed on the code before its
fix (the failing line it printed is kept beside it) and must pass now. The sweep runs
seeds 1000-1199 in two processes through ``python -m benchmarks.simulate`` -- exactly
what a developer runs for a longer sweep -- and every one must pass.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from crawler.testing.sim import run_seed
from crawler.testing.sim.regressions import REGRESSIONS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("name", sorted(REGRESSIONS))
def test_regression_seed_passes(name):
    case = REGRESSIONS[name]
    result = run_seed(case.seed, plan=case.plan, shape=case.shape)
    assert result.ok, f"{name} (seed {case.seed}, {result.plan}): " + "; ".join(result.violations)
    # The seed still meets the fault it is named for (a change to the nemesis could quietly
    # turn it into a seed that tests nothing).
    assert set(case.plan.kinds()) <= set(result.faults), (case.plan.kinds(), result.faults)


def test_every_regression_failed_before_its_fix_as_the_results_file_says():
    """benchmarks/results/simulate_regressions.json (python -m benchmarks.simulate_regressions
    --before <old checkout>) holds each regression's run on the code before the fixes: it
    failed there, with the line kept beside it, and passed on the code that wrote the file."""
    with open(os.path.join(ROOT, "benchmarks", "results", "simulate_regressions.json"), encoding="utf-8") as f:
        results = json.load(f)
    before, after = results["before"]["regressions"], results["after"]["regressions"]
    assert set(before) == set(after) == set(REGRESSIONS)
    for name, case in REGRESSIONS.items():
        assert not before[name]["ok"] and after[name]["ok"], name
        assert before[name]["violations"][0].startswith(case.before.rstrip(".")), (name, before[name]["violations"][0])


def test_a_seed_replays_exactly_whatever_the_hash_seed():
    """A failing seed must reproduce from its number alone: same requests, same times,
    same processes, with any PYTHONHASHSEED."""
    code = ("import logging; logging.disable(logging.CRITICAL)\n"
            "from crawler.testing.sim import run_seed\n"
            "r = run_seed(9)\n"
            "print(r.trace_digest, r.requests, r.ok)")
    digests = set()
    for hash_seed in ("1", "2"):
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                             env={**os.environ, "PYTHONHASHSEED": hash_seed}, check=True)
        digests.add(out.stdout.strip().splitlines()[-1])
    assert len(digests) == 1, digests


def test_200_seeds_pass(tmp_path):
    out = tmp_path / "simulate.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.simulate", "--seeds", "200", "--from", "1000", "--workers", "2", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )
    summary = json.loads(out.read_text())
    failing = [f"seed {f['seed']} ({f['plan']}): {f['violations'][:2]}" for f in summary["failing_seeds"]]
    assert proc.returncode == 0 and not failing, "\n".join(failing) or proc.stderr[-2000:]
    assert summary["seeds_run"] == 200
    # Every kind of fault was met somewhere in the sweep.
    from crawler.testing.sim.nemesis import KINDS

    assert set(KINDS) <= set(summary["faults_injected"]), summary["faults_injected"]


def _drop_one_batch(monkeypatch) -> list[int]:
    """Make the link router acknowledge one batch of links without delivering it (the
    defect class of issue 31); returns the list that records the batch's size."""
    from crawler.engine.linkrouter import LinkRouter

    real_send = LinkRouter._send
    dropped: list[int] = []

    async def lossy_send(self, owner, items, *rest):
        if not dropped and len(items) >= 3:
            dropped.append(len(items))
            self.batches_sent += 1
            return True  # "delivered"
        return await real_send(self, owner, items, *rest)

    monkeypatch.setattr(LinkRouter, "_send", lossy_send)
    return dropped


def test_the_checker_catches_a_crawler_that_drops_a_delivery(monkeypatch):
    """The simulator is only as good as its checker: with the crawler's own ledger audit
    blinded, a dropped batch ends a run that says "finished" with URLs that have no
    outcome, and the checker must say so."""
    from crawler.session import ledger, ledgeraudit
    from crawler.testing.sim.nemesis import FaultPlan

    dropped = _drop_one_batch(monkeypatch)

    async def blind(*_args, **_kwargs):
        return ledger.not_checked("bloom_only")

    monkeypatch.setattr(ledgeraudit, "marks_at_stop", blind)
    result = run_seed(0, plan=FaultPlan([]))
    assert dropped and not result.ok
    assert any("ledger" in v or "no row" in v for v in result.violations), result.violations


def test_a_dropped_delivery_fails_the_run_and_the_next_run_fetches_the_lost_urls(monkeypatch):
    """The same defect with the audit on: the run that lost the batch exits 1 (its ledger
    does not balance), and the run after it fetches what was lost; the checker agrees."""
    from crawler.testing.sim.nemesis import FaultPlan

    dropped = _drop_one_batch(monkeypatch)
    result = run_seed(0, plan=FaultPlan([]))
    assert dropped
    assert result.runs[0].exit == 1, result.runs
    assert result.runs[-1].exit == 0 and result.ok, result.violations
