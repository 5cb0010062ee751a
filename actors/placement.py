"""Placing a crawl's actors on Ray, and saying what is short when they cannot be placed.

docs/invariants.md #17: a resource that cannot be had is one line naming the setting to
change, never a silent wait. Ray plumbing only; the arithmetic is crawler.render.sizing.

* :func:`cluster_cpus`: the CPUs the sizing plans from (all, free now, largest node).
* :func:`reserve` / :func:`reserved`: the render pool's CPUs are reserved in one
  placement group (bundles spread over the nodes) before any render actor exists. A
  reservation is the GCS's answer, not a worker process starting, so "placed within
  :data:`PLACEMENT_WAIT_S`" means what it says even on a loaded machine. Not reserved in
  time: the group is removed, :func:`render_unplaced` says why in one line, and the
  crawl runs without rendering (counted as ``render.fallbacks.unavailable``).
* :func:`wait_placed`: every other actor (shards, seen, content, budget) until it has
  been created. One still waiting after :data:`PLACEMENT_WAIT_S` is judged by Ray's
  pending resource demand (what ``ray status`` lists as "Pending"): a shard whose shape
  is pending there on two checks in a row waits for CPU or for a node with its region's
  label, and the start fails with :class:`~crawler.errors.PlacementError` (exit 2),
  naming the setting; an actor that is merely slow to start (its worker process on a
  busy machine) is waited for, with a line every :data:`SAY_EVERY_S`.

Every wait here polls, so a Ctrl-C during start-up cancels it at once (jobs/crawl.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from crawler.errors import PlacementError
from crawler.render.sizing import ClusterCpus, RenderPlan

log = logging.getLogger(__name__)

__all__ = ["PLACEMENT_WAIT_S", "Pending", "cluster_cpus", "render_unplaced", "reserve", "reserved", "shard_line",
           "wait_placed", "waiting_for_resources"]

#: How long an actor the crawl needs may wait for its resources before the run says so.
PLACEMENT_WAIT_S = 5.0
#: How often a wait looks again (and how soon a Ctrl-C is noticed at worst).
CHECK_EVERY_S = 0.25
#: How often a wait for actors that are placed but still starting says so (a busy
#: machine starts a worker process in seconds: no line for that).
SAY_EVERY_S = 30.0


def cluster_cpus() -> ClusterCpus:
    """The CPUs of the cluster Ray is connected to (crawler.render.sizing.ClusterCpus)."""
    import ray

    total = float(ray.cluster_resources().get("CPU", 0.0))
    free = float(ray.available_resources().get("CPU", 0.0))
    nodes = [float(n["Resources"].get("CPU", 0.0)) for n in ray.nodes() if n.get("Alive")]
    return ClusterCpus(total, min(free, total), max(nodes, default=total))


def _cpus(x: float) -> str:
    return f"{x:.2f}".rstrip("0").rstrip(".")


def reserve(plan: RenderPlan, name: str) -> Any:
    """Ask for the render pool's bundles (one per actor, spread over the nodes)."""
    from ray.util import placement_group

    return placement_group([{"CPU": plan.cpus_each}] * plan.actors, strategy="SPREAD", name=name)


async def reserved(group: Any, wait_s: float = PLACEMENT_WAIT_S) -> bool:
    """True once ``group`` is reserved; False if it is not within ``wait_s``."""
    from ray.util import placement_group_table

    deadline = time.monotonic() + wait_s
    while True:
        if placement_group_table(group).get("state") == "CREATED":
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(CHECK_EVERY_S)


def render_unplaced(plan: RenderPlan, cluster: ClusterCpus, wait_s: float = PLACEMENT_WAIT_S) -> str:
    """The one line for a render pool that could not be reserved in time."""
    many = "s" if plan.actors > 1 else ""
    return (
        f"render: {plan.actors} render actor{many} of {_cpus(plan.cpus_each)} CPU could not be placed within "
        f"{wait_s:g}s (CPU short: {_cpus(cluster.free)} of the cluster's {_cpus(cluster.total)} CPUs free, "
        f"largest node {_cpus(cluster.largest_node)}): rendering is off for this run; set render.actors or "
        f"render.cores_per_actor lower, or free CPUs"
    )


@dataclass
class Pending:
    """An actor being placed: its handle, what it is (``shard`` or ``service``), the CPUs
    it asked for and its label selector (a shard of a region)."""

    name: str
    handle: Any
    kind: str
    cpus: float = 0.0
    labels: Mapping[str, str] = field(default_factory=dict)


def pending_demand() -> list[dict[str, float]] | None:
    """Resource shapes of the cluster's actors and tasks waiting for resources, one entry
    per waiting request (None: Ray could not say)."""
    import ray

    try:
        from ray.autoscaler.v2.sdk import get_cluster_status

        status = get_cluster_status(ray.get_runtime_context().gcs_address)
    except Exception as exc:  # noqa: BLE001 - an older or remote GCS without the API: unknown, not fatal
        log.debug("pending demand unavailable: %r", exc)
        return None
    shapes: list[dict[str, float]] = []
    for demand in status.resource_demands.ray_task_actor_demand:
        for req in demand.bundles_by_count:
            shapes.extend([dict(req.bundle)] * int(req.count))
    return shapes


def waiting_for_resources(actors: list[Pending], demand: list[dict[str, float]]) -> list[Pending]:
    """The actors among ``actors`` that Ray's demand says are waiting for resources."""
    left = list(demand)
    short = []
    for a in actors:
        if a.cpus <= 0:
            continue  # asks for nothing: never short of it
        shape = next((s for s in left if abs(s.get("CPU", 0.0) - a.cpus) < 1e-6), None)
        if shape is not None:
            left.remove(shape)
            short.append(a)
    return short


def shard_line(short: list[Pending], shards: int, cluster: ClusterCpus, node_labels: list[Mapping[str, str]],
               wait_s: float = PLACEMENT_WAIT_S) -> str:
    """The one line for shards that cannot be placed: which resource, which setting
    (``node_labels``: the labels of each live node)."""
    for a in short:
        for key, value in a.labels.items():
            if not any(labels.get(key) == value for labels in node_labels):
                return (
                    f"runtime.regions: shard {a.name} needs a node labelled {key}={value} and no node has that "
                    f"label: start that region's nodes with `ray start --labels {key}={value}`, or change "
                    f"runtime.regions"
                )
    where = ", ".join(sorted({f"{k}={v}" for a in short for k, v in a.labels.items()}))
    return (
        f"runtime.shards: {len(short)} of {shards} shards ({_cpus(short[0].cpus)} CPU each) still wait for CPU "
        f"after {wait_s:g}s ({_cpus(cluster.free)} of the cluster's {_cpus(cluster.total)} CPUs free"
        f"{'; they need nodes labelled ' + where if where else ''}): set runtime.shards lower, free CPUs, or add nodes"
    )


def _node_labels() -> list[Mapping[str, str]]:
    import ray

    return [n.get("Labels") or {} for n in ray.nodes() if n.get("Alive")]


async def wait_placed(actors: list[Pending], wait_s: float = PLACEMENT_WAIT_S) -> None:
    """Return once every actor is created; PlacementError for shards short of resources
    (see the module docstring). An actor that died while starting raises its error."""
    ready = {asyncio.ensure_future(_ready(a)): a for a in actors}
    started = time.monotonic()
    said = started
    short_before: set[str] = set()
    shards = sum(a.kind == "shard" for a in actors)
    try:
        while ready:
            done, _ = await asyncio.wait(ready, timeout=CHECK_EVERY_S)
            for fut in done:
                ready.pop(fut)
                fut.result()  # an actor that failed to start: its error, now
            if not ready or time.monotonic() - started < wait_s:
                continue
            waiting = list(ready.values())
            demand = pending_demand()
            short = waiting_for_resources([a for a in waiting if a.kind == "shard"], demand or [])
            names = {a.name for a in short}
            if short and names <= short_before:  # twice in a row: not a report lagging behind
                raise PlacementError(shard_line(short, shards, cluster_cpus(), _node_labels(), wait_s))
            short_before = names
            if short:
                continue
            if time.monotonic() - said >= SAY_EVERY_S:
                said = time.monotonic()
                how = "placed, their processes are starting" if demand is not None else "Ray's pending demand unknown"
                log.warning("waiting for %d actors to start (%s): %s", len(waiting),
                            ", ".join(a.name for a in waiting[:4]) + (", ..." if len(waiting) > 4 else ""), how)
    finally:
        for fut in ready:
            fut.cancel()


async def _ready(a: Pending) -> None:
    await a.handle.__ray_ready__.remote()
