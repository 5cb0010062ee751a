"""A shard's folder in the output, ``OUT/state/<shard>/``: what its objects are named, and
how they are read and written (crawler.recovery.statelog writes the log and snapshots,
crawler.recovery.incarnation the claims, crawler.recovery.restore reads it all back)::

    gen-<gen>.json                             generation <gen> claimed (crawler.recovery.incarnation)
    log-<gen>-<first>.json.z                   changes first.. of generation <gen> (zlib JSON)
    snap-<gen>-<seq>-<from>-<wall ms>.sqlite   the store as of change <seq> of generation <gen>;
                                               change seq+1 is in the segment starting at <from>
    events-<gen>-<seq>-<from>-<wall ms>.sqlite the events then waiting for the sink (with a sink)

A segment is named by its generation and its first change, so the name of the next one
is known: a restart finds segments by reading names, not by trusting a listing. Outputs
written before generations were claimed (``log-<gen>-<first>-<last>``,
``snap-<gen>-<seq>-<wall>``) are still read.
"""

from __future__ import annotations

import builtins
import json
import os
import re
import zlib
from dataclasses import dataclass, field
from typing import Any

from crawler.output import open_fs
from crawler.output.fs import create_new, publish

#: A position in a shard's history: (generation, seq). Generations compare first.
Mark = tuple[int, int]
#: One change: ``[kind, payload]`` (JSON).
Record = list[Any]

_SNAP = re.compile(r"^(snap|events)-(\d{8})-(\d{12})-(\d{12})-(\d{14})\.sqlite$")
_LOG = re.compile(r"^log-(\d{8})-(\d{12})\.json\.z$")
_OLD = re.compile(r"^(snap|events|log)-(\d{8})-(\d{12})-(\d{12,14})\.(sqlite|json\.z)$")  # before generations were claimed


@dataclass(frozen=True)
class Piece:
    """One object of a shard's remote state.

    A snapshot or events copy: ``first == last`` is the change it covers, ``wall_ms`` when
    it was taken, ``anchor`` the first change of the segment that holds change
    ``last + 1`` (None in older outputs). A log segment: changes ``first``..``last``
    (``last`` is None until it is read: the name carries only ``first``)."""

    kind: str
    gen: int
    first: int
    last: int | None
    wall_ms: int
    path: str
    anchor: int | None = None

    @property
    def order(self) -> tuple[int, int, int]:
        """Snapshots compare by generation, change, then time taken."""
        return (self.gen, self.first, self.wall_ms)


def parse_piece(path: str) -> Piece | None:
    """The :class:`Piece` a file name describes, or None for anything else (claims too)."""
    name = path.rsplit("/", 1)[-1]
    if m := _LOG.match(name):
        return Piece("log", int(m.group(1)), int(m.group(2)), None, 0, path)
    if m := _SNAP.match(name):
        seq = int(m.group(3))
        return Piece(m.group(1), int(m.group(2)), seq, seq, int(m.group(5)), path, int(m.group(4)))
    if m := _OLD.match(name):
        kind, gen, a, b = m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4))
        if kind in ("snap", "events"):
            return Piece(kind, gen, a, a, b, path)
        return Piece("log", gen, a, b, 0, path)
    return None


def snapshot_name(gen: int, seq: int, anchor: int, wall: float, kind: str = "snap") -> str:
    return f"{kind}-{gen:08d}-{seq:012d}-{anchor:012d}-{int(wall * 1000):014d}.sqlite"


def segment_name(gen: int, first: int) -> str:
    return f"log-{gen:08d}-{first:012d}.json.z"


def covered(piece: Piece, snap: Piece) -> bool:
    """Whether ``snap`` makes ``piece`` unnecessary: an older snapshot or events copy, or
    a segment whose every change ``snap`` holds. A restart starts from the newest snapshot
    (crawler.recovery.restore), so it never reads what this says is covered."""
    if piece.kind in ("snap", "events"):
        return piece.order < snap.order
    if piece.kind != "log":
        return False
    if piece.gen != snap.gen:
        return piece.gen < snap.gen
    if piece.last is not None:  # an older output's segment names its last change
        return piece.last <= snap.first
    # Segments are disjoint and the one holding change seq+1 starts at the anchor, so one
    # that starts before it ends at or before seq.
    return snap.anchor is not None and piece.first < snap.anchor


def encode(records: list[Record]) -> bytes:
    return zlib.compress(json.dumps(records, separators=(",", ":")).encode(), 6)


def decode(data: bytes) -> list[Record]:
    records: list[Record] = json.loads(zlib.decompress(data))
    return records


#: Files SQLite and the seen set keep beside a store: a copy replaces them all.
SIDECARS = ("", "-wal", "-shm", "-journal", ".bloom")


def discard(local_path: str) -> None:
    """Remove a local state file and its sidecars (WAL, shared memory, Bloom snapshot)."""
    for suffix in SIDECARS:
        try:
            os.remove(local_path + suffix)
        except FileNotFoundError:
            pass


class RemoteDir:
    """``OUT/state/<name>/`` through fsspec: list, put, get, remove (one request each).

    Works on a local output too (the claims of crawler.recovery.incarnation live there)."""

    def __init__(self, out: str, options: dict[str, Any] | None, name: str) -> None:
        self.fs, root = open_fs(out, options)
        self.base = f"{root.rstrip('/')}/state/{name}"
        self.requests = 0  # object-store requests made (benchmarks/statelog.py)

    def path(self, name: str) -> str:
        return f"{self.base}/{name}"

    def names(self) -> list[str]:
        """The paths in the folder (one LIST; [] if there is none)."""
        self.requests += 1
        self.fs.invalidate_cache(self.base)
        try:
            return list(self.fs.ls(self.base, detail=False))
        except FileNotFoundError:
            return []

    def list(self) -> list[Piece]:
        return [p for p in (parse_piece(n) for n in self.names()) if p is not None]

    def put(self, name: str, data: bytes) -> None:
        """Write ``name`` whole or not at all (a rename locally, one PUT remotely)."""
        self.requests += 1
        publish(self.fs, self.path(name), data)

    def create(self, name: str, data: bytes) -> bool:
        """Create ``name`` only if it does not exist (crawler.output.fs.create_new)."""
        self.requests += 1
        return create_new(self.fs, self.path(name), data)

    def put_file(self, name: str, local: str) -> None:
        self.requests += 1
        self.fs.put_file(local, self.path(name))

    def get(self, path: str) -> bytes:
        self.requests += 1
        # A range: one GET. Without one, s3fs asks for the size first (a HEAD, and for a
        # missing key a LIST too).
        data: bytes = self.fs.cat_file(path, start=0)  # fsspec has no types
        return data

    def read(self, path: str) -> bytes | None:
        """The object at ``path``, or None if there is none (one GET)."""
        try:
            return self.get(path)
        except FileNotFoundError:
            return None

    def get_file(self, path: str, local: str) -> None:
        self.requests += 1
        self.fs.get_file(path, local)

    def remove(self, paths: builtins.list[str]) -> None:  # builtins: ``list`` here is the method above
        if paths:
            self.requests += 1  # one multi-object delete
            self.fs.rm(paths)


@dataclass
class Restored:
    """What a new incarnation of a shard found in OUT (crawler.recovery.restore), and the
    incarnation itself (crawler.recovery.incarnation.Incarnation; a local output has only
    that: its store is on the output's own disk)."""

    gen: int  # the generation the new incarnation writes
    records: list[Record]  # changes after the snapshot, in order, each once
    snapshot: Piece | None
    segments: int  # segments read
    bytes_read: int
    events: Piece | None = None  # the events pending at the snapshot (crawler.events.emitter)
    heads: dict[int, int] = field(default_factory=dict)  # generation -> last change replayed
    listings: int = 0  # listings it took (more than one: a gap was seen, then filled)
    snapshot_bytes: int = 0  # the snapshot's size
    log_bytes: int = 0  # the segments' (what a snapshot schedule counts: crawler.recovery.copyschedule)
    incarnation: Any = None

    @property
    def snapshot_wall(self) -> float | None:
        return None if self.snapshot is None else self.snapshot.wall_ms / 1000.0

    @property
    def anything(self) -> bool:
        return self.snapshot is not None or bool(self.records)

    def base(self) -> dict[str, Any]:
        """What the incarnation started from, as its claim records it (crawler.recovery.incarnation):
        the snapshot, and how far it read each older generation."""
        s = self.snapshot
        return {"snapshot": None if s is None else s.path.rsplit("/", 1)[-1],
                "heads": {str(g): n for g, n in sorted(self.heads.items())}}
