"""A small finished output for the stats and report tests: rows over 20 seconds on four
hosts with every outcome, duplicates and errors, and the run's stats.json."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path

from crawler.session import ledger
from crawler.output import OutcomeRow, ResultWriter

T0 = dt.datetime(2024, 5, 1, 12, 0, 0, tzinfo=dt.timezone.utc)
HOSTS = ["a.test", "b.test", "c.test", "d.test"]


def make_output(tmp_path: Path, *, lost: int = 0) -> str:
    """Write the output; with ``lost``, stats.json says that many more URLs were acked
    than have rows (a lost URL, as a broken run would leave it)."""
    out = tmp_path / "out"
    rows, bodies = [], {}
    for i in range(80):
        host = HOSTS[i % 4]
        url = f"http://{host}/p{i}"
        at = T0 + dt.timedelta(seconds=i * 0.25)
        if i % 10 == 9:
            rows.append(OutcomeRow(url=url, host=host, outcome="http_error", status=404, error="HTTP 404", fetched_at=at))
        elif i % 20 == 3:
            rows.append(OutcomeRow(url=url, host=host, outcome="failed", error="timeout", fetched_at=at))
        elif i % 20 == 7:
            rows.append(OutcomeRow(url=url, host=host, outcome="robots_blocked", fetched_at=at))
        else:
            body = b"<html>same</html>" if i % 8 == 0 else f"<html>page {i}</html>".encode()
            sha = hashlib.sha256(body).hexdigest()
            dup = "exact" if i % 8 == 0 and i > 0 else ("near" if i % 13 == 0 else None)
            rows.append(OutcomeRow(url=url, host=host, outcome="fetched", status=200, fetched_at=at,
                                   content_sha256=sha, content_length=len(body), dup_kind=dup))
            bodies[sha] = body
    with ResultWriter(str(out), "w0") as w:
        w.add(rows, bodies)
    n = len(rows)
    led = ledger.build([{"queued": 0, "claimed": 0, "done": n + lost, "dropped": 5}], seen_novel=n + lost + 5,
                       seen_bypassed=0, rows=n + lost, finished=True)
    stats = {
        "finished": True, "elapsed_s": 20.5, "pages_per_s": 2.93, "requests": 90, "robots_requests": 4, "retries": 2,
        "queued_unfetched": 0, "shards": 2, "dropped": {"host_budget": 5, "scope": 40, "path_repeats": 3},
        "ledger": led, "config": {"politeness": {"interval_s": 1.0}, "user_agent": "raycrawl-test/1.0"},
    }
    (out / "stats.json").write_text(json.dumps(stats))
    return str(out)
