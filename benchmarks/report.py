"""Regenerate the README's Performance section from the committed results files.

Every figure between the README's ``<!-- results:begin -->`` and ``<!-- results:end -->``
markers is read from a JSON file under ``benchmarks/results/`` and each row names its
file, so a number in the README always points at the measurement it came from.

    python -m benchmarks.report            # rewrite the section in README.md and benchmarks/RESULTS.md
    python -m benchmarks.report --check    # exit 1 if either differs from the files

Only the standard library is used: the unit test that runs ``--check`` needs no
benchmark tool installed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import Any

BEGIN = "<!-- results:begin -->"
END = "<!-- results:end -->"
#: The figures of the README's "News and feeds" section (benchmarks/news.py).
NEWS_BEGIN = "<!-- news:begin -->"
NEWS_END = "<!-- news:end -->"

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")

Results = dict[str, dict[str, Any]]


def load(results_dir: str = RESULTS) -> Results:
    """Every ``*.json`` of ``results_dir`` by file name."""
    out: Results = {}
    for name in sorted(os.listdir(results_dir)):
        if name.endswith(".json"):
            with open(os.path.join(results_dir, name)) as f:
                out[name] = json.load(f)
    return out


def _n(x: float, digits: int = 0) -> str:
    """A number with thousands separators and ``digits`` decimals."""
    return f"{x:,.{digits}f}"


def _src(name: str) -> str:
    return f"[{name.removesuffix('.json')}](benchmarks/results/{name})"


def _met(ok: bool) -> str:
    return "met" if ok else "**not met**"


Row = tuple[str, str, str, str]  # measurement, result, target and verdict, source file


def _ceiling_of(d: dict[str, Any]) -> dict[str, Any] | None:
    ph = d["phases"]
    return d.get("ceiling") or ph.get("bare2") or ph.get("bare")


def _ratios(d: dict[str, Any], mode: str = "ray") -> tuple[float, float] | None:
    """(steady pages/s over the ceiling's, CPU per page over the ceiling's) of one run."""
    bare, p = _ceiling_of(d), d["phases"].get(mode)
    if bare is None or p is None:
        return None
    speed = (p.get("steady_pages_per_s") or p["pages_per_s"]) / (bare.get("steady_pages_per_s") or bare["pages_per_s"])
    return speed, p["cpu_ms_per_page"] / bare["cpu_ms_per_page"]


def _runs(r: Results, prefix: str) -> list[tuple[str, dict[str, Any]]]:
    """Results files ``<prefix>_r<N>.json`` (repeated runs of one benchmark), in order."""
    out = []
    for name, d in r.items():
        stem = name.removesuffix(".json")
        if stem.startswith(prefix + "_r") and stem[len(prefix) + 2:].isdigit():
            out.append((int(stem[len(prefix) + 2:]), name, d))
    return [(name, d) for _, name, d in sorted(out)]


def _median(vals: list[float]) -> float:
    vals = sorted(vals)
    return vals[len(vals) // 2] if len(vals) % 2 else (vals[len(vals) // 2 - 1] + vals[len(vals) // 2]) / 2


def _spread(vals: list[float], digits: int = 2) -> str:
    """``median (min-max over N runs)``, or the value alone for one run."""
    vals = sorted(vals)
    med = vals[len(vals) // 2] if len(vals) % 2 else (vals[len(vals) // 2 - 1] + vals[len(vals) // 2]) / 2
    if len(vals) == 1:
        return f"{med:.{digits}f}"
    return f"{med:.{digits}f} ({vals[0]:.{digits}f}-{vals[-1]:.{digits}f} over {len(vals)} runs)"


def _throughput_rows(r: Results) -> list[Row]:
    runs = _runs(r, "throughput")
    if not runs:
        return []
    before = _runs(r, "throughput_before")
    srcs = ", ".join(_src(n) for n, _ in runs)
    ceilings = [c for c in (_ceiling_of(d) for _, d in runs) if c is not None]
    rows: list[Row] = []
    if ceilings:
        c0 = ceilings[0]
        procs = c0.get("procs", 1)
        steady = [c.get("steady_pages_per_s") or c["pages_per_s"] for c in ceilings]
        rows.append((f"bare fetch + parse loop, {procs} process{'es' if procs > 1 else ''}"
                     + (", uvloop" if c0.get("uvloop") else "") + " (run before and after each crawl)",
                     f"{_spread(steady, 0)} pages/s steady, {_spread([c['cpu_ms_per_page'] for c in ceilings])} "
                     f"CPU-ms/page", "(the ceiling)", srcs))
    for mode, label in (("ray", "full pipeline on embedded Ray"), ("local", "full pipeline in one process (`--local`)")):
        got = [(d["phases"][mode], _ratios(d, mode)) for _, d in runs if mode in d["phases"]]
        got = [(p, x) for p, x in got if x is not None]
        if not got:
            continue
        speed = [x[0] for _, x in got]
        cpu = [x[1] for _, x in got]
        res = (f"{_spread([p.get('steady_pages_per_s') or p['pages_per_s'] for p, _ in got], 0)} pages/s steady, "
               f"{_spread([p['cpu_ms_per_page'] for p, _ in got])} CPU-ms/page; **{_spread(speed)}** of the ceiling, "
               f"CPU **{_spread(cpu)}x**")
        reqs = [p["server_requests"] / p["pages"] for p, _ in got if p.get("server_requests") and p.get("pages")]
        if reqs:
            res += f"; {_spread(reqs)} requests per stored page (robots.txt and /sitemap.xml of every host included)"
        med_speed, med_cpu = _median(speed), _median(cpu)
        if mode == "ray":
            target = f">= 0.5 of the ceiling: {_met(med_speed >= 0.5)}; CPU <= 2x: {_met(med_cpu <= 2.0)}"
        else:
            # The ceiling runs in 2 processes; one process is compared with half of it.
            per_proc = [x * _ceiling_of(d).get("procs", 1) for _, d in runs if mode in d["phases"]
                        for x in [(_ratios(d, mode) or (0.0, 0.0))[0]]]
            res += f"; per process **{_spread(per_proc)}** of the ceiling's"
            target = f">= 0.55 of the ceiling per process: {_met(_median(per_proc) >= 0.55)}; CPU <= 2x: {_met(med_cpu <= 2.0)}"
        src = srcs
        old = [x for x in (_ratios(d, mode) for _, d in before) if x is not None]
        if old:
            res += (f". Before this round (main, same harness, runs interleaved): {_spread([x[0] for x in old])} of "
                    f"the ceiling, CPU {_spread([x[1] for x in old])}x")
            if mode == "local":
                procs = [_ceiling_of(d).get("procs", 1) for _, d in before]
                res += f", per process {_spread([x[0] * n for x, n in zip(old, procs)])}"
            src += ", " + ", ".join(_src(n) for n, _ in before)
        rows.append((f"{label}, same run as the ceiling", res, target, src))
    return rows


def _uvloop_rows(r: Results) -> list[Row]:
    name = "uvloop.json"
    d = r.get(name)
    if d is None:
        return []
    s = d["summary"]
    plain, uv = s["asyncio"], s["uvloop"]
    return [(f"uvloop: the 1-process bare loop on asyncio's loop vs uvloop, alternating in one process "
             f"({d['rounds']} runs each, {d['pages']:,} pages)",
             f"{plain['median_cpu_ms_per_page']:.3f} vs {uv['median_cpu_ms_per_page']:.3f} CPU-ms/page, median "
             f"({plain['min']:.3f}-{plain['max']:.3f} vs {uv['min']:.3f}-{uv['max']:.3f}): "
             f"{100 * d['uvloop_saving']:.0f}% less", "", _src(name))]


def _scrapy_rows(r: Results) -> list[Row]:
    rows: list[Row] = []
    runs = [(n, f"now, run {i + 1}") for i, (n, _) in enumerate(_runs(r, "scrapy_compare"))]
    for name, when in (*runs, ("scrapy_compare_before.json", "before this round")):
        d = r.get(name)
        if d is None:
            continue
        v = d["verdict"]
        speed = v["speedup"]
        rows.append((f"Scrapy on the same web, same politeness, {d['pages']:,} pages, same run ({when})",
                     f"crawler {_n(v['crawler_pages_per_s'], 1)} vs Scrapy {_n(v['scrapy_pages_per_s'], 1)} pages/s = "
                     f"**{speed:.1f}x**; CPU {v['crawler_cpu_ms_per_page']:.1f} vs {v['scrapy_cpu_ms_per_page']:.1f} ms/page"
                     f"{_load(d)}",
                     f">= 10x: {_met(speed >= 10.0)}" if when.startswith("now") else "", _src(name)))
    return rows


def _load(d: dict[str, Any]) -> str:
    """The machine's 1-minute load average at the start and the end of a run."""
    m = d.get("machine", {})
    a, b = m.get("load_avg_1m"), m.get("load_avg_1m_end")
    if a is None:
        return ""
    return f"; load {a:g}" + (f"-{b:g}" if b is not None else "")


def _politeness_rows(r: Results) -> list[Row]:
    rows: list[Row] = []
    found = [(n, d) for n, d in r.items() if isinstance(d, dict) and d.get("benchmark") == "politeness_bound"]
    found.sort(key=lambda nd: (nd[0].endswith("_before.json"), nd[1]["hosts"], -nd[1]["interval_s"]))
    for name, d in found:
        v, s = d["verdict"], d["server"]
        eff = v["steady_state_efficiency"]
        rate = 1.0 / d["interval_s"]
        before = name.endswith("_before.json")
        rows.append((f"politeness-bound: {d['hosts']:,} hosts at {rate:g} req/s" + (" (before this round)" if before else ""),
                     f"**{100 * eff:.1f}%** of the bound steady ({100 * v['whole_crawl_efficiency']:.1f}% whole crawl), "
                     f"{s['violations']} interval violations at the server in {s['server_requests']:,} requests; "
                     f"crawler {v['cpu_ms_per_page']:.2f} CPU-ms/page, {d['crawl']['cpu_cores_busy']} cores busy{_load(d)}",
                     "" if before else f">= 95%, 0: {_met(eff >= 0.95 and s['violations'] == 0)}", _src(name)))
    return rows


def _result(d: dict[str, Any], kind: str, urls: int) -> dict[str, Any] | None:
    for e in d.get("results", []):
        if e.get("kind") == kind and e.get("urls") == urls:
            return e
    return None


def _memory_rows(r: Results) -> list[Row]:
    rows: list[Row] = []
    name = "memory.json"
    d = r.get(name)
    if d is not None:
        disk = _result(d, "seen-exact-disk", 10_000_000)
        mem = _result(d, "seen-exact-mem", 10_000_000)
        bloom = _result(d, "seen-bloom", 10_000_000)
        if disk is not None:
            others = []
            if mem is not None:
                others.append(f"in-memory exact: {mem['ram_bytes_per_url']:.1f} B")
            if bloom is not None:
                others.append(f"Bloom only: {bloom['ram_bytes_per_url']:.2f} B")
            rows.append(("RAM per seen URL, exact disk-backed mode, 10M URLs",
                         f"{disk['ram_bytes_per_url']:.2f} B ({'; '.join(others)})",
                         f"<= 4 B: {_met(disk['ram_bytes_per_url'] <= 4)}", _src(name)))
            lo = _result(d, "seen-exact-disk", 1_000_000)
            disks = [e["disk_bytes_per_url"] for e in (lo, disk) if e is not None]
            rows.append(("seen store on disk, 1M and 10M URLs",
                         " and ".join(f"{x:.1f}" for x in disks) + " B per URL", "", _src(name)))
    name = "memory_frontier_window4.json"
    d = r.get(name)
    if d is not None:
        big = _result(d, "frontier-spill", 10_000_000)
        small = _result(d, "frontier-spill", 1_000_000)
        if big is not None and small is not None:
            rows.append(("RAM per queued URL once spilled (10k hosts, window 4)",
                         f"{big['ram_bytes_per_url']:.1f} B at 10M, {small['ram_bytes_per_url']:.1f} B at 1M; "
                         f"{big['disk_bytes_per_url']:.0f} B on disk",
                         f"<= 64 B: {_met(max(big['ram_bytes_per_url'], small['ram_bytes_per_url']) <= 64)}",
                         _src(name)))
    return rows


def _content_rows(r: Results) -> list[Row]:
    name = "content_index.json"
    d = r.get(name)
    if d is None:
        return []
    rows: list[Row] = []
    for e in d["sizes"]:
        rows.append((f"duplicate-content index, {e['pages'] / 1e6:g}M pages, {e['shards']} shards x {e['tables']} tables",
                     f"{e['array_bytes_per_page']:.0f} B of arrays per indexed page (RSS growth {e['ram_bytes_per_page']:.0f} B), "
                     f"{e['disk_bytes_per_page']:.0f} B of log; {_n(e['lookups_per_s'])} lookups/s, "
                     f"{_n(e['inserts_per_s'])} inserts/s; {e['candidates_per_lookup']:.2f} candidates checked per lookup",
                     "memory stated, no URL resident", _src(name)))
    sweep = sorted(d.get("tables_sweep", []) + [e for e in d["sizes"] if e["pages"] == d["sizes"][0]["pages"]],
                   key=lambda e: e["tables"])
    if sweep:
        parts = [f"{e['tables']}: {e['candidates_per_lookup']:.2f} ({e['array_bytes_per_page']:.0f} B, "
                 f"{_n(e['lookups_per_s'])}/s)" for e in sweep]
        rows.append((f"candidates checked per lookup as the table count varies ({sweep[0]['pages'] / 1e6:g}M pages, k = 3)",
                     "tables " + "; ".join(parts), "", _src(name)))
    return rows


def _ring_rows(r: Results) -> list[Row]:
    name = "ring.json"
    d = r.get(name)
    if d is None:
        return []
    worst, moved, ideal = d["busiest_over_mean_worst"], d["moved_pct_mean"], d["moved_pct_ideal"]
    return [(f"hash ring, {d['shards']} shards x {d['hosts'] // 1000}k hosts ({len(d['schemes'])} shard namings)",
             f"busiest shard {worst:.3f}x mean (worst naming); adding shard {d['shards'] + 1} moves {moved:.1f}% "
             f"(ideal {ideal:.1f}%), all to the new shard" if d["all_moves_to_new_shard"] else
             f"busiest shard {worst:.3f}x mean; adding one moves {moved:.1f}%",
             f"<= 1.15x: {_met(worst <= 1.15)}", _src(name))]


def _restart_rows(r: Results) -> list[Row]:
    runs = r.get("restart.json")
    if not runs:
        return []
    before = next((x for x in runs if x["label"].startswith("before")), None)
    after = next((x for x in runs if x["label"] == "after"), None)
    if before is None or after is None:
        return []
    rows: list[Row] = []
    b, a = before.get("kill_restart"), after.get("kill_restart")
    if b and a:
        rows.append((
            "kill -9 of `crawl run` mid-crawl (demo web, Ray, 2 shards), the same command restarted at once",
            f"pages requested twice: {a['requested_twice']:,} of {a['pages']:,} (before: {b['requested_twice']:,} of "
            f"{b['pages']:,}); first fetched outside the kill's durability window: {a['requested_twice_outside_durability_window']}; "
            f"old shards gone {a['old_shards_gone_after_kill_s']} s after the kill, new ones up at "
            f"{a['new_shards_up_after_kill_s']} s (overlap {a['runs_overlap_s']} s)",
            "nothing durable fetched again, no overlap: "
            f"{_met(a['requested_twice_outside_durability_window'] == 0 and a['runs_overlap_s'] == 0)}",
            _src("restart.json"),
        ))
    b, a = before.get("traps_last"), after.get("traps_last")
    if b and a:
        rows.append((
            "traps as the last work (trap web, `max_pages_per_host` 1,000)",
            f"crawl ran {a['after_last_normal_host_s']} s after the last normal host, {a['trap_requests']} trap requests "
            f"(before: {b['after_last_normal_host_s']} s, {b['trap_requests']})",
            "bounded by the budget rules (tests/integration/test_traps_last.py)",
            _src("restart.json"),
        ))
    return rows


def _freshness_rows(r: Results) -> list[Row]:
    d = r.get("freshness.json")
    if d is None:
        return []
    per, nm, pick = d["fetches_per_page"], d["not_modified_share"], d["pickup_delay_s"]
    rc = d["recrawl"]
    return [(
        f"continuous crawl of the freshness web, {d['duration_s']:g} s, intervals {rc['min_interval_s']:g}-"
        f"{rc['max_interval_s']:g} s, periodic pages change every {d['change_period_s']:g} s",
        f"fetches per page: changing {per['changing']:g}, periodic {per['periodic']:g}, static {per['etag']:g} (ETag) / "
        f"{per['lastmod']:g} (Last-Modified) / {per['plain']:g} (no validators); 304 share of refetches: ETag "
        f"{nm['etag']:.0%}, Last-Modified {nm['lastmod']:.0%}; change picked up after {pick['mean']:.2f} s mean, "
        f"{pick['max']:.2f} s max ({pick['n']} changes)",
        f"pickup <= max interval {rc['max_interval_s']:g} s: {_met(pick['max'] <= rc['max_interval_s'])}",
        _src("freshness.json"),
    )]


NEWS_SETUPS = (
    ("news", "only `recrawl: {enabled: true, min_interval_s: 5}`"),
    ("hubs_only", "the same, feeds and news sitemaps off (hubs only)"),
    ("tuned_by_hand", "no news sources, `initial_interval_s: 30`, `max_interval_s: 3600`"),
)


def _news_figures(d: dict, run: dict) -> str:
    f = run["figures"]
    return (f"publication to fetch median {f['delay_median_s']:g} s, p95 {f['delay_p95_s']:g} s "
            f"({run['delay_s']['n']} articles, {len(run['missed'])} missed); "
            f"{f['source_requests_per_article']:g} requests to hubs, feeds and sitemaps per new article; "
            f"archive pages fetched {f['archive_fetches_per_page']:g} times each")


def _news_goals(d: dict, run: dict) -> str:
    g, met = d["goals"], run["goals_met"]
    return (f"median <= {g['delay_median_s']:g} s: {_met(met['delay_median_s'])}, p95 <= {g['delay_p95_s']:g} s: "
            f"{_met(met['delay_p95_s'])}, <= {g['source_requests_per_article']:g} requests: "
            f"{_met(met['source_requests_per_article'])}, archive <= {g['archive_fetches_per_page']:g}: "
            f"{_met(met['archive_fetches_per_page'])}")


def _news_rows(r: Results) -> list[Row]:
    d = r.get("news.json")
    if d is None:
        return []
    return [(
        f"news web ({d['hosts']} hosts, an article per {d['mean_publication_interval_s']:g} s each, "
        f"{d['duration_s']:g} s): {label}",
        _news_figures(d, d["runs"][name]),
        _news_goals(d, d["runs"][name]),
        _src("news.json"),
    ) for name, label in NEWS_SETUPS if name in d["runs"]]


def _regions_rows(r: Results) -> list[Row]:
    d = r.get("regions.json")
    if d is None:
        return []
    reg, one = d["runs"]["regions"], d["runs"]["one_region"]
    g, met = d["goals"], d["goals_met"]
    return [(
        f"region web ({d['hosts_per_region']} hosts per region x {d['pages_per_host']} pages, 2 regions, "
        f"{d['cross_delay_s']:g} s across, interval {d['interval_s']:g} s): regions against one region",
        f"distant hosts done in {reg['distant_hosts_done_s']:g} s against {one['distant_hosts_done_s']:g} s "
        f"({d['distant_speedup']:g}x); {reg['pages_per_s']:g} against {one['pages_per_s']:g} pages/s; mean answer "
        f"time per host {reg['mean_latency_per_host_s']:g} s against {one['mean_latency_per_host_s']:g} s; "
        f"lowest share of a host's requests from its home region {reg['min_home_share']:g}",
        f">= {g['distant_speedup']:g}x: {_met(met['distant_speedup'])}, home share >= {g['min_home_share']:g}: "
        f"{_met(met['min_home_share'])}",
        _src("regions.json"),
    )]


def _news_load(d: dict) -> str:
    loads = [run["load_average"][0] for run in d["runs"].values() if run.get("load_average")]
    return f"{max(loads):.1f}" if loads else ""


def render_news(r: Results) -> str:
    """The README's "News and feeds" figures (between the news markers)."""
    d = r.get("news.json")
    if d is None:
        return "(no benchmarks/results/news.json yet: python -m benchmarks.news)"
    out = [f"Measured by `python -m benchmarks.news` ({_src('news.json')}): {d['hosts']} news hosts, an article per "
           f"{d['mean_publication_interval_s']:g} s on average on each (Poisson), 1 s politeness interval, "
           f"{d['duration_s']:g} s of continuous crawl, the three setups side by side on copies of the same web; "
           f"delays are over the articles published more than {d['settle_s']:g} s before the end."
           + (f" Load average (1 min) of the shared 2-core machine at the end: {_news_load(d)}." if _news_load(d) else "")
           + (f" The previous scheduler's rows are from [{d['previous']['file'].rsplit('/', 1)[-1]}]"
              f"({d['previous']['file']}), measured {d['previous']['measured']} on the same web and setups, not rerun."
              if d.get("previous") else ""), "",
           "| setup | median delay | p95 delay | requests to hubs, feeds, sitemaps per new article | archive fetches per page |",
           "|---|---|---|---|---|"]
    for name, label in NEWS_SETUPS:
        run = d["runs"].get(name)
        if run is None:
            continue
        f, met = run["figures"], run["goals_met"]
        cell = lambda k, unit="": f"{f[k]:g}{unit}" + ("" if met[k] else " (not met)")  # noqa: E731, B023 - called within the iteration
        out.append(f"| {label} | {cell('delay_median_s', ' s')} | {cell('delay_p95_s', ' s')} | "
                   f"{cell('source_requests_per_article')} | {cell('archive_fetches_per_page')} |")
    prev = d.get("previous")
    if prev is not None:  # the same setups on the scheduler before, as measured then
        g = d["goals"]
        for name, label in NEWS_SETUPS:
            f = prev["figures"].get(name)
            if f is None:
                continue
            cell = lambda k, unit="": f"{f[k]:g}{unit}" + ("" if f[k] <= g[k] else " (not met)")  # noqa: E731, B023 - called within the iteration
            out.append(f"| {label}, previous scheduler ({prev['measured']}, {prev['commit']}) | {cell('delay_median_s', ' s')} | "
                       f"{cell('delay_p95_s', ' s')} | {cell('source_requests_per_article')} | "
                       f"{cell('archive_fetches_per_page')} |")
    refetch = ", ".join(f"{d['runs'][n]['source_refetches_per_article']:g}" for n, _ in NEWS_SETUPS if n in d["runs"])
    out += ["", f"Without the first fetch of each front, section, feed and sitemap page (discovery any crawl makes), "
                f"requests per new article are {refetch} in the same order."]
    faster = r.get("news_11s.json")  # the acceptance rate: an article per 11 s
    if faster is not None and "news" in faster["runs"]:
        run = faster["runs"]["news"]
        f, met = run["figures"], run["goals_met"]
        cells = " | ".join(f"{f[k]:g}{u}" + ("" if met[k] else " (not met)") for k, u in (
            ("delay_median_s", " s"), ("delay_p95_s", " s"), ("source_requests_per_article", ""), ("archive_fetches_per_page", "")))
        out += ["", f"The same first setup on a faster web (an article per {faster['mean_publication_interval_s']:g} s on "
                    f"each host, {faster['duration_s']:g} s, {run['delay_s']['n']} articles, {len(run['missed'])} missed; "
                    f"{_src('news_11s.json')}; load average {run['load_average'][0]:.1f}): {cells} "
                    f"(median, p95, requests per new article, archive fetches per page); without the first fetches "
                    f"{run['source_refetches_per_article']:g} requests per new article."]
    g = d["goals"]
    out += ["", f"Goals: median <= {g['delay_median_s']:g} s, p95 <= {g['delay_p95_s']:g} s, <= "
                f"{g['source_requests_per_article']:g} requests per new article, archive pages fetched <= "
                f"{g['archive_fetches_per_page']:g} times each; \"(not met)\" marks a figure over its goal."]
    return "\n".join(out)


def _neardup_rows(r: Results) -> list[Row]:
    d = r.get("neardup.json")
    if d is None:
        return []
    syn, cor = d["synthetic"], d["corpus"]
    recall = lambda sec, src: f"{sec[src]['copy_recall']:.1%}"  # noqa: E731
    return [(
        f"near-duplicates at distance {d['distance']}: copies that differ only in chrome, main content vs whole page",
        f"recall, main content / whole page: synthetic footer {recall(syn['footer'], 'main')} / "
        f"{recall(syn['footer'], 'whole')}, related links {recall(syn['related'], 'main')} / "
        f"{recall(syn['related'], 'whole')}; real pages with footer {recall(cor['footer'], 'main')} / "
        f"{recall(cor['footer'], 'whole')}, nav {recall(cor['nav'], 'main')} / {recall(cor['nav'], 'whole')}; "
        f"false positives {cor['distinct']['main']['false_positives']} of {cor['distinct']['main']['pairs_compared']:,} "
        f"distinct real pairs, {syn['distinct']['main']['false_positives']} of {syn['distinct']['main']['pairs_compared']} synthetic",
        "",
        _src("neardup.json"),
    )]


def _render_rows(r: Results) -> list[Row]:
    d = r.get("render.json")
    if d is None:
        return []
    a, b, p = d["auto"], d["baseline"], d["pool"]
    dq, viol = a["decision"], a["politeness"]
    ratio = d["useful_pages_per_s_ratio"]
    mem = p["memory_mb"]
    return [
        (
            f"JavaScript pages: `render: auto` vs a render-everything CDP loop, same Chromium, {d['tabs']} tabs, "
            f"mixed web of {a['documents']} pages ({dq['needed']} need rendering)",
            f"auto {a['pages_per_s']:g} pages/s, {a['rendered_share']:.1%} rendered, found {a['found']}/{a['documents']}; "
            f"loop {b['pages_per_s']:g} pages/s, found {b['found']}/{b['documents']}: {ratio:g}x; decision precision "
            f"{dq['precision']:.1%}, recall {dq['recall']:.1%} (spot checks included); render p50/p95 "
            f"{a['render_time_s']['p50']:g}/{a['render_time_s']['p95']:g} s; politeness violations, every request "
            f"counted: auto {viol['overlapping'] + viol['closer_than_interval']} of {viol['requests']:,}, loop "
            f"{b['politeness']['overlapping'] + b['politeness']['closer_than_interval']} of {b['politeness']['requests']:,}",
            f">= 2x the loop's pages/s: {_met(ratio >= 2)}; 0 violations: "
            f"{_met(viol['overlapping'] + viol['closer_than_interval'] == 0)}",
            _src("render.json"),
        ),
        (
            f"browser pool: {p['renders']:,} renders on one Chromium, {d['tabs']} tabs, no recycling",
            f"{p['renders_per_s']:g} renders/s ({p['renders_per_s_per_core']:g} per core of {p['cores']}), "
            f"{p['cpu_s_per_render']:g} CPU s per render, p50/p95 {p['render_time_s']['p50']:g}/"
            f"{p['render_time_s']['p95']:g} s; browser memory (PSS) {mem['after_50']:g} MB over renders 50-140, "
            f"{mem['last']:g} MB over the last 100 ({mem['growth']:+.1%}); load average {d['load_before']:.0f}",
            f"<= 10% memory growth: {_met(mem['growth'] is not None and mem['growth'] <= 0.10)}",
            _src("render.json"),
        ),
    ]


ROW_BUILDERS: tuple[Callable[[Results], list[Row]], ...] = (
    _throughput_rows, _scrapy_rows, _politeness_rows, _uvloop_rows, _memory_rows, _content_rows, _ring_rows,
    _restart_rows, _freshness_rows, _news_rows, _regions_rows, _neardup_rows, _render_rows,
)


def _profile_lines(r: Results) -> list[str]:
    lines: list[str] = []
    for name, label in (("profile_local_before.json", "before this round"), ("profile_local.json", "now")):
        d = r.get(name)
        if d is None:
            continue
        top = ", ".join(f"`{f.split(' (')[0]}` {pct:.1f}" for f, pct in d["top_self"][:10])
        lines.append(f"py-spy over a {d['pages']:,}-page crawl in one process, {label} (self time, % of busy "
                     f"samples, {_src(name)}): {top}.")
    d = r.get("profile_ray_shards.json")
    if d is not None:
        top = ", ".join(f"`{f.split(' (')[0]}` {pct:.1f}" for f, pct in d["top_self"][:10])
        comp = ", ".join(f"{c} {pct:.1f}" for c, pct in d["by_component"][:8])
        lines.append(f"py-spy attached to the {d['shards_profiled']} HostShard actors of a Ray crawl for "
                     f"{d['duration_s']:g} s, now ({_src('profile_ray_shards.json')}): {top}. By component: {comp}.")
    return lines


def _stage_lines(r: Results) -> list[str]:
    name = "stages.json"
    d = r.get(name)
    if d is None:
        return []
    ms = d["ms_per_page"]
    parts = [f"parse {ms['parse']:.2f} ms", f"link policy {ms['follow']:.2f} ms "
             f"({d['followed_per_page']:.0f} links followed of {d['links_per_page']:.0f})",
             f"SimHash {ms['simhash']:.2f} ms", f"SHA-256 {ms['sha256']:.3f} ms",
             f"gzip level 1 {ms['gzip1']:.2f} ms vs zstd level 1 {ms['zstd1']:.2f} ms"]
    return [f"CPU per page by stage, in process ({d['pages']:,} bench pages, {_src(name)}): " + "; ".join(parts) + "."]


_STAGE_LABELS = {
    "sha256": "SHA-256 of the body", "parse": "parse (all of parse_page)", "parse.tree": "  lexbor tree",
    "parse.head": "  head pass (base, title, robots meta)", "parse.links": "  link nodes + Link objects",
    "parse.join": "  join_url of the distinct hrefs", "parse.text": "  strip + body text",
    "parse.main": "  main-content text", "fingerprint": "SimHash of the main text",
    "follow": "link policy (normalize, scope, traps)", "urlitems": "UrlItems of the followed links",
    "seen": "seen check (url_hash64 + Bloom + exact)", "seen.pybloom": "  with pybloom-live",
    "seen.rbloom": "  with rbloom", "bare_extract": "bare loop's extraction (lexbor + urljoin), for scale",
}


def _stage_table(r: Results) -> list[str]:
    """Issue 20's stage table: CPU and instructions per page, before and after, against the budget."""
    before, after = r.get("stages_before.json"), r.get("stages_after.json")
    if before is None or after is None:
        return []
    bu, au = before["us_per_page"], after["us_per_page"]
    bi, ai = before.get("instructions_per_page", {}), after.get("instructions_per_page", {})
    budget = after.get("budget_us_per_page", {})
    lines = [f"CPU per page by stage, each stage alone on the same {after['pages']:,} bench pages in one process "
             f"(best of {after['repeat']}, CPU time; instructions from callgrind on {after['callgrind_pages']} of "
             f"them), before ({_src('stages_before.json')}, {before['label']}) and after "
             f"({_src('stages_after.json')}, {after['label']}); load average "
             f"{before['machine']['load_avg_1m']:g} / {after['machine']['load_avg_1m']:g}:", "",
             "| stage | before µs/page | after µs/page | before k instr/page | after k instr/page | budget µs/page |",
             "|---|---|---|---|---|---|"]

    def k(d: dict[str, Any], key: str) -> str:
        return _n(d[key] / 1000) if key in d else "-"

    for key, label in _STAGE_LABELS.items():
        if key not in au and key not in bu:
            continue
        b = budget.get(key)
        verdict = f"{b:g}, {_met(au[key] <= b)}" if b is not None and key in au else ""
        lines.append(f"| {label.strip() if not label.startswith('  ') else '&nbsp;&nbsp;' + label.strip()} | "
                     f"{_n(bu[key], 1) if key in bu else '-'} | {_n(au[key], 1) if key in au else '-'} | "
                     f"{k(bi, key)} | {k(ai, key)} | {verdict} |")
    total_b = sum(budget.values())
    lines.append(f"| **pipeline stages** (sum of the unindented ones but the bare loop) | "
                 f"{_n(before['pipeline_us_per_page'], 1)} | {_n(after['pipeline_us_per_page'], 1)} | "
                 f"{_n((before.get('pipeline_instructions_per_page') or 0) / 1000)} | "
                 f"{_n((after.get('pipeline_instructions_per_page') or 0) / 1000)} | "
                 f"{total_b:g}, {_met(after['pipeline_us_per_page'] <= total_b)} |")
    if before.get("pipeline_over_bare_extract") is None or after.get("pipeline_over_bare_extract") is None:
        return lines
    lines.append("")
    if bi.get("bare_extract") and ai.get("bare_extract"):
        lines[-1] = (f"By instructions (callgrind, repeatable under load) the page stages cost "
                     f"{before['pipeline_instructions_per_page'] / bi['bare_extract']:.2f}x (before) and "
                     f"{after['pipeline_instructions_per_page'] / ai['bare_extract']:.2f}x (after) the bare loop's "
                     "extraction of the same pages; by CPU time ")
    lines[-1] += (f"{before['pipeline_over_bare_extract']:g}x and {after['pipeline_over_bare_extract']:g}x, in the same "
                  f"process (the bare figure itself moved {bu['bare_extract']:g} -> {au['bare_extract']:g} µs/page "
                  "between the two runs: CPU time is not steady on the shared machine).")
    runs = [d for _, d in _runs(r, "throughput")]
    cpu = {m: [x[1] for x in (_ratios(d, m) for d in runs) if x is not None] for m in ("ray", "local")}
    if cpu["ray"] and cpu["local"]:
        lines[-1] += (f" End to end, fetch and storage included (the throughput rows above), CPU per page is "
                      f"{_spread(cpu['ray'])}x the ceiling's on Ray and {_spread(cpu['local'])}x with `--local`: the "
                      f"issue's 2x is **{'met' if max(_median(cpu['ray']), _median(cpu['local'])) <= 2 else 'not met'}**.")
    return lines


def _intro(r: Results) -> list[str]:
    runs = _runs(r, "throughput")
    name, d = runs[0] if runs else ("throughput_100k_all.json", r["throughput_100k_all.json"])
    m = d["machine"]
    return [f"Throughput runs: {m['nproc']} cores ({m['cpu_model'].split()[0]} {m['cpu_model'].split()[1]}), "
            f"{m['ram_gib']} GiB, Python {m['python']}, Ray {m['ray']}; a static web of {d['hosts']:,} hosts and "
            f"{d['web_pages']:,} pages of ~{d['mean_page_bytes'] / 1000:.0f} KB served by nginx on loopback "
            f"({_src(name)}). Ratios are taken within one run (the machine is shared).", ""]


def render(r: Results) -> str:
    """The README text between the markers (without them)."""
    rows: list[Row] = []
    for build in ROW_BUILDERS:
        rows.extend(build(r))
    out = _intro(r) + ["| measurement | result | target | results file |", "|---|---|---|---|"]
    out += [f"| {m} | {res} | {t} | {src} |" for m, res, t, src in rows]
    extra = _profile_lines(r) + _stage_lines(r)
    for line in extra:
        out += ["", line]
    table = _stage_table(r)
    if table:
        out += [""] + table
    return "\n".join(out)


def splice(readme: str, body: str, begin: str = BEGIN, end: str = END) -> str:
    """``readme`` with the text between the markers replaced by ``body``."""
    try:
        head, rest = readme.split(begin, 1)
        _, tail = rest.split(end, 1)
    except ValueError:
        raise SystemExit(f"README has no {begin} ... {end} section") from None
    return f"{head}{begin}\n{body}\n{end}{tail}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="regenerate the README's results table from benchmarks/results/")
    p.add_argument("--check", action="store_true", help="exit 1 if a document differs from the results files")
    p.add_argument("--readme", action="append", default=None,
                   help="document(s) with the markers (default: README.md and benchmarks/RESULTS.md)")
    p.add_argument("--results", default=RESULTS)
    a = p.parse_args(argv)
    docs = a.readme or [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "benchmarks", "RESULTS.md")]
    results = load(a.results)
    body, news = render(results), render_news(results)
    status = 0
    for doc in docs:
        with open(doc, encoding="utf-8") as f:
            current = f.read()
        wanted = splice(current, body)
        if NEWS_BEGIN in wanted:
            wanted = splice(wanted, news, NEWS_BEGIN, NEWS_END)
        if a.check:
            if wanted != current:
                print(f"{doc}: the results section differs from {a.results}; run python -m benchmarks.report",
                      file=sys.stderr)
                status = 1
        elif wanted != current:
            with open(doc, "w", encoding="utf-8") as f:
                f.write(wanted)
    return status


if __name__ == "__main__":
    sys.exit(main())
