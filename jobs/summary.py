"""What ``crawl stats OUT`` prints for a person: a dozen lines instead of a JSON dict.

:func:`render` takes the summary ``crawl stats --json`` prints (the output's own numbers,
crawler.output.summarize, plus the run's ``stats.json`` and the rechecked URL ledger)
and lays it out: outcomes with shares, status codes, rates, duplicates, top hosts, the
commonest errors, what was dropped and why, and the ledger line. Nothing here reads
files; the numbers come from the caller.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from crawler.session import ledger as ledger_mod

__all__ = ["LEDGER_DROPS", "render"]

LEDGER_DROPS = frozenset({"host_budget", "budget_cut"})
"""Drop reasons of admitted URLs (counted in the ledger, no row). The other reasons in
``stats.json`` ``dropped`` are links a page had that were never admitted."""


def _pct(n: int, total: int) -> str:
    return f"{100.0 * n / total:.1f}%" if total else "-"


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"  # pragma: no cover


def _pairs(items: Iterable[tuple[Any, int]], limit: int | None = None) -> str:
    items = list(items)
    shown = items[:limit] if limit else items
    text = ", ".join(f"{k} {v}" for k, v in shown)
    if limit and len(items) > limit:
        text += f", ... ({len(items) - limit} more)"
    return text or "-"


def render(summary: Mapping[str, Any], out: str) -> str:
    """The human summary of ``crawl stats`` (see the module docstring)."""
    run = summary.get("run") or {}
    rows = summary["rows"]
    o = summary["by_outcome"]
    fetched = o.get("fetched", 0)
    lines: list[str] = []

    if run.get("finished"):
        state = f"finished in {run['elapsed_s']:.1f}s" if run.get("elapsed_s") is not None else "finished"
    elif run.get("elapsed_s") is not None:
        state = f"stopped after {run['elapsed_s']:.1f}s (resumable: `crawl run` on the same config)"
    else:
        state = "running or interrupted (no stats.json yet)"
    lines.append(f"{out}: crawl {state}")

    lines.append(
        f"  rows        {rows} for {summary['urls']} URLs; {summary['blobs']} distinct bodies stored "
        f"({_size(summary['bytes_stored'])} decoded)"
    )
    lines.append("  outcomes    " + ", ".join(f"{k} {v} ({_pct(v, rows)})" if v else f"{k} 0" for k, v in o.items()))
    statuses = [("none" if k is None else k, v) for k, v in summary["by_status"].items()]
    lines.append("  statuses    " + _pairs(statuses))

    rate = []
    if run.get("pages_per_s") is not None:
        rate.append(f"{run['pages_per_s']} pages/s over the run")
    if summary.get("pages_per_s") is not None:
        rate.append(f"{summary['pages_per_s']:.1f} rows/s between the first and last row")
    if run.get("requests") is not None:
        rate.append(
            f"{run['requests']} requests ({run.get('robots_requests') or 0} robots.txt), "
            f"{run.get('retries') or 0} retries"
        )
    if rate:
        lines.append("  rates       " + "; ".join(rate))

    news = run.get("news") or {}
    if news.get("feeds") or news.get("hubs") or news.get("news_sitemaps"):
        line = (
            f"  news        {news['feeds']} feeds, {news['hubs']} hubs, {news['news_sitemaps']} news sitemaps; "
            f"{news['new_urls']} new URLs in {news['source_fetches']} refetches of them"
        )
        if news.get("new_per_fetch") is not None:
            line += f" ({news['new_per_fetch']:g} per fetch)"
        if news.get("delays"):
            line += (
                f"; publication to fetch median {news['delay_median_s']:g} s, p95 {news['delay_p95_s']:g} s"
                f" ({news['delays']} dated articles)"
            )
        lines.append(line)
        busiest = list((news.get("hosts") or {}).items())[:3]
        if busiest:
            lines.append("  news hosts  " + "; ".join(
                f"{host}: {h['new_urls']} new in {h['source_fetches']} refetches"
                + (f", median delay {h['delay_median_s']:g} s" if h.get("delay_median_s") is not None else "")
                for host, h in busiest
            ))

    d = summary["duplicates"]
    lines.append(
        f"  duplicates  exact {d['exact']}, near {d['near']} "
        f"({_pct(d['exact'] + d['near'], fetched)} of fetched pages)"
    )
    lines.append("  top hosts   " + _pairs(summary["top_hosts"], 5))
    if summary.get("top_errors"):
        lines.append("  errors      " + _pairs(summary["top_errors"], 3))

    dropped = run.get("dropped") or {}
    urls = sorted((k, v) for k, v in dropped.items() if k in LEDGER_DROPS and v)
    links = sorted(((k, v) for k, v in dropped.items() if k not in LEDGER_DROPS and v), key=lambda kv: -kv[1])
    if urls:
        lines.append("  dropped     URLs admitted but not fetched: " + _pairs(urls) + " (per-host and page budgets)")
    if links:
        lines.append("  unfollowed  links on pages: " + _pairs(links))
    if run.get("queued_unfetched"):
        lines.append(f"  queued      {run['queued_unfetched']} URLs still queued")
    led = summary.get("ledger")
    if led:
        lines.extend("  " + line for line in ledger_mod.describe(led).splitlines())
    elif "note" in run:
        lines.append(f"  ({run['note']})")
    lines.append(f"  (`crawl stats {out} --json` for every number; `crawl report {out}` for charts)")
    return "\n".join(lines)
