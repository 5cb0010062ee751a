"""What `crawl run` and `python -m jobs.crawl` exit with (jobs.crawl.exit_status), and which
errors before a crawl ran are refusals (one line, exit status 2: jobs.crawl.as_refusal)."""

from __future__ import annotations

import signal

import pytest

from crawler.errors import OutputLeasedError, RefusedError, ShardFailedError, StorageError
from jobs.crawl import as_refusal, exit_status

BALANCED = {"balanced": True}
UNBALANCED = {"balanced": False}

ROWS = [
    # (what happened, stats, signal, stopped through the API, status)
    ("finished, ledger balanced", {"finished": True, "ended": "finished", "ledger": BALANCED}, None, False, 0),
    ("already finished", {"finished": True, "already_finished": True}, None, False, 0),
    ("ran its duration", {"finished": False, "ended": "duration", "ledger": BALANCED}, None, False, 0),
    ("stopped through the control API", {"finished": False, "ended": "stopped", "ledger": BALANCED}, None, True, 0),
    ("lost URLs found at the end", {"finished": False, "ended": "finished", "unfinished_reason": "lost_urls",
                                    "ledger": UNBALANCED}, None, False, 1),
    ("ran its duration, ledger unbalanced", {"finished": False, "ended": "duration", "ledger": UNBALANCED}, None, False, 1),
    ("API stop, ledger unbalanced", {"finished": False, "ended": "stopped", "ledger": UNBALANCED}, None, True, 1),
    ("events still owed", {"finished": False, "ended": "finished", "unfinished_reason": "events_pending",
                           "ledger": BALANCED}, None, False, 1),
    ("fenced by another run", {"finished": False, "ended": "stopped", "fenced": "another run took the output's lease"},
     None, False, 1),
    ("Ctrl-C", {"finished": False, "ended": "stopped", "ledger": BALANCED}, signal.SIGINT, False, 130),
    ("SIGTERM", {"finished": False, "ended": "stopped", "ledger": BALANCED}, signal.SIGTERM, False, 143),
]


@pytest.mark.parametrize("row", ROWS, ids=[r[0] for r in ROWS])
def test_exit_status_table(row):
    _, stats, signum, api, code = row
    assert exit_status(stats, signum=signum, api_stop=api) == code


class ActorDiedError(Exception):
    """How Ray reports an error raised in an actor's constructor: its text only."""


ActorDiedError.__module__ = "ray.exceptions"


def test_state_that_cannot_be_used_before_the_crawl_ran_is_a_refusal():
    unwritable = as_refusal(PermissionError(13, "Permission denied", "/ro/out/state"), "/ro/out", "new")
    assert isinstance(unwritable, RefusedError) and "Permission denied: /ro/out/state" in str(unwritable)
    damaged = as_refusal(StorageError("cannot open the frontier store 'x': file is not a database"), "out", "resume")
    assert isinstance(damaged, RefusedError) and "cannot resume" in str(damaged) and "--force" in str(damaged)
    leased = OutputLeasedError("out is in use by crawl run abc")
    assert as_refusal(leased, "out", "new") is leased
    in_actor = ActorDiedError(
        "The actor died because of an error raised in its creation task, \x1b[36mray::HostShard.__init__()\x1b[39m\n"
        "  File \"crawler/frontier/store.py\", line 194, in __init__\n"
        "crawler.errors.StorageError: cannot open the frontier store '/o/state/shard-000.sqlite': file is not a database\n"
    )
    refusal = as_refusal(in_actor, "/o", "resume")
    assert isinstance(refusal, RefusedError) and "\n" not in str(refusal)
    assert str(refusal).startswith("cannot open the frontier store '/o/state/shard-000.sqlite': file is not a database")


def test_a_failure_of_a_crawl_that_ran_is_not_a_refusal():
    assert as_refusal(ShardFailedError("shard-000 failed: boom"), "out", "resume") is None
    assert as_refusal(ValueError("a bug"), "out", "new") is None
    assert as_refusal(ActorDiedError("The actor died unexpectedly before finishing this task."), "out", "new") is None
