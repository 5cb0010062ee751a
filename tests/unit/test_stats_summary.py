"""`crawl stats OUT`: a summary a person reads by default, every number as JSON with
--json, and exit 1 when the URL ledger does not balance against the rows in OUT."""

from __future__ import annotations

import json

from jobs import cli

from tests.unit.reportkit import make_output


def test_default_output_is_a_short_readable_summary(tmp_path, capsys):
    out = make_output(tmp_path)
    assert cli.main(["stats", out]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert len(lines) <= 16 and not text.lstrip().startswith("{")
    assert lines[0] == f"{out}: crawl finished in 20.5s"
    by_label = {ln.split()[0]: ln.strip() for ln in lines[1:]}
    assert "fetched 64 (80.0%)" in by_label["outcomes"] and "robots_blocked 4 (5.0%)" in by_label["outcomes"]
    assert by_label["statuses"].split(None, 1)[1] == "200 64, 404 8, none 8"
    assert "2.93 pages/s over the run" in by_label["rates"] and "90 requests (4 robots.txt), 2 retries" in by_label["rates"]
    assert "exact 9, near 6" in by_label["duplicates"]
    assert by_label["top"].startswith("top hosts   a.test 20, b.test 20")
    assert "HTTP 404 8, timeout 4" in by_label["errors"]
    assert "host_budget 5" in by_label["dropped"]
    assert "scope 40, path_repeats 3" in by_label["unfollowed"]
    assert "ledger: admitted 85 = rows 80 + dropped 5 + queued 0" in text and text.count("OK") == 1


def test_json_keeps_every_number_for_scripts(tmp_path, capsys):
    out = make_output(tmp_path)
    assert cli.main(["stats", out, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["by_outcome"]["fetched"] == 64 and data["rows"] == 80
    assert data["run"]["finished"] is True and data["run"]["dropped"]["host_budget"] == 5
    assert data["ledger"]["balanced"] is True


def test_an_unbalanced_ledger_exits_1_in_both_forms(tmp_path, capsys):
    out = make_output(tmp_path, lost=3)
    assert cli.main(["stats", out]) == 1
    assert "LEDGER DOES NOT BALANCE" in capsys.readouterr().out
    assert cli.main(["stats", out, "--json"]) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out)["ledger"]["balanced"] is False
    assert "LEDGER DOES NOT BALANCE" in captured.err


def test_an_output_without_stats_json_says_so(tmp_path, capsys):
    out = make_output(tmp_path)
    (tmp_path / "out" / "stats.json").unlink()
    assert cli.main(["stats", out]) == 0
    text = capsys.readouterr().out
    assert "running or interrupted" in text and "pages/s over the run" not in text
