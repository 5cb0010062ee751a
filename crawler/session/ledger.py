"""The URL ledger: every URL the seen filter admitted is a row, a counted drop or still queued.

docs/invariants.md #4 and #5 say a crawl ends only when its work is done and every URL
ends as a row. The ledger checks both from three independent sources at the end of a run:

* the seen filter's count of URLs it called new (``seen.novel``);
* each shard's durable store: URLs admitted (every row of its table), dropped by a
  counted rule with no row (state ``dropped``), and still queued or claimed;
* the output itself: distinct URLs that have a row in ``OUT/pages``.

Balanced means ``admitted == rows + dropped + queued``, and, when no seen check was
bypassed (a failed seen call delivers a batch unfiltered, a replayed page re-sends its
links), ``seen.novel == admitted``. A crawl reported finished must also have nothing
queued, unless it ended because ``limits.max_pages`` was spent (what is left stays queued). Anything else is a lost or invented URL, and is reported loudly: in
``stats.json``, in the summary, by ``crawl stats`` and by the end-to-end tests.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable, Mapping

import pyarrow.compute as pc

from crawler.output import read_pages
from crawler.engine.status import ShardStatus

log = logging.getLogger(__name__)


def output_url_count(out: str, storage_options: dict | None = None) -> int:
    """Distinct URLs with at least one row in ``OUT/pages`` (the output's side of the ledger)."""
    table = read_pages(out, storage_options, dedupe=False, columns=["url"])
    return int(pc.count_distinct(table["url"]).as_py()) if table.num_rows else 0


def build(
    shard_counts: Iterable[Mapping[str, int]],
    *,
    seen_novel: int | None,
    seen_bypassed: int,
    rows: int,
    finished: bool,
    page_budget_spent: bool = False,
) -> dict[str, Any]:
    """Sum the shards' store counts and check them against the seen filter and the output.

    ``shard_counts`` are :meth:`crawler.frontier.store.FrontierStore.counts` dicts. Returns the
    ledger for ``stats.json``: the totals, ``balanced`` and a list of ``problems``.
    """
    admitted = done = dropped = queued = 0
    for c in shard_counts:
        admitted += c["queued"] + c["claimed"] + c["done"] + c["dropped"]
        done += c["done"]
        dropped += c["dropped"]
        queued += c["queued"] + c["claimed"]
    problems: list[str] = []
    if admitted != rows + dropped + queued:
        problems.append(
            f"admitted {admitted} != rows {rows} + dropped {dropped} + queued {queued}: "
            f"{admitted - rows - dropped - queued:+d} URLs unaccounted for"
        )
    if seen_novel is not None and seen_bypassed == 0 and seen_novel != admitted:
        problems.append(f"the seen filter admitted {seen_novel} URLs, the shards hold {admitted}")
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
        "balanced": not problems,
        "problems": problems,
    }


def for_run(
    out: str,
    storage_options: dict | None,
    shard_statuses: Iterable[ShardStatus],
    seen_stats: Mapping[str, Any],
    *,
    finished: bool,
) -> dict[str, Any] | None:
    """The ledger of a run that just stopped, from its shards' final statuses (each with
    ``store_counts``), the seen filter's totals and the output; None without durable stores."""
    statuses = list(shard_statuses)
    counts = [s.store_counts for s in statuses]
    if not counts or any(c is None for c in counts):
        return None
    ledger = build(
        counts,  # type: ignore[arg-type]
        seen_novel=seen_stats.get("novel"),
        # A seen set restarted from OUT's copy may admit again what it forgot (a duplicate
        # delivery each, refused by the owner's store): its count is no longer exact.
        seen_bypassed=sum(s.router.get("links_seen_bypassed", 0) for s in statuses)
        + int(seen_stats.get("restored_from_out", 0)),
        rows=output_url_count(out, storage_options),
        finished=finished,
        page_budget_spent=any(s.budget_spent for s in statuses),
    )
    report(ledger)
    return ledger


def report(ledger: Mapping[str, Any] | None) -> None:
    """Log an unbalanced ledger as an error (it means a lost or invented URL)."""
    if ledger and not ledger.get("balanced", True):
        for p in ledger["problems"]:
            log.error("URL ledger does not balance: %s", p)


def describe(ledger: Mapping[str, Any]) -> str:
    """One line for people: the equation and OK, or the problems."""
    eq = (
        f"admitted {ledger['admitted']} = rows {ledger['rows']} + dropped {ledger['dropped']}"
        f" + queued {ledger['queued']}"
    )
    if ledger.get("balanced"):
        return f"ledger: {eq} (seen filter: {ledger['seen_novel']} new): OK"
    return "LEDGER DOES NOT BALANCE: " + "; ".join(ledger["problems"])
