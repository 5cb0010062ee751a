"""``crawl report OUT --to report.html``: one self-contained HTML page of charts.

The page has no script and no external file: every chart is inline SVG drawn here from
the rows in ``OUT/pages`` (and ``stats.json`` when present), so it opens from a mail
attachment or an air-gapped machine and renders the same in any browser. Charts:

* pages per second over time, and the outcome mix over time (rows by ``fetched_at``);
* status codes; top hosts by pages and by errors (http_error and failed rows);
* the duplicate share of fetched pages (original, exact, near);
* politeness waits: the gaps between consecutive rows of the same host, against the
  configured ``politeness.interval_s`` (a row is written when its response is handled,
  so a gap is the request spacing as the crawler saw it, give or take the body time).

Each chart is a ``<figure data-chart=NAME>`` whose marks use its own colour
(:data:`CHART_COLORS`), so a test can find every chart in a screenshot.
"""

from __future__ import annotations

import datetime as _dt
import functools
import html
import json
import operator
from collections import Counter
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from crawler.errors import PathError
from crawler.output import OUTCOMES, open_fs, read_pages, summarize
from crawler.output.fs import check_new_file, require_crawl_output

__all__ = ["CHART_COLORS", "OUTCOME_COLORS", "build_report", "write_report"]

CHART_COLORS = {
    "pages-per-second": "#1f77b4",
    "status-codes": "#9467bd",
    "top-hosts-pages": "#2ca02c",
    "top-hosts-errors": "#d62728",
    "politeness-waits": "#8c564b",
}
"""The colour of each single-colour chart's marks."""
OUTCOME_COLORS = {
    "fetched": "#17becf", "redirect": "#bcbd22", "not_modified": "#7f7f7f",
    "http_error": "#ff7f0e", "failed": "#e377c2", "robots_blocked": "#393b79",
}
"""Series colours of the outcome-mix chart (and of the duplicate-share bar's parts)."""
DUP_COLORS = {"original": "#aec7e8", "exact": "#637939", "near": "#e7ba52"}

_W, _H, _PAD_L, _PAD_B = 720, 240, 56, 28
_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:800px}
h1{font-size:20px} h2{font-size:16px;margin:24px 0 4px} figure{margin:0 0 16px}
table{border-collapse:collapse} td{padding:2px 10px 2px 0} .muted{color:#666}
svg text{font:11px sans-serif;fill:#444} .legend span{display:inline-block;margin-right:12px}
.legend i{display:inline-block;width:10px;height:10px;margin-right:4px}
"""


def _esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _figure(name: str, title: str, svg: str, note: str = "", legend: dict[str, str] | None = None) -> str:
    leg = ""
    if legend:
        leg = '<div class="legend">' + "".join(
            f'<span><i style="background:{c}"></i>{_esc(k)}</span>' for k, c in legend.items()) + "</div>"
    note_html = f'<p class="muted">{_esc(note)}</p>' if note else ""
    return f'<figure data-chart="{name}"><h2>{_esc(title)}</h2>{svg}{leg}{note_html}</figure>'


def _svg(body: str, height: int = _H) -> str:
    return f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{height}" viewBox="0 0 {_W} {height}">{body}</svg>'


def _axes(ymax: float, xlabels: Sequence[tuple[float, str]], height: int = _H) -> str:
    """Y grid with 4 ticks up to ``ymax`` and x labels at plot x positions."""
    plot_h = height - _PAD_B - 8
    parts = []
    for i in range(5):
        v = ymax * i / 4
        y = 8 + plot_h - plot_h * i / 4
        parts.append(f'<line x1="{_PAD_L}" y1="{y:.1f}" x2="{_W - 8}" y2="{y:.1f}" stroke="#ddd"/>')
        label = f"{v:.0f}" if ymax >= 8 else f"{v:.2g}"
        parts.append(f'<text x="{_PAD_L - 6}" y="{y + 4:.1f}" text-anchor="end">{label}</text>')
    for x, label in xlabels:
        parts.append(f'<text x="{x:.1f}" y="{height - 8}" text-anchor="middle">{_esc(label)}</text>')
    return "".join(parts)


def _line_chart(ys: np.ndarray, step_s: float, color: str) -> str:
    n = len(ys)
    ymax = float(ys.max()) if n and ys.max() > 0 else 1.0
    plot_w, plot_h = _W - _PAD_L - 8, _H - _PAD_B - 8
    xs = [_PAD_L + plot_w * (i + 0.5) / max(n, 1) for i in range(n)]
    pts = " ".join(f"{x:.1f},{8 + plot_h - plot_h * y / ymax:.1f}" for x, y in zip(xs, ys))
    area = f"{_PAD_L},{8 + plot_h} {pts} {xs[-1]:.1f},{8 + plot_h}" if n else ""
    ticks = [(xs[i], f"{i * step_s:.0f}s") for i in np.linspace(0, n - 1, min(n, 6)).astype(int)] if n else []
    return _svg(
        _axes(ymax, ticks)
        + f'<polygon points="{area}" fill="{color}" fill-opacity="0.35"/>'
        + f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="2.5"/>'
    )


def _stacked_chart(series: dict[str, np.ndarray], colors: dict[str, str], step_s: float) -> str:
    n = len(next(iter(series.values())))
    totals = functools.reduce(operator.add, series.values())  # sum() would start from the int 0
    ymax = float(totals.max()) if n and totals.max() > 0 else 1.0
    plot_w, plot_h = _W - _PAD_L - 8, _H - _PAD_B - 8
    bw = plot_w / max(n, 1)
    parts = []
    base = np.zeros(n)
    for name, ys in series.items():
        for i, y in enumerate(ys):
            if y <= 0:
                continue
            h = plot_h * y / ymax
            top = 8 + plot_h - plot_h * base[i] / ymax - h
            parts.append(f'<rect x="{_PAD_L + i * bw:.1f}" y="{top:.1f}" width="{max(bw - 1, 1):.1f}" '
                         f'height="{h:.1f}" fill="{colors[name]}"/>')
        base = base + ys
    ticks = [(_PAD_L + (i + 0.5) * bw, f"{i * step_s:.0f}s") for i in np.linspace(0, n - 1, min(n, 6)).astype(int)] if n else []
    return _svg(_axes(ymax, ticks) + "".join(parts))


def _hbar_chart(items: Sequence[tuple[str, int]], color: str) -> str:
    if not items:
        return _svg('<text x="10" y="20">nothing to show</text>', 32)
    row_h = 20
    height = row_h * len(items) + 10
    label_w = 260
    vmax = max(v for _, v in items) or 1
    parts = []
    for i, (label, v) in enumerate(items):
        y = 5 + i * row_h
        w = (_W - label_w - 60) * v / vmax
        text = label if len(label) <= 40 else label[:37] + "..."
        parts.append(f'<text x="{label_w - 6}" y="{y + 14}" text-anchor="end">{_esc(text)}</text>')
        parts.append(f'<rect x="{label_w}" y="{y + 2}" width="{max(w, 1):.1f}" height="{row_h - 5}" fill="{color}"/>')
        parts.append(f'<text x="{label_w + w + 4:.1f}" y="{y + 14}">{v}</text>')
    return _svg("".join(parts), height)


def _vbar_chart(items: Sequence[tuple[str, int]], color: str, values: bool = True) -> str:
    n = len(items)
    if not n:
        return _svg('<text x="10" y="20">nothing to show</text>', 32)
    vmax = (max(v for _, v in items) or 1) * (1.12 if values else 1.0)  # room for the value labels
    plot_w, plot_h = _W - _PAD_L - 8, _H - _PAD_B - 8
    bw = plot_w / n
    parts = []
    for i, (_label, v) in enumerate(items):
        h = plot_h * v / vmax
        x = _PAD_L + i * bw
        parts.append(f'<rect x="{x + bw * 0.15:.1f}" y="{8 + plot_h - h:.1f}" width="{bw * 0.7:.1f}" '
                     f'height="{max(h, 1):.1f}" fill="{color}"/>')
        if values:
            parts.append(f'<text x="{x + bw / 2:.1f}" y="{8 + plot_h - h - 3:.1f}" text-anchor="middle">{v}</text>')
    labels = [(_PAD_L + (i + 0.5) * bw, label) for i, (label, _) in enumerate(items) if label]
    return _svg(_axes(vmax, labels) + "".join(parts))


def _share_bar(parts: dict[str, int], colors: dict[str, str]) -> str:
    total = sum(parts.values()) or 1
    x, out = 0.0, []
    for name, v in parts.items():
        w = (_W - 16) * v / total
        if w > 0:
            out.append(f'<rect x="{8 + x:.1f}" y="8" width="{w:.1f}" height="36" fill="{colors[name]}"/>')
        x += w
    return _svg("".join(out), 52)


def _time_buckets(seconds: np.ndarray) -> tuple[np.ndarray, float, int]:
    """Bucket index per row, the bucket width (>= 1 s, at most ~120 buckets) and count."""
    span = float(seconds.max()) if len(seconds) else 0.0
    step = max(1.0, float(np.ceil(span / 120)))
    n = int(span // step) + 1
    return (seconds // step).astype(int), step, n


def build_report(out: str, storage_options: dict | None = None) -> str:
    """The report page for ``out`` as an HTML string."""
    t = read_pages(out, storage_options, columns=["host", "status", "outcome", "fetched_at", "dup_kind"])
    summary = summarize(out, storage_options)
    fs, root = open_fs(out, storage_options)
    try:
        with fs.open(f"{root}/stats.json", "r") as f:
            run = json.load(f)
    except (OSError, ValueError):
        run = {}
    interval = ((run.get("config") or {}).get("politeness") or {}).get("interval_s")

    figures = []
    if t.num_rows:
        ms = pc.cast(t["fetched_at"], "int64").to_numpy(zero_copy_only=False)
        secs = (ms - ms.min()) / 1000.0
        idx, step, n = _time_buckets(secs)
        outcomes = np.asarray(t["outcome"].to_pylist(), dtype=object)
        fetched = np.bincount(idx[outcomes == "fetched"], minlength=n) / step
        figures.append(_figure("pages-per-second", "Pages per second", _line_chart(fetched, step, CHART_COLORS["pages-per-second"]),
                               f"fetched pages per second, {step:.0f}-second buckets from the first row"))
        mix = {o: np.bincount(idx[outcomes == o], minlength=n).astype(float) for o in OUTCOMES if (outcomes == o).any()}
        figures.append(_figure("outcome-mix", "Outcome mix over time", _stacked_chart(mix, OUTCOME_COLORS, step),
                               "rows per bucket by outcome", {k: OUTCOME_COLORS[k] for k in mix}))
    statuses = [("none" if k is None else str(k), v) for k, v in summary["by_status"].items()]
    figures.append(_figure("status-codes", "Status codes", _vbar_chart(statuses, CHART_COLORS["status-codes"]),
                           "'none': no response (failed or robots_blocked)"))
    figures.append(_figure("top-hosts-pages", "Top hosts by pages", _hbar_chart(summary["top_hosts"], CHART_COLORS["top-hosts-pages"])))
    errs: Counter[str] = Counter()
    if t.num_rows:
        bad = t.filter(pc.is_in(t["outcome"], value_set=pa.array(["http_error", "failed"])))
        errs = Counter(bad["host"].to_pylist())
    figures.append(_figure("top-hosts-errors", "Top hosts by errors", _hbar_chart(errs.most_common(10), CHART_COLORS["top-hosts-errors"]),
                           "http_error and failed rows"))
    fetched_n = summary["by_outcome"].get("fetched", 0)
    d = summary["duplicates"]
    share = {"original": max(fetched_n - d["exact"] - d["near"], 0), "exact": d["exact"], "near": d["near"]}
    pct = {k: (100.0 * v / fetched_n if fetched_n else 0.0) for k, v in share.items()}
    figures.append(_figure("duplicate-share", "Duplicate share of fetched pages", _share_bar(share, DUP_COLORS),
                           ", ".join(f"{k} {share[k]} ({pct[k]:.1f}%)" for k in share), DUP_COLORS))
    figures.append(_politeness(t, interval))

    run_line = ""
    if run:
        state = "finished" if run.get("finished") else "stopped"
        run_line = (f"<p>{state} in {run.get('elapsed_s', 0):.1f} s, {run.get('pages_per_s')} pages/s, "
                    f"{run.get('requests')} requests, {run.get('shards')} shards</p>")
    first = summary["first_fetched_at"]
    when = first.astimezone(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC") if first else "no rows"
    outcome_rows = "".join(f"<tr><td>{_esc(k)}</td><td>{v}</td></tr>" for k, v in summary["by_outcome"].items())
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>raycrawl report: {_esc(out)}</title><style>{_STYLE}</style></head><body>"
        f"<h1>Crawl report: {_esc(out)}</h1><p class=muted>first row {when}; {summary['rows']} rows, "
        f"{summary['urls']} URLs</p>{run_line}<table>{outcome_rows}</table>"
        + "".join(figures)
        + "</body></html>"
    )


def _politeness(t: Any, interval: float | None) -> str:
    """Histogram of gaps between consecutive rows of one host: 50 bins up to about the
    95th percentile (at least three intervals), the configured interval marked."""
    color = CHART_COLORS["politeness-waits"]
    gaps = np.array([], dtype=float)
    if t.num_rows:
        hosts = np.asarray(t["host"].to_pylist(), dtype=object)
        ms = pc.cast(t["fetched_at"], "int64").to_numpy(zero_copy_only=False).astype(float)
        order = np.lexsort((ms, hosts.astype(str)))
        h, m = hosts[order], ms[order]
        same = h[1:] == h[:-1]
        gaps = (np.diff(m) / 1000.0)[same]
    if not len(gaps):
        return _figure("politeness-waits", "Politeness waits", _svg('<text x="10" y="20">no host has two rows</text>', 32))
    top = max(float(np.percentile(gaps, 95)) * 1.25, (interval or 0) * 3, 0.05)
    width = top / 50
    counts = np.bincount(np.minimum((gaps / width).astype(int), 49), minlength=50)
    items = [(f"{i * width:.2g}" if i % 10 == 0 else "", int(c)) for i, c in enumerate(counts)]
    svg = _vbar_chart(items, color, values=False)
    if interval:
        x = _PAD_L + (_W - _PAD_L - 8) * min(interval / top, 1.0)
        mark = (f'<line x1="{x:.1f}" y1="8" x2="{x:.1f}" y2="{_H - _PAD_B}" stroke="#000" stroke-dasharray="4 3"/>'
                f'<text x="{x + 4:.1f}" y="20">interval {interval} s</text>')
        svg = svg.replace("</svg>", mark + "</svg>")
    note = (f"seconds between consecutive rows of one host ({len(gaps)} gaps, median {np.median(gaps):.2f} s; "
            f"last bin: {top - width:.1f} s and more)")
    if interval:
        note += f"; configured politeness.interval_s = {interval}"
    return _figure("politeness-waits", "Politeness waits", svg, note)


def write_report(out: str, dest: str, storage_options: dict | None = None) -> str:
    """Write the report page to ``dest`` (a local path or fsspec URL); returns ``dest``.

    ``out`` must hold crawl output and ``dest``'s folder must exist (PathError otherwise,
    before anything is written)."""
    require_crawl_output(out, storage_options)
    check_new_file(dest)
    page = build_report(out, storage_options)
    fs, path = open_fs(dest)
    try:
        with fs.open(path, "w", encoding="utf-8") as f:
            f.write(page)
    except OSError as exc:
        raise PathError(f"cannot write {dest}: {exc.strerror or exc}") from exc
    return dest
