"""The URL ledger: every URL the seen filter admitted is a row, a counted drop or still queued.

docs/invariants.md #4 and #5 say a crawl ends only when its work is done and every URL
ends as a row; DESIGN invariant 13 that the verdict follows the ledger: a run says
"finished" and exits 0 only when it balances. The ledger checks it at the end of a run
from independent durable sources:

* each shard's durable store: URLs admitted (every row of its table), dropped by a
  counted rule with no row (state ``dropped``), and still queued or claimed;
* the output itself: distinct URLs that have a row in ``OUT/pages``;
* when a crawl finishes, the seen sets' marks against the shards' stores, key by key
  (crawler.session.ledgeraudit): a URL marked seen that no shard holds was lost on its
  way (its delivery), and nothing would ever admit it again. This replaces comparing the
  seen filter's count of new URLs with the shards' total, which had to be switched off
  whenever a seen check was bypassed or a seen set restarted from an older copy, i.e.
  exactly after a restart, where deliveries get lost.

Balanced means ``admitted == rows + dropped + queued``, no lost mark, and, for a crawl
reported finished, nothing queued (unless it ended because ``limits.max_pages`` was
spent: what is left stays queued). Anything else is reported loudly, with how many URLs
are missing and a sample of them: in ``stats.json``, in the summary, by ``crawl stats``
(exit 1) and by the run itself (exit 1, not marked finished: jobs.crawl).
"""

from __future__ import annotations

import logging
import signal
from typing import Any, Iterable, Mapping

import pyarrow.compute as pc

from crawler.output import read_pages
from crawler.engine.status import ShardStatus

log = logging.getLogger(__name__)

#: ``marks`` of a ledger whose marks were not audited, by why.
NOT_CHECKED = {
    "unfinished": "checked when the crawl finishes (pages still to fetch may deliver links)",
    "bloom_only": "dedup.seen_exact is off: the seen sets keep no exact marks",
}


def output_url_count(out: str, storage_options: dict[str, Any] | None = None) -> int:
    """Distinct URLs with at least one row in ``OUT/pages`` (the output's side of the ledger)."""
    table = read_pages(out, storage_options, dedupe=False, columns=["url"])
    return int(pc.count_distinct(table["url"]).as_py()) if table.num_rows else 0


def not_checked(why: str) -> dict[str, Any]:
    """``marks`` of a run that did not audit them (a key of :data:`NOT_CHECKED`)."""
    return {"checked": False, "why": NOT_CHECKED[why]}


def build(
    shard_counts: Iterable[Mapping[str, int]],
    *,
    seen_novel: int | None,
    seen_bypassed: int,
    rows: int,
    finished: bool,
    page_budget_spent: bool = False,
    marks: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Sum the shards' store counts and check them against the output and the marks audit.

    ``shard_counts`` are :meth:`crawler.frontier.store.FrontierStore.counts` dicts;
    ``marks`` the audit of the seen sets' marks (:meth:`MarkAudit.to_json
    <crawler.session.ledgeraudit.MarkAudit.to_json>` with ``sample``, ``requeued`` and
    ``unnamed``), or None when not audited. ``seen_novel`` and ``seen_bypassed`` are shown,
    not checked (see the module docstring). Returns the ledger for ``stats.json``: the
    totals, ``missing`` (how many URLs, a sample), ``balanced`` and the ``problems``.
    """
    admitted = done = dropped = queued = 0
    for c in shard_counts:
        admitted += c["queued"] + c["claimed"] + c["done"] + c["dropped"]
        done += c["done"]
        dropped += c["dropped"]
        queued += c["queued"] + c["claimed"]
    marks = dict(marks) if marks is not None else {"checked": False, "why": "not audited"}
    problems: list[str] = []
    gap = admitted - rows - dropped - queued
    if gap:
        problems.append(
            f"admitted {admitted} != rows {rows} + dropped {dropped} + queued {queued}: "
            f"{gap:+d} URLs unaccounted for"
        )
    if marks.get("failed"):
        problems.append(f"the seen marks could not be checked against the shards' stores ({marks.get('why')})")
    lost = int(marks.get("lost", 0))
    sample = list(marks.get("sample", []))
    if lost:
        where = f", e.g. {', '.join(sample[:3])}" if sample else ""
        problems.append(
            f"{lost} URLs marked seen that no shard holds (their delivery was lost){where}: "
            f"{marks.get('requeued', 0)} queued again for the next run, {marks.get('unnamed', 0)} not found in the output"
        )
    if finished and queued and not page_budget_spent:
        problems.append(f"the crawl reports finished with {queued} admitted URLs still queued")
    return {
        "seen_novel": seen_novel,
        "seen_bypassed": seen_bypassed,
        "admitted": admitted,
        "rows": rows,
        "acked": done,
        "dropped": dropped,
        "queued": queued,
        "page_budget_spent": page_budget_spent,
        "marks": marks,
        "missing": {"count": lost + max(gap, 0), "lost_deliveries": lost, "unaccounted": gap, "sample": sample},
        "balanced": not problems,
        "problems": problems,
    }


def name_missing(ledger: dict[str, Any], acked_without_row: list[str], rows_without_holder: list[str],
                 counts: tuple[int, int]) -> None:
    """Add the URLs behind a count that does not balance (crawler.session.ledgeraudit.audit_rows):
    acked with no row in OUT, and rows of URLs no shard holds, with how many of each."""
    missing = ledger["missing"]
    missing.update(acked_without_row=counts[0], rows_without_holder=counts[1])
    missing["sample"] = (missing["sample"] + acked_without_row + rows_without_holder)[:10]
    if counts[0]:
        ledger["problems"].append(
            f"{counts[0]} URLs acked with no row in the output, e.g. {', '.join(acked_without_row[:3])}"
            " (rows lost from OUT/pages, or another crawl's state: restore them, or start over with --force)"
        )
    if counts[1]:
        ledger["problems"].append(
            f"{counts[1]} URLs have rows that no shard holds, e.g. {', '.join(rows_without_holder[:3])}"
        )


def recheck(run: Mapping[str, Any], rows: int, *, finished: bool) -> dict[str, Any]:
    """A run's ledger (from its ``stats.json``) against the rows in OUT now (``crawl
    stats``): the shards' counts and the marks audit as the run found them, the named
    URLs kept while they are still missing."""
    counts = [{"queued": run["queued"], "claimed": 0, "done": run["acked"], "dropped": run["dropped"]}]
    led = build(
        counts, seen_novel=run.get("seen_novel"), seen_bypassed=run.get("seen_bypassed", 0), rows=rows,
        finished=finished, page_budget_spent=bool(run.get("page_budget_spent")), marks=run.get("marks"),
    )
    before = run.get("missing") or {}
    if led["missing"]["unaccounted"] and before.get("unaccounted") == led["missing"]["unaccounted"]:
        led["missing"] = {**before, "count": led["missing"]["count"]}
    return led


def for_run(
    out: str,
    storage_options: dict[str, Any] | None,
    shard_statuses: Iterable[ShardStatus],
    seen_stats: Mapping[str, Any],
    *,
    finished: bool,
    marks: Mapping[str, Any] | None = None,
) -> dict[str, Any] | None:
    """The ledger of a run that just stopped, from its shards' final statuses (each with
    ``store_counts``), the seen filter's totals, the marks audit and the output; None
    without durable stores."""
    statuses = list(shard_statuses)
    counts = [s.store_counts for s in statuses if s.store_counts is not None]
    if not counts or len(counts) < len(statuses):
        return None
    return build(
        counts,
        seen_novel=seen_stats.get("novel"),
        seen_bypassed=sum(s.router.get("links_seen_bypassed", 0) for s in statuses)
        + int(seen_stats.get("restored_from_out", 0)),
        rows=output_url_count(out, storage_options),
        finished=finished,
        page_budget_spent=any(s.budget_spent for s in statuses),
        marks=marks,
    )


def report(ledger: Mapping[str, Any] | None) -> None:
    """Log an unbalanced ledger as an error (it means a lost or invented URL)."""
    if ledger and not ledger.get("balanced", True):
        for p in ledger["problems"]:
            log.error("URL ledger does not balance: %s", p)


def describe(ledger: Mapping[str, Any]) -> str:
    """For people: the equation and OK, or the problems and what is missing (one line each)."""
    eq = (
        f"admitted {ledger['admitted']} = rows {ledger['rows']} + dropped {ledger['dropped']}"
        f" + queued {ledger['queued']}"
    )
    held = ", every seen mark held" if (ledger.get("marks") or {}).get("checked") else ""
    if ledger.get("balanced"):
        return f"ledger: {eq} (seen filter: {ledger['seen_novel']} new{held}): OK"
    lines = ["LEDGER DOES NOT BALANCE: " + "; ".join(ledger["problems"])]
    missing = ledger.get("missing") or {}
    if missing.get("count") or missing.get("sample"):
        lines.append(f"missing: {missing.get('count', 0)} URLs" + (
            ", e.g. " + " ".join(missing["sample"]) if missing.get("sample") else ""))
    return "\n".join(lines)


#: Exit status of a crawl stopped by a signal: 128 + the signal's number, like a shell.
EXIT_BY_SIGNAL = {signal.SIGINT: 130, signal.SIGTERM: 143}


def exit_status(stats: dict[str, Any], *, signum: int | None = None, api_stop: bool = False) -> int:
    """The exit status of a run that ran (the README's table; 2 is a refusal, raised before):

    * 0: finished with a ledger that balances; already finished; ran its duration
      (``recrawl.duration_s``); stopped through the control API (``POST /stop``: the
      operator asked for a clean, resumable stop and got it);
    * 130 / 143: stopped by SIGINT / SIGTERM (clean and resumable too);
    * 1: ended with a problem: a ledger that does not balance (DESIGN invariant 13), or
      unfinished without anyone asking (events still owed, fenced by another run).
    """
    if stats.get("already_finished"):
        return 0
    if signum is not None:
        return EXIT_BY_SIGNAL.get(signal.Signals(signum), 1)
    led = stats.get("ledger")
    if led is not None and not led.get("balanced", True):
        return 1
    if stats.get("finished") or stats.get("ended") == "duration" or (api_stop and not stats.get("fenced")):
        return 0
    return 1
