"""Deterministic simulation of a whole crawl under faults (FoundationDB's way of testing).

One process, one seed: the driver, the shards, the seen, content and budget services, an
object store and a synthetic web, all on simulated time, with a nemesis injecting the
faults of a real cluster and a checker judging the result from the web's own log and
OUT. ``run_seed(n)`` runs seed ``n``; ``python -m benchmarks.simulate`` sweeps seeds.
"""

from crawler.testing.sim.world import SimResult, run_seed

__all__ = ["SimResult", "run_seed"]
