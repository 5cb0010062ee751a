"""How many render actors a Ray crawl runs, and how many CPUs each reserves.

A render's CPU is spent in the browser's processes, outside the actor, so a render actor
reserves CPUs for its browsers. The shards come first: a crawl without rendering is a
crawl, a crawl whose shards cannot be placed is none. So the render pool takes what the
shards leave (docs/invariants.md #17: the defaults work on a 2-core laptop, and a resource
that cannot be had is one line naming the setting to change):

* ``render.actors: auto``: at most :data:`SHARE` of the cluster's CPUs, and never more
  than the CPUs free now (other jobs) less what the shards reserve. One actor per
  ``cores_per_actor`` of that; an actor reserves ``cores_per_actor`` CPUs or, when less
  is left, what is left (a fraction of a CPU: one browser with a few tabs renders on
  less than a core). Less than :data:`MIN_CPUS` left: no actor, and the plan says why
  in one line (the crawl runs without rendering).
* ``render.actors: N``: N actors sharing what the shards leave of the cluster, each at
  most ``cores_per_actor``; if that is under :data:`MIN_CPUS` each, the settings are
  refused (:class:`~crawler.errors.ConfigError`) before any actor is created.
* The shards themselves must fit the cluster (:func:`check_shards_fit`).

Pure arithmetic on numbers the Ray runtime reads (actors/placement.py, which also checks
that the actors are actually placed); tests/unit/test_render_sizing.py is its table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from crawler.errors import ConfigError
from crawler.config.sections import MIN_ACTOR_CPUS, RenderConfig

__all__ = ["MIN_CPUS", "SHARE", "ClusterCpus", "RenderPlan", "check_shards_fit", "plan_render_pool"]

#: ``actors: auto`` gives browsers at most this share of the cluster's CPUs.
SHARE = 0.5
#: An actor reserves at least this many CPUs (less left over: no actor).
MIN_CPUS = MIN_ACTOR_CPUS


@dataclass(frozen=True)
class ClusterCpus:
    """The cluster's CPUs as Ray counts them: all, free now (others' actors and tasks
    hold the rest), and the largest node's (an actor runs on one node)."""

    total: float
    free: float
    largest_node: float

    @classmethod
    def idle(cls, cpus: float) -> "ClusterCpus":
        """A single-node cluster with nothing running (the embedded Ray at start)."""
        return cls(cpus, cpus, cpus)


@dataclass(frozen=True)
class RenderPlan:
    """``actors`` render actors of ``cpus_each`` CPUs; with none, ``off`` says why (one line)."""

    actors: int
    cpus_each: float
    off: str = ""

    @property
    def cpus(self) -> float:
        return round(self.actors * self.cpus_each, 4)

    def describe(self) -> str:
        if not self.actors:
            return self.off
        return f"render: {self.actors} render actor{'s' if self.actors > 1 else ''} of {self.cpus_each:g} CPU"


def _floor2(x: float) -> float:
    """Down to 0.01 CPU (Ray's resource unit is finer; a plan reads better this way)."""
    return math.floor(x * 100 + 1e-6) / 100


def check_shards_fit(cluster: ClusterCpus, shards: int, shard_cpus: float) -> None:
    """Refuse a shard count whose CPUs the whole cluster cannot hold (ConfigError, one line)."""
    need = shards * shard_cpus
    if need <= cluster.total + 1e-9:
        return
    most = int(cluster.total // shard_cpus) if shard_cpus > 0 else shards
    fix = f"set runtime.shards to at most {most}, or add CPUs" if most >= 1 else "add CPUs to the cluster"
    raise ConfigError(
        f"runtime.shards: {shards} shards reserve {need:g} CPUs ({shard_cpus:g} each) but the cluster has "
        f"{cluster.total:g}: {fix}"
    )


def plan_render_pool(r: RenderConfig, cluster: ClusterCpus, *, shards: int, shard_cpus: float) -> RenderPlan:
    """The render actors for ``r`` on ``cluster`` beside ``shards`` shards (module docstring).

    Raises ConfigError when an explicit ``render.actors`` cannot fit the cluster at all.
    """
    check_shards_fit(cluster, shards, shard_cpus)
    reserved = shards * shard_cpus
    cap = min(float(r.cores_per_actor), cluster.largest_node)
    after = f"{shards} shards reserve {reserved:g} of the cluster's {cluster.total:g} CPUs"
    if r.actors != "auto":
        n = int(r.actors)
        left = cluster.total - reserved
        each = _floor2(min(cap, left / n))
        if each < MIN_CPUS:
            most = int(left // MIN_CPUS + 1e-9)
            fix = (f"set render.actors to at most {most} (or auto)" if most >= 1
                   else "set runtime.shards lower, add CPUs, or render.mode: never")
            raise ConfigError(
                f"render.actors: {n} render actors need at least {MIN_CPUS:g} CPU each, but {after} "
                f"({max(left, 0):g} left): {fix}"
            )
        return RenderPlan(n, each)
    budget = min(SHARE * cluster.total, min(cluster.free, cluster.total) - reserved)
    if budget < MIN_CPUS or cap < MIN_CPUS:  # cap: a node smaller than MIN_CPUS
        free = f", {cluster.free:g} free" if cluster.free < cluster.total else ""
        return RenderPlan(0, 0.0, off=(
            f"render: no CPU left for a browser ({after}{free}): rendering is off for this run; "
            f"set runtime.shards lower or add CPUs"
        ))
    n = max(1, int(budget / cap + 1e-9))
    return RenderPlan(n, _floor2(min(cap, budget / n)))
