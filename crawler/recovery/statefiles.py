"""Where a crawl's state lives: node-local files, and with a remote output, OUT/state.

State (the shards' frontier stores, the seen stores, the content index, the page budget,
the shards' event logs) lives in SQLite and log files on local disk. With a local output
they live under ``OUT/state``, beside the rows. With a remote output (``s3://...``)
each process keeps them on the disk of the node it runs on, under ``RAYCRAWL_LOCAL_DIR``
(:func:`local_dir`, resolved on that node by :func:`here`), and that disk is a cache,
never the only copy (docs/invariants.md #11):

* a shard's store is rebuilt from OUT when the shard starts (:func:`open_shard_store`),
  by a new incarnation that claimed its generation first (crawler.recovery.incarnation):
  snapshot plus the log of changes since, verified (crawler.recovery.restore), then :func:`reconcile_store`
  marks done every URL whose row reached OUT after the snapshot and flags every queued
  URL ``replay`` (its page's links bypass the seen filter when it is fetched: they may
  have been marked seen by a fetch whose links never arrived);
* the seen sets, the content index and the budget are copied to ``OUT/state/`` now and
  then (:func:`ship`) and brought back when their actor starts (:func:`fetch`), always
  replacing what the node's disk holds. A seen set older than the crash re-admits URLs
  the shards' stores already hold: each costs a duplicate delivery, counted, never a
  fetch (the owner's store refuses it). A content index older than the crash misses the
  pages indexed since: a page fetched later with the same content is stored, not flagged
  a duplicate (a flag lost, never a page). The budget is copied with every lease it
  grants (it is small). A seen set or content index shard is copied again once what it
  changed reaches a share of its last copy (crawler.recovery.copyschedule.CopyGate), and
  at the end of a run: the bytes sent grow with the crawl's rate, not its size.

With a local output the stores are the only copy, and a store can still forget: a cut
write-ahead log drops committed work (crawler.recovery.walcheck), a store can be removed
or replaced. The rows in OUT/pages are the truth of what was fetched, so before a run the
driver settles each shard's store against its rows (:func:`settle_local`, from
crawler.session.preflight): the newest part files on an ordinary resume, every row of the
shard after damage. Every store is opened with its stamp checked (:func:`open_shard`,
crawler.recovery.stamps).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import pyarrow.compute as pc
import pyarrow.dataset as pads

from crawler.recovery import incarnation as incarnations
from crawler.recovery import stamps
from crawler.recovery.copyschedule import CopySchedule
from crawler.recovery.restore import restore
from crawler.clock import Clock
from crawler.config.settings import CrawlConfig
from crawler.errors import StorageError
from crawler.events.emitter import EVENT_OUTCOMES, EventLog, page_event
from crawler.frontier.audit import StoreAudit
from crawler.frontier.urlitem import UrlItem
from crawler.frontier.store import FrontierStore
from crawler.output import PAGES_SCHEMA, OutcomeRow, open_fs, read_pages
from crawler.output.fs import list_names
from crawler.output.layout import PAGES_DIR, shard_part_order
from crawler.recovery.statedir import RemoteDir, Restored, discard
from crawler.recovery.statelog import StateLog

log = logging.getLogger(__name__)

#: Rows this much older than a shard's snapshot are applied too: clocks of two machines
#: differ, and a row is stamped when its page was fetched, which may be well before its
#: ack (a slow flush), so the snapshot may hold its URL as not yet done.
CLOCK_SLACK_S = 60.0


def is_remote(path: str) -> bool:
    """True for fsspec URLs other than local files (s3://, gs://, ...)."""
    return "://" in path and not path.startswith("file://")


#: The environment variable naming a node's folder for local files (default ~/.cache/raycrawl).
LOCAL_DIR_ENV = "RAYCRAWL_LOCAL_DIR"
#: How a state folder on "whichever node this runs on" is spelled between processes.
NODE_LOCAL = "$" + LOCAL_DIR_ENV


def local_dir() -> str:
    """This node's folder for a crawl's local files: ``$RAYCRAWL_LOCAL_DIR``, else
    ``$XDG_CACHE_HOME/raycrawl``, else ``~/.cache/raycrawl``. Read where it is used (inside
    an actor, on its node), never computed by the driver and handed over."""
    configured = os.environ.get(LOCAL_DIR_ENV)
    if configured:
        return os.path.abspath(os.path.expanduser(configured))
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return os.path.join(cache, "raycrawl")


def here(spec: str) -> str:
    """The folder ``spec`` names on this node: :data:`NODE_LOCAL` becomes :func:`local_dir`,
    ``~`` this node's home. Every process that opens a state file resolves it with this."""
    if spec == NODE_LOCAL or spec.startswith(NODE_LOCAL + "/"):
        spec = local_dir() + spec[len(NODE_LOCAL):]
    return os.path.abspath(os.path.expanduser(spec))


def state_dir(output_path: str, configured: str | None, fingerprint: str) -> str:
    """Where a crawl keeps its state files, as a spec for :func:`here`.

    A local output keeps them under ``OUT/state`` (the output's own disk: one path for
    every process). A remote output keeps them on each node's own disk, in the folder
    ``runtime.state_dir`` names there, else ``$RAYCRAWL_LOCAL_DIR/<fingerprint>``: the spec
    is resolved by each process on its node (:func:`here`), so a shard on a worker node
    writes to that node's disk, never to a path that exists only on the driver's.
    """
    if not is_remote(output_path):
        if configured:
            return os.path.abspath(os.path.expanduser(configured))
        base = output_path[len("file://") :] if output_path.startswith("file://") else output_path
        return os.path.join(os.path.abspath(base), "state")
    return configured or f"{NODE_LOCAL}/{fingerprint}"


def remote_path(out: str, name: str) -> str:
    """``OUT/state/<name>``."""
    return f"{out.rstrip('/')}/state/{name}"


def ship(copy_to: Callable[[str], object], out: str, name: str, wall: float, options: dict[str, Any] | None = None) -> int:
    """Copy one piece of state to ``OUT/state/<name>`` (one PUT) and note when; returns
    the copy's bytes.

    ``copy_to(path)`` writes a consistent copy of the piece to a local temp file. Callers
    copy a piece again when its crawler.recovery.copyschedule.CopyGate says so, not every
    period: a copy costs the piece's whole size.
    """
    fs, _ = open_fs(out, options)
    target = remote_path(out, name)
    with tempfile.TemporaryDirectory() as tmp:
        local = os.path.join(tmp, "copy")
        copy_to(local)
        size = os.path.getsize(local)
        fs.put_file(local, target)
    fs.pipe_file(target + ".json", json.dumps({"shipped_at": wall}).encode())
    return size


def fetch(out: str, name: str, local_path: str, options: dict[str, Any] | None = None) -> bool:
    """Replace ``local_path`` by ``OUT/state/<name>``; True if OUT had a copy.

    Whatever is at ``local_path`` is discarded first, copy or not: a node's disk is a
    cache (docs/invariants.md #11), and a file left there by an earlier incarnation or run
    may be older than what OUT holds, so it never wins."""
    discard(local_path)
    fs, _ = open_fs(out, options)
    source = remote_path(out, name)
    if not fs.exists(source):
        return False
    os.makedirs(os.path.dirname(os.path.abspath(local_path)) or ".", exist_ok=True)
    fs.get_file(source, local_path + ".part")
    os.replace(local_path + ".part", local_path)
    return True


def seen_name(index: int, exact: bool) -> str:
    """File name of seen shard ``index`` (a Bloom-only set persists only its filter)."""
    return f"seen-{index:03d}.sqlite" + ("" if exact else ".bloom")


def fetch_local(out: str, options: dict[str, Any] | None, name: str, local_path: str) -> bool:
    """:func:`fetch` when OUT is remote; False (nothing to do) for a local output."""
    return is_remote(out) and fetch(out, name, local_path, options)


def ship_file(out: str, options: dict[str, Any] | None, name: str, local_path: str, wall: float) -> int:
    """:func:`ship` of a file that is already a consistent snapshot (content index, budget);
    returns its bytes (0: there is no such file)."""
    if os.path.exists(local_path):
        return ship(lambda dest: shutil.copyfile(local_path, dest), out, name, wall, options)
    return 0


def file_size(path: str) -> int:
    """``path``'s bytes, 0 if there is none (what a content index shard's log grew by is
    what a crawler.recovery.copyschedule.CopyGate counts)."""
    try:
        return os.path.getsize(path)
    except FileNotFoundError:
        return 0


@dataclass
class ShardState:
    """A shard's store opened on this node, with its log in OUT for a remote output."""

    store: FrontierStore
    log: StateLog | None = None  # None: a local output (the store is on the output's disk)
    # What OUT held for this shard when it started, and the incarnation (its generation
    # and fence: crawler.recovery.incarnation), which a local output has too.
    restored: Restored | None = None


def open_shard_store(cfg: CrawlConfig, shard_id: str, sdir: str, clock: Clock,
                     run_blocking: Callable[..., Awaitable[Any]] = asyncio.to_thread, *,
                     sleep: Callable[[float], None] = time.sleep) -> ShardState:
    """The shard's store under ``sdir`` (a :func:`state_dir` spec, resolved here), opened
    by a new incarnation of the shard: it claims the next generation under
    ``OUT/state/<shard>/`` first (crawler.recovery.incarnation; its writer names its parts
    and packs after it, and stops once a newer one exists: docs/invariants.md #15).

    With a remote output the store is then rebuilt from OUT (crawler.recovery.restore:
    newest snapshot plus the changes logged since, verified; ``sleep`` waits between
    listings when a gap is seen), whatever the node's disk holds; what it read goes into
    the claim, and every change from now on is journaled to OUT (its object-store calls
    through ``run_blocking``). StateGapError if OUT's state has a hole that does not fill."""
    out, options = cfg.output.path, dict(cfg.output.storage_options) or None
    local = os.path.join(here(sdir), f"{shard_id}.sqlite")
    remote = RemoteDir(out, options, shard_id)
    listed = remote.names()
    inc = incarnations.claim(remote, clock, listed=listed)
    if not is_remote(out):
        return ShardState(FrontierStore(local), None, Restored(inc.gen, [], None, 0, 0, incarnation=inc))
    # The events that waited for the sink at the snapshot come with it (a local log may be stale).
    events = os.path.splitext(local)[0] + ".events.sqlite"
    discard(events)
    wanted = events if cfg.events.sink != "none" else None
    found = dataclasses.replace(restore(remote, local, inc.gen, events_path=wanted, sleep=sleep), incarnation=inc)
    inc.record_base(found.base())
    # A store restored from a snapshot alone is that snapshot: not copied again until it changes.
    rt = cfg.runtime
    slog = StateLog(remote, inc.gen, clock, interval_s=rt.state_log_interval_s, fence=inc,
                    snapped=None if found.records else 0, run_blocking=run_blocking,
                    schedule=CopySchedule.of(rt),
                    snap_bytes=found.snapshot_bytes, log_bytes=found.log_bytes)
    store = FrontierStore(local, journal=slog.append)
    store.replay(found.records)
    if found.anything:
        log.info("%s: restored from OUT: generation %d, snapshot %s, %d segments, %d changes, %d bytes, %d listings",
                 shard_id, found.gen, found.snapshot.path if found.snapshot else None, found.segments,
                 len(found.records), found.bytes_read, found.listings)
    return ShardState(store, slog, found)


def rows_since(shard_id: str, out: str, options: dict[str, Any] | None, since: float | None) -> list[dict[str, Any]]:
    """The rows ``shard_id`` wrote to OUT since ``since`` (wall time; None: all of them)."""
    where = pads.field("shard") == shard_id
    if since is not None:
        cutoff = dt.datetime.fromtimestamp(since - CLOCK_SLACK_S, dt.timezone.utc)
        where = where & (pads.field("fetched_at") >= cutoff)
    rows: list[dict[str, Any]] = read_pages(out, options, dedupe=False, where=where, columns=list(ROW_COLUMNS)).to_pylist()
    return rows  # pyarrow has no types


#: The columns :func:`rows_since` reads: what the reconcile and the events need.
ROW_COLUMNS = ("url", "depth", "outcome", "status", "fetched_at", "url_hash", "blob_key", "content_sha256",
               "simhash", "dup_kind", "changed", "fetch_seq")


def event_rows(rows: list[dict[str, Any]]) -> list[OutcomeRow]:
    """:func:`rows_since` rows as the rows crawler.events.emitter makes ``page.fetched`` events of."""
    fields: list[dict[str, Any]] = [{k: r.get(k) for k in ROW_COLUMNS} for r in rows]
    return [OutcomeRow(**f) for f in fields]


def reconcile_store(store: FrontierStore, rows: list[dict[str, Any]]) -> int:
    """After a rebuild from OUT (before the frontier loads the store): every queued URL
    flagged ``replay``, and every URL with one of ``rows`` done.

    A URL may have a row and no entry at all: a shard fetches what it accepted before the
    log segment holding it is written (the sender waits for that, the fetch does not),
    so a node lost in between leaves the row and not the admission. It is added now
    (journaled) and marked done, so the sender's retry of the delivery is a duplicate,
    not a second fetch. Returns the URLs marked done."""
    store.recover(replay_all=True)
    store.add([UrlItem(r["url"], r["depth"] or 0) for r in rows])
    return store.finish_from_output([r["url"] for r in rows])


# -- the identity and the rows of a shard's store ---------------------------------------


def open_shard(cfg: CrawlConfig, shard_id: str, sdir: str, clock: Clock, crawl: str | None,
               run_blocking: Callable[..., Awaitable[Any]] = asyncio.to_thread, *,
               sleep: Callable[[float], None] = time.sleep) -> ShardState:
    """:func:`open_shard_store`, with the store's stamp (and its event log's) checked or set
    (crawler.recovery.stamps): another crawl's or shard's store is refused with one line."""
    opened = open_shard_store(cfg, shard_id, sdir, clock, run_blocking, sleep=sleep)
    try:
        identity = stamps.part(crawl, stamps.shard_part(shard_id))
        if opened.log is None:
            StoreAudit(opened.store).claim(identity)
        else:  # rebuilt from OUT: the copy to put back is there (removing it would lose the queue)
            StoreAudit(opened.store).claim(identity, where=remote_path(cfg.output.path, shard_id) + "/", fix=stamps.FIX)
        events = events_path(opened.store.path)
        if os.path.exists(events) or (crawl is not None and cfg.events.sink != "none"):
            EventLog(events, stamps.part(crawl, stamps.events_part(shard_id))).close()
    except BaseException:
        opened.store.close()
        raise
    return opened


def events_path(store_path: str) -> str:
    """The shard's event log beside its store (crawler.engine.assembly builds the emitter on it)."""
    return os.path.splitext(store_path)[0] + ".events.sqlite"


def shard_parts(out: str, options: dict[str, Any] | None, shard_id: str) -> list[str]:
    """Paths of the part files ``shard_id`` wrote (every generation of it), oldest first."""
    fs, root = open_fs(out, options)
    pages = f"{root.rstrip('/')}/{PAGES_DIR}"
    found = sorted((key, name) for name in list_names(fs, pages) if (key := shard_part_order(name, shard_id)) is not None)
    return [f"{pages}/{name}" for _, name in found]


def part_rows(out: str, options: dict[str, Any] | None, path: str) -> list[dict[str, Any]]:
    """The :data:`ROW_COLUMNS` of one part file."""
    fs, _ = open_fs(out, options)
    try:
        table = pads.dataset([path], format="parquet", filesystem=fs, schema=PAGES_SCHEMA).to_table(columns=list(ROW_COLUMNS))
    except Exception as exc:  # pyarrow and OS errors alike
        raise StorageError(f"reading {path} failed: {exc}") from exc
    rows: list[dict[str, Any]] = table.to_pylist()  # pyarrow has no types
    return rows


@dataclass
class Settled:
    """What :func:`settle_local` found: part files read, how many held rows the store had
    not acked, the rows it acked from OUT, and why it read every row (damage) if it did."""

    parts_read: int = 0
    unacked_parts: int = 0
    settled: int = 0
    damaged: str = ""
    rows: list[dict[str, Any]] = field(default_factory=list)
    last_ack: float | None = None  # damaged: the fetch time of the store's last surviving ack


def settle_local(cfg: CrawlConfig, shard_id: str, store: FrontierStore, *, cut: str | None = None) -> Settled:
    """Bring a local output's shard store level with the rows its shard wrote to OUT/pages.

    The rows are the truth of what was fetched (crawler.frontier.audit): a URL with a row
    is never fetched again because the store forgot its ack. Acks are committed in the
    order of the part files, so the store is behind by the newest parts only: they are
    read from the newest back to the first part the store has acked (one part on an
    ordinary resume), and their rows acked. Damage means more may be missing than a
    crash between a part and its ack explains: ``cut`` (the store's write-ahead log was
    cut short: crawler.recovery.walcheck), two or more part files unacked, or a part none
    of whose URLs the store holds (lost admissions). Then every row of the shard is read
    (O(rows of the shard), once), and URLs the store lost are added back, done.
    """
    out, options = cfg.output.path, dict(cfg.output.storage_options) or None
    audit = StoreAudit(store)
    found = Settled(damaged=cut or "")
    pending: list[dict[str, Any]] = []
    if not cut:
        for path in reversed(shard_parts(out, options, shard_id)):
            rows = part_rows(out, options, path)
            found.parts_read += 1
            todo, present = audit.unacked(rows)
            if rows and not present:
                found.damaged = f"{store.path} holds none of the URLs of {path}"
                break
            if not todo:
                break
            found.unacked_parts += 1
            pending.extend(todo)
        if found.unacked_parts >= 2:
            found.damaged = f"{store.path} has not acked the rows of {found.unacked_parts} part files"
    first = cfg.recrawl.initial_interval_s
    if found.damaged:
        log.warning("%s: %s; reading every row of %s from %s", shard_id, found.damaged, shard_id, out)
        found.last_ack = audit.last_fetch()
        found.rows = audit.settle(rows_since(shard_id, out, options, None), first_interval_s=first, add_missing=True)
    else:
        found.rows = audit.settle(pending, first_interval_s=first, add_missing=False)
    found.settled = len(found.rows)
    if found.rows:
        log.info("%s: %d URLs whose rows were in %s without their ack are done", shard_id, found.settled, out)
    return found


def log_events(cfg: CrawlConfig, shard_id: str, store_path: str, rows: list[dict[str, Any]], crawl: str | None) -> int:
    """Log the ``page.fetched`` events of rows acked by :func:`settle_local` (their events
    may never have been logged: at least once, docs/invariants.md #6). Returns how many."""
    if not rows or cfg.events.sink == "none":
        return 0
    events = [page_event(r) for r in event_rows(rows) if r.outcome in EVENT_OUTCOMES]
    elog = EventLog(events_path(store_path), stamps.part(crawl, stamps.events_part(shard_id)))
    try:
        elog.add(events)
    finally:
        elog.close()
    return len(events)


def pages_spent(out: str, options: dict[str, Any] | None) -> int:
    """Pages the rows in OUT show fetched: what ``limits.max_pages`` counts (a URL refused
    by robots.txt is a row and no fetch). Every row of the crawl: read when the page
    budget's file is missing or damaged (crawler.services.budget.BudgetPool)."""
    rows = read_pages(out, options, dedupe=False, columns=["outcome", "error"])
    if rows.num_rows == 0:
        return 0
    fetched = pc.and_(pc.not_equal(rows["outcome"], "robots_blocked"),
                      pc.invert(pc.fill_null(pc.starts_with(rows["error"], "robots.txt unreachable"), False)))
    return int(pc.sum(fetched.cast("int64")).as_py() or 0)
