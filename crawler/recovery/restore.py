"""Rebuilding a shard's store from OUT, verified: what it reads must chain, or it refuses.

docs/invariants.md #11 and DESIGN invariant 15. A new incarnation, once it has claimed
its generation (crawler.recovery.incarnation), rebuilds its store from the newest snapshot
and the changes logged after it (crawler.recovery.statelog), generation by generation,
and checks what it reads:

* **the snapshot** is the newest one the claims name (walked down from the previous
  generation: each claim names its incarnation's newest snapshot, or else the one it
  started from), or a newer one the listing shows -- never one of a generation past the
  point where that generation's successor read it;
* **segments chain**: after a snapshot the first one starts at the snapshot's anchor, in
  any other generation at 1, and each next one at the previous one's last change + 1.
  Segments are found by name, so a late listing does not hide one; a generation's chain
  ends at the first name that is not there;
* **a generation ends where its successor read it** (the successor's ``base``): no later
  (what an old incarnation wrote after its successor read is never applied) and no
  earlier (a change missing below that point is a gap);
* a listed object that cannot be read, or a listed segment the chain does not reach, is
  a gap too.

A gap is retried: the folder is listed again after a backoff (a store can list late,
and a compaction at the same moment can delete what was just listed), then refused with
:class:`~crawler.errors.StateGapError`, one line naming what is missing. Never a silent
partial restore.

What stays undetectable: on a store whose reads see every write completed before them
(S3, GCS, Azure, local disk), nothing acknowledged. The newest snapshot is named in a
claim, the segments after it are read by name up to the first name that is absent, and a
segment written after that read was never acknowledged (its writer checks its fence
after the PUT, and the claim that preceded this read fences it). On such a store a
listing missing the newest segment, or the newest snapshot, changes nothing. A store
whose reads lag (not only its listings) is not supported.
"""

from __future__ import annotations

import logging
import os
import time
import zlib
from dataclasses import dataclass, field
from typing import Callable

from crawler.errors import FencedError, StateGapError
from crawler.recovery.incarnation import claim_gen, read_claim
from crawler.recovery.statedir import Piece, Record, RemoteDir, Restored, decode, discard, parse_piece, segment_name

log = logging.getLogger(__name__)

#: Listings a restore makes before it refuses a gap, and the first wait between two
#: (doubled each time: 0.5 + 1 + 2 s in all).
RESTORE_ATTEMPTS = 4
RESTORE_BACKOFF_S = 0.5


class _Gap(Exception):
    """What one listing's restore found missing (retried, then StateGapError)."""


@dataclass
class _Plan:
    """What the claims and the listing say a restore starts from."""

    snapshot: Piece | None
    caps: dict[int, int]  # generation -> the last change its successor read
    first_gen: int  # the lowest generation to replay
    logs: dict[int, dict[int, Piece]] = field(default_factory=dict)  # generation -> first -> segment
    events: dict[tuple[int, int, int], Piece] = field(default_factory=dict)


def restore(
    remote: RemoteDir, local_path: str, gen: int, *, events_path: str | None = None,
    sleep: Callable[[float], None] = time.sleep, attempts: int = RESTORE_ATTEMPTS, backoff_s: float = RESTORE_BACKOFF_S,
) -> Restored:
    """Rebuild the state generation ``gen`` starts from (see the module docstring): the
    snapshot to ``local_path`` (replacing any local file) and, with ``events_path``, the
    events pending at that snapshot; returns the changes logged after it, in order, each
    once. The caller replays them (crawler.frontier.store.FrontierStore.replay).

    ``sleep`` waits between listings (injected: tests do not wait). StateGapError after
    ``attempts`` listings that all show a gap; FencedError if a newer generation than
    ``gen`` already exists."""
    for attempt in range(1, attempts + 1):
        try:
            found = _restore_once(remote, local_path, gen, events_path)
        except _Gap as gap:
            if attempt == attempts:
                raise StateGapError(f"{remote.base}: {gap} (still so after {attempts} listings); "
                                    "the shard's state in OUT is incomplete: restore the object or start the crawl over") from None
            wait = backoff_s * 2 ** (attempt - 1)
            log.warning("%s: %s; listing again in %.1fs", remote.base, gap, wait)
            sleep(wait)
            continue
        found.listings = attempt
        return found
    raise AssertionError("unreachable")  # attempts >= 1


def _plan(remote: RemoteDir, gen: int, paths: list[str]) -> _Plan:
    pieces = [p for p in (parse_piece(x) for x in paths) if p is not None and p.gen < gen]
    newer = [g for g in (claim_gen(x) for x in paths) if g is not None and g > gen]
    if newer:
        raise FencedError(f"{remote.base}: generation {max(newer)} was claimed before generation {gen} started")
    # Walk the claims down from the previous generation to the newest incarnation that
    # read OUT (its base): it names the snapshot it started from (or its own newest), and
    # how far it read each generation since. Above it are only claims of incarnations
    # that died before reading, which wrote nothing.
    caps: dict[int, int] = {}
    named: Piece | None = None
    lowest = gen  # the lowest generation to replay without a snapshot
    base_gen: int | None = None  # the claim holding it
    for h in range(gen - 1, 0, -1):
        rec = read_claim(remote, h)
        if rec is None:
            break  # an output older than claims: the listing alone tells
        lowest = h
        if rec.base is None:
            continue
        base_gen, caps = h, rec.heads()
        ref = rec.snapshot or rec.base.get("snapshot")
        named = parse_piece(remote.path(ref)) if ref else None
        lowest = min(caps, default=h)
        break

    def read_by_base(p: Piece) -> bool:
        """Whether the base read what ``p`` holds (below it, anything it did not read was
        written after it read: an old incarnation's late write, never replayed)."""
        return base_gen is None or p.gen >= base_gen or (p.gen in caps and p.first <= caps[p.gen])

    snaps = [p for p in [*pieces, *([named] if named else [])] if p.kind == "snap" and read_by_base(p)]
    snap = max(snaps, key=lambda p: p.order, default=None)
    logs: dict[int, dict[int, Piece]] = {}
    for p in pieces:
        if p.kind == "log":
            seen = logs.setdefault(p.gen, {}).get(p.first)
            if seen is None or (seen.last or 0) < (p.last or 0):  # older outputs rewrote a failed segment as a superset
                logs[p.gen][p.first] = p
    # With a base, what it did not read of an older generation is never replayed; an
    # output older than claims starts from the lowest generation listed.
    first_gen = snap.gen if snap is not None else (lowest if base_gen is not None else min([lowest, *logs], default=gen))
    events = {p.order: p for p in pieces if p.kind == "events"}
    return _Plan(snap, caps, first_gen, logs, events)


def _read(remote: RemoteDir, path: str, listed: bool) -> bytes | None:
    """An object's bytes; None if it is not there and was only a guess by name."""
    try:
        data = remote.read(path)
    except OSError as exc:
        raise _Gap(f"{path.rsplit('/', 1)[-1]} cannot be read: {exc}") from exc
    if data is None and listed:
        raise _Gap(f"{path.rsplit('/', 1)[-1]} is listed but cannot be read")
    return data


def _chain(remote: RemoteDir, h: int, plan: _Plan, out: list[Record]) -> tuple[int, int, int]:
    """Replay generation ``h`` into ``out``; returns (last change applied, segments, bytes)."""
    snap = plan.snapshot
    listed = plan.logs.get(h, {})
    cap = plan.caps.get(h)
    applied = snap.first if snap is not None and snap.gen == h else 0
    if snap is not None and snap.gen == h and snap.anchor is not None:
        pos = snap.anchor
    else:  # the segment holding applied + 1 starts at or before it
        pos = max((f for f in listed if f <= applied + 1), default=applied + 1)
    segments = size = 0
    while cap is None or applied < cap:
        piece = listed.get(pos)
        data = _read(remote, piece.path if piece else remote.path(segment_name(h, pos)), piece is not None)
        if data is None:
            break  # no segment by that name: the end of generation h
        try:
            records = decode(data)
        except (zlib.error, ValueError) as exc:
            raise _Gap(f"{segment_name(h, pos)} cannot be decoded: {exc}") from exc
        last = pos + len(records) - 1
        if not records or (piece is not None and piece.last is not None and piece.last != last):
            raise _Gap(f"{(piece.path if piece else segment_name(h, pos)).rsplit('/', 1)[-1]} holds "
                       f"{len(records)} changes, not what its name says")
        for i, rec in enumerate(records):
            seq = pos + i
            if seq > applied and (cap is None or seq <= cap):
                out.append(rec)
        applied = max(applied, last if cap is None else min(last, cap))
        segments += 1
        size += len(data)
        pos = last + 1
    # ``pos`` is now the name that was not there (or the one after the cap).
    if cap is not None and applied < cap:
        raise _Gap(f"generation {h} ends at change {applied} here, but its successor read it up to change {cap}: "
                   f"{segment_name(h, pos)} is missing")
    stranded = sorted(f for f in listed if f > applied + 1 and (cap is None or f <= cap))
    if stranded:
        lost = f"change {applied + 1}" if stranded[0] == applied + 2 else f"changes {applied + 1}-{stranded[0] - 1}"
        raise _Gap(f"{segment_name(h, stranded[0])} is listed but {lost} of generation {h} before it "
                   f"({segment_name(h, pos)}) cannot be found")
    return applied, segments, size


def _restore_once(remote: RemoteDir, local_path: str, gen: int, events_path: str | None) -> Restored:
    discard(local_path)
    plan = _plan(remote, gen, remote.names())
    snap = plan.snapshot
    size = 0
    events: Piece | None = None
    if snap is not None:
        os.makedirs(os.path.dirname(os.path.abspath(local_path)) or ".", exist_ok=True)
        try:
            remote.get_file(snap.path, local_path + ".part")
        except FileNotFoundError as exc:
            raise _Gap(f"{snap.path.rsplit('/', 1)[-1]} is named but cannot be read") from exc
        size += os.path.getsize(local_path + ".part")
        os.replace(local_path + ".part", local_path)
        events = plan.events.get(snap.order)
        if events_path is not None:
            discard(events_path)
            path = events.path if events else snap.path.replace("/snap-", "/events-")
            data = _read(remote, path, events is not None)  # written before its snapshot: there if it was
            if data is not None:
                with open(events_path + ".part", "wb") as f:
                    f.write(data)
                os.replace(events_path + ".part", events_path)
                events = events or parse_piece(path)
                size += len(data)
    snap_size = os.path.getsize(local_path) if snap is not None else 0
    records: list[Record] = []
    heads: dict[int, int] = {}
    segments = log_size = 0
    for h in range(plan.first_gen, gen):
        heads[h], n, nbytes = _chain(remote, h, plan, records)
        segments += n
        log_size += nbytes
    return Restored(gen, records, snap, segments, size + log_size, events, heads,
                    snapshot_bytes=snap_size, log_bytes=log_size)
