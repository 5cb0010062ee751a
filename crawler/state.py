"""Where a crawl's durable state lives, and how it travels with a remote output.

State (the shards' frontier stores, the seen stores, the content index, the page budget)
lives on local disk, because SQLite needs a real file: under ``OUT/state`` for a local
output, in a local cache folder for a remote one (``s3://...``). With a remote output,
every piece is also copied to ``OUT/state/`` now and then (:func:`ship`), with a small
``.json`` beside it saying when; a crawl resumed on a machine whose cache is empty brings
the copies back (:func:`fetch`), from what is in OUT alone.

A copy is older than the crash. Resuming from copies keeps DESIGN.md invariants 5 and 6
(every URL a row, nothing acked lost, nothing fetched twice beyond what was in flight) by
:func:`reconcile`, in this order, for each shard restored from a copy:

1. every URL still queued in the copy is flagged ``replay``, so the links of pages
   fetched again bypass the seen filter (which may remember links whose owner's copy
   does not) and the owner's store de-duplicates them;
2. every row in OUT written by this shard since the oldest copy was taken is applied:
   its URL is marked done (it is not fetched again), and the links of its page (from
   the stored body) or its redirect target are routed again, bypassing the seen filter
   (they may have reached an owner after that owner's copy was taken).

Rows older than every copy need nothing: their links were delivered before the row was
written, so before every copy.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import os
import shutil
import tempfile
from typing import TYPE_CHECKING, Any, Callable

import pyarrow.dataset as pads

from crawler.frontier import UrlItem
from crawler.journal import FrontierStore
from crawler.output import BlobStore, open_fs, read_pages

if TYPE_CHECKING:
    from crawler.scheduler import ShardScheduler

log = logging.getLogger(__name__)

#: Rows this much older than the oldest copy are applied too (clocks of two machines).
CLOCK_SLACK_S = 5.0


def is_remote(path: str) -> bool:
    """True for fsspec URLs other than local files (s3://, gs://, ...)."""
    return "://" in path and not path.startswith("file://")


def state_dir(output_path: str, configured: str | None, fingerprint: str) -> str:
    """Where a crawl keeps its durable state on local disk.

    ``configured`` (runtime.state_dir) wins; a local output keeps it under ``OUT/state``;
    a remote output keeps it in a local cache folder named by the config.
    """
    if configured:
        return os.path.abspath(os.path.expanduser(configured))
    if not is_remote(output_path):
        base = output_path[len("file://") :] if output_path.startswith("file://") else output_path
        return os.path.join(os.path.abspath(base), "state")
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return os.path.join(cache, "raycrawl", fingerprint)


def remote_path(out: str, name: str) -> str:
    """``OUT/state/<name>``."""
    return f"{out.rstrip('/')}/state/{name}"


def ship(copy_to: Callable[[str], None], out: str, name: str, wall: float, options: dict | None = None) -> None:
    """Copy one piece of state to ``OUT/state/<name>`` (one PUT) and note when.

    ``copy_to(path)`` writes a consistent copy of the piece to a local temp file.
    """
    fs, _ = open_fs(out, options)
    target = remote_path(out, name)
    with tempfile.TemporaryDirectory() as tmp:
        local = os.path.join(tmp, "copy")
        copy_to(local)
        fs.put_file(local, target)
    fs.pipe_file(target + ".json", json.dumps({"shipped_at": wall}).encode())


def fetch(out: str, name: str, local_path: str, options: dict | None = None) -> bool:
    """Bring ``OUT/state/<name>`` to ``local_path`` if there is no local copy. True if copied."""
    if os.path.exists(local_path):
        return False
    fs, _ = open_fs(out, options)
    source = remote_path(out, name)
    if not fs.exists(source):
        return False
    os.makedirs(os.path.dirname(os.path.abspath(local_path)) or ".", exist_ok=True)
    fs.get_file(source, local_path + ".part")
    os.replace(local_path + ".part", local_path)
    return True


def oldest_copy(out: str, options: dict | None = None) -> float | None:
    """Wall time of the oldest shipped shard store copy in ``OUT/state`` (None if none).

    Only the shards' copies matter: a link is delivered to its owner before its page's row
    is written. The seen set's copy may be older or newer; :func:`reconcile_store` flags
    every restored URL for replay, so a link the seen set remembers is still delivered."""
    fs, _ = open_fs(out, options)
    base = remote_path(out, "")
    try:
        fs.invalidate_cache(base.rstrip("/"))
        names = [p for p in fs.ls(base, detail=False) if p.rsplit("/", 1)[-1].startswith("shard-") and p.endswith(".sqlite.json")]
    except FileNotFoundError:
        return None
    times = []
    for p in names:
        with fs.open(p, "r") as f:
            times.append(float(json.load(f)["shipped_at"]))
    return min(times) if times else None


def seen_name(index: int, exact: bool) -> str:
    """File name of seen shard ``index`` (a Bloom-only set persists only its filter)."""
    return f"seen-{index:03d}.sqlite" + ("" if exact else ".bloom")


def fetch_local(out: str, options: dict | None, name: str, local_path: str) -> bool:
    """:func:`fetch` when OUT is remote; False (nothing to do) for a local output."""
    return is_remote(out) and fetch(out, name, local_path, options)


def ship_file(out: str, options: dict | None, name: str, local_path: str, wall: float) -> None:
    """:func:`ship` of a file that is already a consistent snapshot (content index, budget)."""
    if os.path.exists(local_path):
        ship(lambda dest: shutil.copyfile(local_path, dest), out, name, wall, options)


def open_shard_store(out: str, options: dict | None, shard_id: str, sdir: str) -> tuple[FrontierStore, bool]:
    """The shard's durable store; with a remote output and no local store, the copy from
    OUT. Returns (store, restored from a copy)."""
    local = os.path.join(sdir, f"{shard_id}.sqlite")
    from_copy = is_remote(out) and fetch(out, f"{shard_id}.sqlite", local, options)
    return FrontierStore(local), from_copy


def rows_since(shard_id: str, out: str, options: dict | None, since: float | None) -> list[dict[str, Any]]:
    """The rows ``shard_id`` wrote to OUT since ``since`` (wall time; None: all of them)."""
    where = pads.field("shard") == shard_id
    if since is not None:
        cutoff = dt.datetime.fromtimestamp(since - CLOCK_SLACK_S, dt.timezone.utc)
        where = where & (pads.field("fetched_at") >= cutoff)
    return read_pages(
        out, options, dedupe=False, where=where,
        columns=["url", "depth", "outcome", "content_type", "blob_key", "redirect_to"],
    ).to_pylist()


def reconcile_store(store: FrontierStore, rows: list[dict[str, Any]]) -> int:
    """Steps 1 and 2a of the module docstring: replay flags, and every URL with a row done.
    Runs before the frontier loads the store. Returns the URLs marked done."""
    store.recover(replay_all=True)
    return store.finish_from_output([r["url"] for r in rows])


async def reroute(shard: "ShardScheduler", rows: list[dict[str, Any]], out: str, options: dict | None) -> int:
    """Step 2b: the links of those rows' pages (from their stored bodies) and their
    redirect targets go out again, past the seen filter. Returns how many were sent."""
    blobs = BlobStore(out, storage_options=options)
    links: list[UrlItem] = []
    for r in rows:
        depth = (r["depth"] or 0) + 1
        if r["outcome"] == "redirect" and r["redirect_to"]:
            links.append(UrlItem(r["redirect_to"], depth, r["url"]))
        elif r["outcome"] == "fetched" and r["blob_key"]:
            try:
                body = await asyncio.to_thread(blobs.get, r["blob_key"])
            except Exception as exc:  # noqa: BLE001 - a missing body costs that page's links, counted
                log.warning("%s: body of %s unreadable (%r): its links are not re-sent", shard.shard_id, r["url"], exc)
                shard.counters["reconcile_missing_bodies"] += 1
                continue
            links.extend(shard.pipeline.links_from(r["url"], depth, r["content_type"], body))
    if links and not await shard.router.submit(links, bypass_seen=True):
        raise RuntimeError(f"{shard.shard_id}: links of pages written before the crash could not be re-sent")
    log.info("%s: resumed from OUT: %d rows since the oldest copy, %d links re-sent", shard.shard_id, len(rows), len(links))
    return len(links)
