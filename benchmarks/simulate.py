"""Sweep the fault simulator over many seeds (crawler.testing.sim).

    python -m benchmarks.simulate --seeds 10000            # seeds 0..9999, a results file
    python -m benchmarks.simulate --seed 1234 --trace      # one seed again, with its trace
    python -m benchmarks.simulate --seeds 200 --from 5000  # seeds 5000..5199
    python -m benchmarks.simulate --merge a.json b.json    # sweeps run in parts, one file

Each seed is a whole crawl on simulated time with the faults its seed draws, judged by
the checker. The sweep runs seeds in ``--workers`` processes (default: the machine's
cores) and writes ``benchmarks/results/simulate.json`` (``--out``): seeds run, faults
injected by kind, failing seeds with their first violations, and time per seed. A failing
seed reproduces exactly: the workers run with ``PYTHONHASHSEED=0`` (this command sets it
and starts again when it is not set), so ``--seed N`` replays it bit for bit.

Exit status: 0 when every seed passed, 1 when one failed, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from typing import Any

RESULTS = os.path.join(os.path.dirname(__file__), "results", "simulate.json")


def _one(seed: int) -> dict[str, Any]:
    from crawler.testing.sim import run_seed

    r = run_seed(seed)
    return {
        "seed": seed, "ok": r.ok, "plan": r.plan, "faults": r.faults, "violations": r.violations[:8],
        "runs": len(r.runs), "cpu_s": round(r.cpu_seconds, 3), "sim_s": round(r.sim_seconds, 1),
        "requests": r.requests, "digest": r.trace_digest,
    }


def _quiet_worker() -> None:
    logging.disable(logging.CRITICAL)


def sweep(seeds: list[int], workers: int) -> list[dict[str, Any]]:
    """Run ``seeds`` in ``workers`` processes; results in seed order."""
    if workers <= 1:
        _quiet_worker()
        return [_one(s) for s in seeds]
    with ProcessPoolExecutor(max_workers=workers, initializer=_quiet_worker) as pool:
        return list(pool.map(_one, seeds, chunksize=4))


def summarize(results: list[dict[str, Any]], wall_s: float, workers: int) -> dict[str, Any]:
    faults: Counter[str] = Counter()
    for r in results:
        faults.update(r["faults"])
    failed = [r for r in results if not r["ok"]]
    cpu = [r["cpu_s"] for r in results]
    return {
        "seeds_run": len(results),
        "first_seed": results[0]["seed"] if results else None,
        "workers": workers,
        "failures": len(failed),
        "failing_seeds": [{k: r[k] for k in ("seed", "plan", "violations")} for r in failed],
        "faults_injected": dict(sorted(faults.items())),
        "seeds_without_faults": sum(1 for r in results if not r["faults"]),
        "wall_s": round(wall_s, 1),
        "seeds_per_s": round(len(results) / wall_s, 2) if wall_s else None,
        "cpu_s_per_seed": {"mean": round(sum(cpu) / len(cpu), 3), "max": max(cpu)} if cpu else None,
        "sim_s_per_seed_mean": round(sum(r["sim_s"] for r in results) / len(results), 1) if results else None,
        "runs_per_seed_mean": round(sum(r["runs"] for r in results) / len(results), 2) if results else None,
    }


def merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One summary of sweeps run in parts (consecutive seed ranges, one after the other)."""
    parts = sorted(parts, key=lambda p: p["first_seed"])
    for a, b in zip(parts, parts[1:]):
        if a["first_seed"] + a["seeds_run"] != b["first_seed"]:
            raise ValueError(f"the parts do not follow each other: seeds {a['first_seed']}+{a['seeds_run']}, then {b['first_seed']}")
    seeds = sum(p["seeds_run"] for p in parts)
    wall = sum(p["wall_s"] for p in parts)
    faults: Counter[str] = Counter()
    for p in parts:
        faults.update(p["faults_injected"])
    return {
        "seeds_run": seeds,
        "first_seed": parts[0]["first_seed"],
        "workers": parts[0]["workers"],
        "parts": len(parts),
        "failures": sum(p["failures"] for p in parts),
        "failing_seeds": [f for p in parts for f in p["failing_seeds"]],
        "faults_injected": dict(sorted(faults.items())),
        "seeds_without_faults": sum(p["seeds_without_faults"] for p in parts),
        "wall_s": round(wall, 1),
        "seeds_per_s": round(seeds / wall, 2) if wall else None,
        "cpu_s_per_seed": {
            "mean": round(sum(p["cpu_s_per_seed"]["mean"] * p["seeds_run"] for p in parts) / seeds, 3),
            "max": max(p["cpu_s_per_seed"]["max"] for p in parts),
        },
        "sim_s_per_seed_mean": round(sum(p["sim_s_per_seed_mean"] * p["seeds_run"] for p in parts) / seeds, 1),
        "runs_per_seed_mean": round(sum(p["runs_per_seed_mean"] * p["seeds_run"] for p in parts) / seeds, 2),
    }


def _write(summary: dict[str, Any], out: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.simulate", description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=200, help="how many seeds (default 200)")
    p.add_argument("--from", dest="first", type=int, default=0, help="the first seed (default 0)")
    p.add_argument("--seed", type=int, help="run this one seed and print its trace")
    p.add_argument("--trace", action="store_true", help="with --seed: print the cluster's events")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--out", default=RESULTS, help="results file (default benchmarks/results/simulate.json)")
    p.add_argument("--merge", nargs="+", metavar="FILE", help="write one results file of these parts of a sweep")
    args = p.parse_args(argv)
    if args.merge:
        parts = []
        for path in args.merge:
            with open(path, encoding="utf-8") as f:
                parts.append(json.load(f))
        summary = merge(parts)
        _write(summary, args.out)
        print(f"{summary['seeds_run']} seeds in {summary['parts']} parts, {summary['failures']} failed; results: {args.out}")
        return 0 if not summary["failures"] else 1
    if args.seeds < 1 or args.workers < 1 or args.first < 0:
        print("error: --seeds and --workers must be >= 1 and --from >= 0", file=sys.stderr)
        return 2
    if os.environ.get("PYTHONHASHSEED") != "0":
        # Set iteration order follows str hashes: fix them so a seed replays exactly.
        os.execve(sys.executable, [sys.executable, "-m", "benchmarks.simulate", *(argv or sys.argv[1:])],
                  {**os.environ, "PYTHONHASHSEED": "0"})
    if args.seed is not None:
        from crawler.testing.sim import run_seed

        logging.basicConfig(level=logging.WARNING)
        r = run_seed(args.seed, keep_events=True)
        print(f"seed {r.seed}: {'ok' if r.ok else 'FAILED'}; {r.plan}")
        print(f"  {len(r.runs)} runs, {r.requests} requests, {r.sim_seconds:.1f} simulated s, "
              f"{r.cpu_seconds:.2f} CPU s, trace {r.trace_digest}")
        for run in r.runs:
            print(f"  run {run.number}: exit {run.exit}, {'finished' if run.finished else run.error or 'unfinished'}")
        if args.trace:
            for at, kind, subject, detail in r.events:
                print(f"  {at:10.3f} {kind:16} {subject} {detail}")
        for v in r.violations:
            print(f"  VIOLATION {v}")
        return 0 if r.ok else 1
    seeds = list(range(args.first, args.first + args.seeds))
    start = time.monotonic()
    results = sweep(seeds, args.workers)
    summary = summarize(results, time.monotonic() - start, args.workers)
    _write(summary, args.out)
    print(f"{summary['seeds_run']} seeds, {summary['failures']} failed, {summary['wall_s']} s "
          f"({summary['seeds_per_s']} seeds/s); faults: {summary['faults_injected']}")
    for r in summary["failing_seeds"][:20]:
        print(f"  seed {r['seed']}: {r['violations'][0] if r['violations'] else '?'}")
    print(f"results: {args.out}")
    return 0 if not summary["failures"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
