"""What a crawl says and does when its actors cannot be placed (actors/placement.py's
judgement, without Ray), and what a shard does when no render actor was placed: every
page that wanted rendering is stored raw and counted, and the summary says so."""

from __future__ import annotations

from actors.placement import Pending, render_unplaced, shard_line, waiting_for_resources
from crawler.render.renderer import NoRenderService
from crawler.render.sizing import ClusterCpus, RenderPlan
from crawler.session.crawlstats import render_summary
from crawler.counters import ShardCounters
from jobs.crawl import render_line

from tests.unit.doubles import SHELL, render_crawl, spa_url


def shard(name: str, region: str | None = None) -> Pending:
    return Pending(name, handle=None, kind="shard", cpus=0.5, labels={"region": region} if region else {})


def test_only_actors_whose_shape_ray_lists_as_pending_count_as_short():
    a, b, c = shard("shard-000"), shard("shard-001"), shard("shard-002")
    seen = Pending("seen-000", handle=None, kind="service")
    # Ray lists one 0.5-CPU request waiting (and another job's 4-CPU task): one of the
    # three shards is short, the other two are placed and still starting.
    assert waiting_for_resources([a, b, c, seen], [{"CPU": 0.5}, {"CPU": 4.0}]) == [a]
    assert waiting_for_resources([a, b], [{"CPU": 0.5}, {"CPU": 0.5}]) == [a, b]
    # Nothing pending: every actor still waiting is merely starting.
    assert waiting_for_resources([a, b, seen], []) == []
    # An actor that asks for no CPU is never short of it.
    assert waiting_for_resources([seen], [{}]) == []


def test_shards_short_of_cpu_name_the_setting_in_one_line():
    line = shard_line([shard("shard-001")], 4, ClusterCpus(2, 0, 2), [{}], wait_s=5)
    assert line == ("runtime.shards: 1 of 4 shards (0.5 CPU each) still wait for CPU after 5s (0 of the "
                    "cluster's 2 CPUs free): set runtime.shards lower, free CPUs, or add nodes")


def test_a_region_without_a_labelled_node_names_the_label_to_start_nodes_with():
    short = [shard("shard-eu-000", "eu")]
    line = shard_line(short, 2, ClusterCpus(2, 1, 2), [{"ray.io/node-id": "x"}], wait_s=5)
    assert line.startswith("runtime.regions: shard shard-eu-000 needs a node labelled region=eu")
    assert "`ray start --labels region=eu`" in line and "\n" not in line
    # With the label present the shard waits for CPU on those nodes.
    line = shard_line(short, 2, ClusterCpus(4, 0, 2), [{"region": "eu"}], wait_s=5)
    assert line.startswith("runtime.shards: 1 of 2 shards") and "nodes labelled region=eu" in line


def test_a_render_pool_not_placed_says_what_is_short_and_which_settings_to_change():
    line = render_unplaced(RenderPlan(2, 1.5), ClusterCpus(8, 0.5, 4), wait_s=5)
    assert line == ("render: 2 render actors of 1.5 CPU could not be placed within 5s (CPU short: 0.5 of the "
                    "cluster's 8 CPUs free, largest node 4): rendering is off for this run; set render.actors or "
                    "render.cores_per_actor lower, or free CPUs")


def test_without_render_actors_every_page_that_wanted_rendering_is_stored_raw_and_counted(tmp_path):
    why = "no render actor was placed"
    cfg, server, browser, shard_, rows = render_crawl(tmp_path, service=NoRenderService(why))
    home = rows[spa_url("/")]
    assert home["outcome"] == "fetched" and home["rendered"] is False
    assert "render: unavailable, raw page stored" in home["error"]
    assert [p for p, *_ in server.log if p == "/"] == ["/"]  # fetched once, as ever
    assert not [p for p, *_ in server.log if p.startswith(("/api/", "/app.js"))]  # no browser, no subrequests
    c = shard_.parts.counters
    assert c.families["render_fallback_unavailable"] == 1 == c.render_started and c.rendered == 0
    assert browser.jobs == [] and SHELL  # the scripted browser was never asked


def _counters(saved: dict[str, int]) -> ShardCounters:
    c = ShardCounters()
    c.restore(saved)
    return c


def test_the_summary_says_rendering_was_off_and_what_it_cost():
    pool = {"actors": 0, "cpus_each": 0.0, "off": "render: no CPU left for a browser (...): rendering is off"}
    r = render_summary(_counters({"render_started": 7, "render_fallback_unavailable": 7}), pool)
    assert r["pool"] == pool and r["fallbacks"] == {"unavailable": 7}
    assert render_line(r) == (
        "render: no CPU left for a browser (...): rendering is off "
        "(7 pages that wanted rendering were stored raw: render.fallbacks.unavailable)"
    )
    on = render_summary(_counters({"render_started": 5, "rendered": 4, "render_fallback_timeout": 1}),
                        {"actors": 1, "cpus_each": 1.0, "off": None})
    assert render_line(on) == "render: 1 render actor of 1 CPU; rendered 4 of 5 started, fallbacks timeout 1"
