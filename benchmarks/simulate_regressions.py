"""Run the simulator's named regressions (crawler.testing.sim.regressions), before and after.

    python -m benchmarks.simulate_regressions                      # this tree only
    python -m benchmarks.simulate_regressions --before ../old      # and a checkout of the old code

Each regression is a seed, a shape and an explicit fault plan that reproduced a defect.
``--before DIR`` runs the same regressions in DIR: a checkout of the code before the fixes
with this tree's simulator copied in (``crawler/testing/sim/``, ``crawler/testing/sites.py``
and this script; where the old code lacks a seam the simulator uses, DIR adapts the
simulator, never the crawler -- the branch ``sim-baseline`` is such a checkout). Both runs
go to ``benchmarks/results/simulate_regressions.json`` (``--out``): per regression, the
runs' exit statuses, whether the checker passed it, and its first violations.

Exit status: 0 when every regression passes here, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
from typing import Any

RESULTS = os.path.join(os.path.dirname(__file__), "results", "simulate_regressions.json")


def run_here() -> dict[str, Any]:
    """Every regression on this tree's crawler."""
    from crawler.testing.sim import run_seed
    from crawler.testing.sim.regressions import REGRESSIONS

    logging.disable(logging.CRITICAL)
    found: dict[str, Any] = {}
    for name, reg in REGRESSIONS.items():
        r = run_seed(reg.seed, plan=reg.plan, shape=reg.shape)
        found[name] = {
            "ok": r.ok, "exits": [run.exit for run in r.runs], "violations": r.violations[:4],
            "requests": r.requests, "sim_s": round(r.sim_seconds, 1), "cpu_s": round(r.cpu_seconds, 2),
        }
    return found


def _commit(tree: str) -> str:
    proc = subprocess.run(["git", "-C", tree, "describe", "--always", "--dirty"], capture_output=True, text=True)
    return proc.stdout.strip() or "unknown"


def run_in(tree: str) -> dict[str, Any]:
    """:func:`run_here` in another checkout, in its own interpreter (its ``crawler`` first on the path)."""
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": os.path.abspath(tree)}
    proc = subprocess.run([sys.executable, "-m", "benchmarks.simulate_regressions", "--json"], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=3600)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"error: the regressions did not run in {tree}: {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.simulate_regressions", description=__doc__.split("\n\n")[0])
    p.add_argument("--before", help="a checkout of the code before the fixes, with this simulator copied in")
    p.add_argument("--out", default=RESULTS)
    p.add_argument("--json", action="store_true", help="print this tree's results as JSON (what --before reads)")
    args = p.parse_args(argv)
    if os.environ.get("PYTHONHASHSEED") != "0":  # a seed replays exactly only with fixed str hashes
        os.execve(sys.executable, [sys.executable, "-m", "benchmarks.simulate_regressions", *(argv or sys.argv[1:])],
                  {**os.environ, "PYTHONHASHSEED": "0"})
    now = run_here()
    if args.json:
        print(json.dumps(now))
        return 0 if all(r["ok"] for r in now.values()) else 1
    result: dict[str, Any] = {"after": {"commit": _commit("."), "regressions": now}}
    if args.before:
        result["before"] = {"commit": _commit(args.before), "regressions": run_in(args.before)}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    for name, r in now.items():
        was = result.get("before", {}).get("regressions", {}).get(name)
        before = "" if was is None else ("passed" if was["ok"] else f"FAILED {was['violations'][:1]}") + " -> "
        print(f"{name}: {before}{'passed' if r['ok'] else 'FAILED ' + str(r['violations'][:1])}")
    print(f"results: {args.out}")
    return 0 if all(r["ok"] for r in now.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
