"""One content-index shard's log file: its records, its stamp, and reading it back.

The durability of a :class:`~crawler.content.index.ContentShard`: additions are appended
to the log as they come (buffered; no copy kept in memory), :meth:`ShardLog.save` makes
them durable (flush + fsync: only what changed since the last save is written), and a
restarted shard reads them back with :meth:`ShardLog.open` and rebuilds its runs.

A record is a header (magic, kind, table, count) followed by its arrays, column after
column: kind 0 is exact entries (SHA-256 words, reference, near flag), kind 1 one table's
near entries (key, reference), kind 2 a stamp (crawler.recovery.stamps; its count is the
byte length of the identity). A torn last record (a crash between two saves) is cut off
when the log is opened, so what is appended next starts on a record boundary.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from typing import BinaryIO

import numpy as np

from crawler.errors import DamagedStateError, StorageError
from crawler.output.fs import write_local_atomic
from crawler.recovery.stamps import FIX, check

__all__ = ["CONTENT_FIX", "LogContents", "ShardLog", "read_log_stamp"]

_U64 = np.uint64
_LOG_MAGIC = b"CIX1"
_HEADER = struct.Struct("<4sBBI")  # magic, kind (0 exact, 1 near, 2 stamp), table, count (bytes for a stamp)
_EXACT, _NEAR, _STAMP = 0, 1, 2
# The columns of each kind of record, in the order they are written.
_DTYPES: dict[int, list[type[np.generic]]] = {_EXACT: [_U64, _U64, _U64, np.uint8], _NEAR: [_U64, _U64]}
#: The fix a refusal of a content log names: an index that starts over loses no URL, only
#: the duplicates of pages indexed before (they are stored as originals).
CONTENT_FIX = f"remove it to start the duplicate index over, or {FIX}"


def _stamp_record(identity: str) -> bytes:
    raw = identity.encode()
    return _HEADER.pack(_LOG_MAGIC, _STAMP, 0, len(raw)) + raw


def read_log_stamp(path: str) -> str | None:
    """The stamp of the content log at ``path`` (its first record), read without writing;
    None for a log with none yet (made before stamps: the shard stamps it when it opens it)."""
    try:
        with open(path, "rb") as f:
            head = f.read(_HEADER.size)
            if len(head) < _HEADER.size:
                return None
            magic, kind, _t, n = _HEADER.unpack(head)
            if magic != _LOG_MAGIC:
                raise DamagedStateError(f"{path} is not a content index log: {CONTENT_FIX}")
            return f.read(n).decode("utf-8", "replace") if kind == _STAMP else None
    except OSError as exc:
        raise StorageError(f"content index log {path!r} is unreadable: {exc}") from exc


@dataclass
class LogContents:
    """The entries a log holds, concatenated in log order (oldest first)."""

    exact: list[np.ndarray] | None = None  # k1, k2, ref, near flag; None: no exact entry
    near: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)  # table -> (keys, refs)
    stamps: list[str] = field(default_factory=list)
    end: int = 0  # where the last whole record ends


def parse_log(path: str, data: bytes, tables: int) -> LogContents:
    """The entries and stamps of a log's bytes; a torn last record is left out."""
    exact: list[list[np.ndarray]] = []
    near: list[list[list[np.ndarray]]] = [[] for _ in range(tables)]
    out = LogContents()
    pos = 0
    while pos + _HEADER.size <= len(data):
        magic, kind, t, n = _HEADER.unpack_from(data, pos)
        if magic != _LOG_MAGIC or kind not in (_EXACT, _NEAR, _STAMP) or (kind == _NEAR and t >= tables):
            raise DamagedStateError(f"{path} is not a content index log (corrupt at byte {pos}): {CONTENT_FIX}")
        body = pos + _HEADER.size
        if kind == _STAMP:
            if body + n > len(data):
                break
            out.stamps.append(data[body : body + n].decode("utf-8", "replace"))
            pos = body + n
            continue
        dtypes = _DTYPES[kind]
        size = sum(n * np.dtype(d).itemsize for d in dtypes)
        if body + size > len(data):
            break  # torn last record: that save never completed
        arrays, off = [], body
        for d in dtypes:
            arrays.append(np.frombuffer(data, d, n, off).copy())
            off += n * np.dtype(d).itemsize
        (exact if kind == _EXACT else near[t]).append(arrays)
        pos = off
    if exact:
        out.exact = [np.concatenate(c) for c in zip(*exact)]
    for t, recs in enumerate(near):
        if recs:
            keys, refs = (np.concatenate(c) for c in zip(*recs))
            out.near[t] = (keys, refs)
    out.end = pos
    return out


class ShardLog:
    """The append-only log of one shard at ``path`` (see the module docstring)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._file: BinaryIO | None = None  # open for appending (buffered; fsynced by save)

    def open(self, identity: str | None, tables: int) -> LogContents:
        """Read the log back: refuse another crawl's (its stamps), stamp a log made before
        stamps (rewritten once with the stamp first), cut a torn tail off."""
        path = self.path
        data = b""
        if os.path.exists(path):
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except OSError as exc:
                raise StorageError(f"content index log {path!r} is unreadable: {exc}") from exc
        found = parse_log(path, data, tables) if data else LogContents()
        for stamp in found.stamps:
            check(path, stamp, identity, CONTENT_FIX)
        end = found.end
        first_is_stamp = end >= _HEADER.size and _HEADER.unpack_from(data)[1] == _STAMP
        if identity is not None and not first_is_stamp:
            write_local_atomic(path, _stamp_record(identity) + data[:end])
        elif end < len(data):
            write_local_atomic(path, data[:end])  # drop the torn tail: appends start on a record
        return found

    def append_exact(self, arrays: list[np.ndarray]) -> None:
        """Exact entries: k1, k2, ref, near flag."""
        self._append(_EXACT, 0, arrays)

    def append_near(self, t: int, arrays: list[np.ndarray]) -> None:
        """Table ``t``'s near entries: keys, refs."""
        self._append(_NEAR, t, arrays)

    def _append(self, kind: int, t: int, arrays: list[np.ndarray]) -> None:
        # Written as they are added (buffered, no copy kept in memory); save() makes them
        # durable. A crash loses at most what was written since the last save.
        if self._file is None:
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
            self._file = open(self.path, "ab")  # noqa: SIM115 - held open across appends; close() closes it
        self._file.write(_HEADER.pack(_LOG_MAGIC, kind, t, len(arrays[0])))
        for a in arrays:
            self._file.write(np.ascontiguousarray(a).tobytes())

    def save(self) -> None:
        """Make the entries appended since the last save durable (flush + fsync)."""
        if self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())

    def close(self) -> None:
        """Save and close the file (a later append opens it again)."""
        if self._file is not None:
            self.save()
            self._file.close()
            self._file = None
