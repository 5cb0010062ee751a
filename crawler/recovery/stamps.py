"""Whose a state file is: a stamp written when the file is made, checked whenever it is opened.

docs/invariants.md #6: a crawl resumes from its own durable state. A store copied in from
another crawl (or another shard's, under this one's name) would resume someone else's
queue, seen set or duplicate index, lose this crawl's URLs and still end "finished". So
every state file carries a stamp ``<crawl>/<part>``:

* ``<crawl>`` is :func:`crawl_id`: the config's fingerprint and the moment the crawl's
  record was made (``OUT/state/crawl.json``, crawler.recovery.crawlrecord), so two crawls
  of one config in two outputs are two crawls;
* ``<part>`` names the file's role: ``shard-000`` (a shard's store), ``shard-000/events``
  (its event log), ``seen-000``, ``content-000``, ``budget``.

Opening a file whose stamp is another's raises :class:`~crawler.errors.ForeignStateError`
(one line: the file, whose it is, the fix). A file with no stamp was made before stamps
existed: it is accepted and stamped (the crawl record that led here already matched this
config, and refusing would strand every crawl in progress at the upgrade); from then on
a copy of another crawl's file is caught. Stores opened with no identity (tests,
benchmarks, a crawl without durable state) are neither checked nor stamped.
"""

from __future__ import annotations

import os
import sqlite3

from crawler.errors import DamagedStateError, ForeignStateError, StorageError

#: The key the stamp is kept under in a SQLite store's key/value table, or a JSON file.
STAMP_KEY = "crawl_identity"

#: The fix a refusal names (one line; the file is named before it).
FIX = "put this crawl's own copy back, or start over in another output folder"
#: A shard's store can also be rebuilt from OUT (crawler.session.preflight, local outputs):
#: its fetched URLs from their rows, its queued ones from the links of the stored pages.
SHARD_FIX = f"remove it (with its -wal and -shm files) to rebuild it from the rows and pages in the output, or {FIX}"


def crawl_id(fingerprint: str, started_at: float) -> str:
    """The identity of one crawl: its config fingerprint and when its record was made."""
    return f"{fingerprint}@{int(round(started_at * 1000))}"


def part(crawl: str | None, name: str) -> str | None:
    """The stamp of one file of ``crawl`` (None: no crawl identity, nothing checked)."""
    return None if crawl is None else f"{crawl}/{name}"


def shard_part(shard_id: str) -> str:
    return shard_id


def events_part(shard_id: str) -> str:
    return f"{shard_id}/events"


def seen_part(index: int) -> str:
    return f"seen-{index:03d}"


def content_part(index: int) -> str:
    return f"content-{index:03d}"


BUDGET_PART = "budget"


def _whose(stamp: str, other: str | None) -> str:
    crawl, _, name = stamp.partition("/")
    mine = other is not None and other.partition("/")[0] == crawl
    return f"{name or '?'} of {'this crawl' if mine else 'crawl ' + crawl}"


def check(path: str, found: str | None, expected: str | None, fix: str = FIX) -> bool:
    """Compare a file's stamp with the one expected; True if it has none yet (stamp it).

    Raises :class:`ForeignStateError` when the file is another crawl's or another part's.
    """
    if expected is None or found == expected:
        return False
    if found is None or found == "":
        return True
    raise ForeignStateError(f"{path} belongs to {_whose(found, expected)}, not to {_whose(expected, expected)}: {fix}")


def read_sqlite_stamp(path: str, table: str, what: str, fix: str) -> str | None:
    """The stamp in ``table`` (``key``, ``value``) of the SQLite file at ``path``, read with
    a read-only connection (a write-ahead log is left as it is: crawler.recovery.walcheck
    reads it later); the empty log and index files that connection makes are removed.
    None when the file has no stamp. A file that cannot be opened now is a StorageError;
    one that is not SQLite is DamagedStateError naming ``what`` it should be and ``fix``."""
    try:
        return _read_sqlite_stamp(path, table)
    except sqlite3.OperationalError as exc:
        raise StorageError(f"cannot read the {what} {path!r}: {exc}") from exc
    except sqlite3.DatabaseError as exc:
        raise DamagedStateError(f"{path} is not a readable {what} ({exc}): {fix}") from exc


def _read_sqlite_stamp(path: str, table: str) -> str | None:
    made = [p for p in (path + "-wal", path + "-shm") if not os.path.exists(p)]
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            if db.execute("SELECT count(*) FROM sqlite_schema WHERE name = ?", (table,)).fetchone()[0] == 0:
                return None
            row = db.execute(f"SELECT value FROM {table} WHERE key = ?", (STAMP_KEY,)).fetchone()  # noqa: S608 - our table name
        finally:
            db.close()
    finally:
        for extra in made:
            try:
                os.remove(extra)
            except FileNotFoundError:
                pass
    return None if row is None else row[0]
