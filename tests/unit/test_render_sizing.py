"""The render pool's size: cluster CPUs x shards x settings -> render actors and CPUs each
(crawler.render.sizing). The shards come first; what they leave goes to the browsers."""

from __future__ import annotations

import pytest

from crawler.config import settings as config
from crawler.errors import ConfigError
from crawler.render.settings import RenderConfig
from crawler.render.sizing import ClusterCpus, RenderPlan, check_shards_fit, plan_render_pool

SHARD = 0.5  # actors/host_shard.py SHARD_CPUS


def cluster(total: float, free: float | None = None, node: float | None = None) -> ClusterCpus:
    return ClusterCpus(total, total if free is None else free, total if node is None else node)


# (cluster, shards, actors, cores_per_actor) -> (render actors, CPUs each)
FITS = [
    # The README's settings (actors: auto, cores_per_actor: 2) with runtime.shards: auto
    # (one shard per CPU, at least 2): a 2-core laptop gets one browser actor on the CPU
    # the 2 shards leave; bigger machines one actor per 2 of the half the shards leave.
    (cluster(2), 2, "auto", 2, (1, 1.0)),
    (cluster(3), 3, "auto", 2, (1, 1.5)),
    (cluster(4), 4, "auto", 2, (1, 2.0)),
    (cluster(8), 8, "auto", 2, (2, 2.0)),
    (cluster(16), 16, "auto", 2, (4, 2.0)),
    (cluster(64, node=16), 64, "auto", 2, (16, 2.0)),
    # Few shards on a big machine: browsers still get at most half of it.
    (cluster(16), 2, "auto", 2, (4, 2.0)),
    # Smaller actors where a browser needs less.
    (cluster(2), 2, "auto", 0.5, (2, 0.5)),
    (cluster(2), 2, "auto", 0.25, (4, 0.25)),
    # Nodes of 1 CPU: an actor cannot reserve 2 on one node.
    (cluster(16, node=1), 16, "auto", 2, (8, 1.0)),
    # Another job holds 6 of 8 CPUs: the 2 shards take 1 of the 2 free, browsers the other.
    (cluster(8, free=2), 2, "auto", 2, (1, 1.0)),
    # Explicit counts share what the shards leave, cores_per_actor at most each.
    (cluster(2), 2, 1, 1, (1, 1.0)),
    (cluster(2), 2, 1, 2, (1, 1.0)),
    (cluster(2), 2, 2, 2, (2, 0.5)),
    (cluster(2), 2, 4, 2, (4, 0.25)),
    (cluster(16), 16, 3, 2, (3, 2.0)),
    (cluster(16), 2, 7, 2, (7, 2.0)),  # an explicit count may take more than half
]


@pytest.mark.parametrize("cpus, shards, actors, cores, expected", FITS)
def test_the_pool_takes_what_the_shards_leave(cpus, shards, actors, cores, expected):
    plan = plan_render_pool(RenderConfig(mode="auto", actors=actors, cores_per_actor=cores), cpus,
                            shards=shards, shard_cpus=SHARD)
    assert (plan.actors, plan.cpus_each) == expected
    assert not plan.off
    # Never more than the cluster, never into what the shards reserve.
    assert plan.cpus + shards * SHARD <= cpus.total + 1e-9


@pytest.mark.parametrize("cpus, shards", [
    (cluster(1), 2),  # 2 shards (the auto minimum) take the only CPU
    (cluster(8, free=1), 2),  # other jobs hold all but 1 CPU, and the shards need it
    (cluster(4, node=0.2), 2),  # nodes too small for any browser
])
def test_auto_with_nothing_left_renders_nothing_and_says_why_in_one_line(cpus, shards):
    plan = plan_render_pool(RenderConfig(mode="auto"), cpus, shards=shards, shard_cpus=SHARD)
    assert plan == RenderPlan(0, 0.0, plan.off)
    assert "\n" not in plan.off and "rendering is off" in plan.off
    assert "runtime.shards" in plan.off and plan.describe() == plan.off


@pytest.mark.parametrize("cpus, shards, actors, setting", [
    (cluster(2), 2, 5, "set render.actors to at most 4"),  # 1 CPU left: 0.2 each is too little
    (cluster(1), 2, 1, "render.mode: never"),  # nothing left at all
    (cluster(16), 16, 40, "set render.actors to at most 32"),
])
def test_explicit_actors_that_cannot_fit_are_refused_with_the_setting(cpus, shards, actors, setting):
    with pytest.raises(ConfigError) as err:
        plan_render_pool(RenderConfig(mode="auto", actors=actors), cpus, shards=shards, shard_cpus=SHARD)
    msg = str(err.value)
    assert msg.startswith("render.actors: ") and setting in msg and "\n" not in msg


@pytest.mark.parametrize("cpus, shards, most", [(cluster(2), 8, 4), (cluster(0.4), 2, 0), (cluster(16), 40, 32)])
def test_shards_the_cluster_cannot_hold_are_refused(cpus, shards, most):
    with pytest.raises(ConfigError) as err:
        check_shards_fit(cpus, shards, SHARD)
    msg = str(err.value)
    assert msg.startswith("runtime.shards: ") and "\n" not in msg
    assert (f"at most {most}" in msg) if most else ("add CPUs" in msg)
    # And so does the render plan, whatever the render settings.
    with pytest.raises(ConfigError):
        plan_render_pool(RenderConfig(mode="auto"), cpus, shards=shards, shard_cpus=SHARD)


def test_shards_auto_always_fit_a_cluster_of_one_cpu_or_more():
    for cpus in (1, 2, 3, 7, 64, 1000):
        check_shards_fit(cluster(cpus), config.resolve_shards("auto", cpus), SHARD)


@pytest.mark.parametrize("value, ok", [(2, True), (0.5, True), (0.25, True), (0.2, False), (0, False)])
def test_cores_per_actor_may_be_a_fraction_down_to_a_quarter(value, ok):
    def load():
        return config.from_dict({"seeds": ["http://a.test/"], "render": {"cores_per_actor": value}})

    if ok:
        assert load().render.cores_per_actor == value
    else:
        with pytest.raises(ConfigError, match="render.cores_per_actor"):
            load()
