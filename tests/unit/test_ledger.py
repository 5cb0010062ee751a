"""The URL ledger (crawler.session.ledger.build): what balances, what does not, and what a
person is told is missing (DESIGN invariant 13: the verdict follows the ledger)."""

from __future__ import annotations

from crawler.session import ledger

DONE_5 = [{"queued": 0, "claimed": 0, "done": 4, "dropped": 1}]


def _marks(**kw):
    return {"checked": True, "marks": 5, "held": 5, "lost": 0, "unmarked": 0, "sample": [], "requeued": 0, "unnamed": 0, **kw}


def test_every_admitted_url_a_row_or_a_drop_balances():
    led = ledger.build(DONE_5, seen_novel=5, seen_bypassed=0, rows=4, finished=True, marks=_marks())
    assert led["balanced"] and led["problems"] == []
    assert led["missing"]["count"] == 0
    assert ledger.describe(led) == (
        "ledger: admitted 5 = rows 4 + dropped 1 + queued 0 (seen filter: 5 new, every seen mark held): OK"
    )


def test_a_seen_set_restored_from_an_older_copy_still_balances():
    """It forgot marks: fewer URLs called new than the shards hold, no bypass to blame this
    run. Every mark it kept is held, and nothing is missing: balanced (it used not to be)."""
    led = ledger.build(DONE_5, seen_novel=3, seen_bypassed=0, rows=4, finished=True,
                       marks=_marks(marks=3, unmarked=2))
    assert led["balanced"], led["problems"]


def test_a_lost_delivery_unbalances_and_names_the_url():
    marks = _marks(marks=6, lost=1, sample=["http://a.test/lost"], requeued=1)
    led = ledger.build(DONE_5, seen_novel=6, seen_bypassed=0, rows=4, finished=False, marks=marks)
    assert not led["balanced"]
    assert led["missing"] == {"count": 1, "lost_deliveries": 1, "unaccounted": 0, "sample": ["http://a.test/lost"]}
    text = ledger.describe(led)
    assert text.startswith("LEDGER DOES NOT BALANCE: 1 URLs marked seen that no shard holds")
    assert "1 queued again for the next run" in text
    assert text.splitlines()[-1] == "missing: 1 URLs, e.g. http://a.test/lost"


def test_a_failed_audit_does_not_balance():
    led = ledger.build(DONE_5, seen_novel=5, seen_bypassed=0, rows=4, finished=False,
                       marks={"checked": False, "failed": True, "why": "the audit failed: StorageError('x')"})
    assert not led["balanced"] and "could not be checked" in led["problems"][0]


def test_an_unaudited_run_is_judged_on_its_counts():
    led = ledger.build(DONE_5, seen_novel=7, seen_bypassed=0, rows=4, finished=False,
                       marks=ledger.not_checked("unfinished"))
    assert led["balanced"] and led["marks"]["checked"] is False
    assert "(seen filter: 7 new): OK" in ledger.describe(led)


def test_acked_urls_without_rows_are_counted_then_named():
    led = ledger.build(DONE_5, seen_novel=5, seen_bypassed=0, rows=2, finished=True, marks=_marks())
    assert not led["balanced"] and led["missing"]["count"] == 2 and led["missing"]["unaccounted"] == 2
    ledger.name_missing(led, ["http://a.test/1", "http://a.test/2"], [], (2, 0))
    assert led["missing"]["sample"] == ["http://a.test/1", "http://a.test/2"]
    assert "2 URLs acked with no row in the output, e.g. http://a.test/1, http://a.test/2" in ledger.describe(led)
    assert "--force" in led["problems"][-1]


def test_finished_with_urls_queued_does_not_balance_unless_the_page_budget_ran_out():
    counts = [{"queued": 2, "claimed": 0, "done": 4, "dropped": 0}]
    assert not ledger.build(counts, seen_novel=6, seen_bypassed=0, rows=4, finished=True)["balanced"]
    assert ledger.build(counts, seen_novel=6, seen_bypassed=0, rows=4, finished=True, page_budget_spent=True)["balanced"]


def test_crawl_stats_rechecks_against_the_rows_now_and_keeps_the_names():
    led = ledger.build(DONE_5, seen_novel=5, seen_bypassed=0, rows=3, finished=False, marks=_marks())
    ledger.name_missing(led, ["http://a.test/1"], [], (1, 0))
    again = ledger.recheck(led, 3, finished=False)
    assert not again["balanced"] and again["missing"]["sample"] == ["http://a.test/1"]
    assert ledger.recheck(led, 4, finished=False)["balanced"]  # the row came back
    lost = ledger.build(DONE_5, seen_novel=6, seen_bypassed=0, rows=4, finished=False, marks=_marks(lost=1, sample=["u"]))
    assert not ledger.recheck(lost, 4, finished=False)["balanced"]  # the audit's finding stands
