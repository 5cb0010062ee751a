"""Run the crawler's property tests for minutes instead of seconds.

    python -m tests.fuzz.run [--minutes N] [--target urls|parse|robots|config|all] [--seed S]

Each target gets ``--minutes`` of wall time, shared by its properties (see
:data:`tests.fuzz.properties.PROPERTIES`): hypothesis generates examples in
rounds of up to ``--chunk`` examples (``max_examples`` per round, no deadline, no example database, so
every round explores anew) until the time is up. It prints the examples run per
property and target, and any failure with hypothesis's shrunk example; the exit status
is 1 if anything failed.

Hypothesis, not atheris: the properties need structured inputs (configs, robots lines,
HTML with hrefs) that hypothesis strategies describe directly, and it shrinks failures
to a minimal example. Nothing here touches the network.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import traceback
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings

from tests.fuzz.properties import PROPERTIES, TARGETS, Property


def run_property(prop: Property, seconds: float, chunk: int, rng: random.Random) -> tuple[int, str | None]:
    """Fuzz one property for ``seconds``; return (examples run, failure report or None)."""
    count = 0

    def counted(**kwargs: Any) -> None:
        nonlocal count
        count += 1
        prop.check(**kwargs)

    deadline = time.monotonic() + seconds
    rate = 0.0  # examples per second, measured by the previous round
    while (left := deadline - time.monotonic()) > 0:
        # Rounds as long as --chunk allows, shortened near the end to keep to the budget.
        examples = chunk if rate == 0.0 else max(10, min(chunk, int(rate * left)))
        started, before = time.monotonic(), count
        test = settings(
            max_examples=examples,
            deadline=None,
            database=None,
            derandomize=False,
            phases=[Phase.generate, Phase.shrink],
            suppress_health_check=list(HealthCheck),
            print_blob=True,
        )(given(**prop.strategies)(counted))
        # A fresh seed per round, reproducible from --seed.
        test._hypothesis_internal_use_seed = rng.getrandbits(64)  # type: ignore[attr-defined]
        try:
            test()
        except Exception:  # noqa: BLE001 - a property failure is the result we report
            return count, traceback.format_exc()
        rate = (count - before) / max(1e-3, time.monotonic() - started)
    return count, None


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; returns the exit status."""
    ap = argparse.ArgumentParser(prog="python -m tests.fuzz.run", description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=3.0, help="wall time per target (default 3)")
    ap.add_argument("--target", choices=TARGETS + ("all",), default="all")
    ap.add_argument("--chunk", type=int, default=2000, help="max examples per hypothesis round (default 2000)")
    ap.add_argument("--seed", type=int, default=None, help="seed the rounds (default: random)")
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().getrandbits(32)
    rng = random.Random(seed)
    targets = TARGETS if args.target == "all" else (args.target,)
    print(f"fuzz: targets {', '.join(targets)}, {args.minutes:g} min each, seed {seed}", flush=True)
    failures = 0
    for target in targets:
        props = [p for p in PROPERTIES if p.target == target]
        share = args.minutes * 60.0 / len(props)
        total = 0
        for prop in props:
            t0 = time.monotonic()
            n, failure = run_property(prop, share, args.chunk, rng)
            dt = time.monotonic() - t0
            total += n
            status = "ok" if failure is None else "FAILED"
            print(f"  {target:7s} {prop.name:18s} {n:>9,d} examples in {dt:6.1f}s ({n / dt:,.0f}/s)  {status}",
                  flush=True)
            if failure is not None:
                failures += 1
                print(failure, file=sys.stderr, flush=True)
        print(f"{target}: {total:,d} examples", flush=True)
    print("fuzz: all properties held" if failures == 0 else f"fuzz: {failures} properties FAILED", flush=True)
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
