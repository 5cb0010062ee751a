"""Is a SQLite write-ahead log cut short? Read before the store is opened.

What SQLite does with a cut log (measured with SQLite 3.40, tests/unit/test_damaged_state.py):
opening the database replays the ``-wal`` file frame by frame while each frame carries
the log's current salts and a valid checksum, and keeps every transaction up to the
last *commit* frame among them. A file cut in the middle of a frame (or of its header)
ends that replay early: the transactions committed after the cut are gone, silently (no
error, ``PRAGMA integrity_check`` says ok), and when the last connection closes SQLite
checkpoints and deletes the log, so nothing is left to tell. With ``synchronous=NORMAL``
(the stores here) a commit is in the operating system when it returns but is fsynced
only at checkpoints, so a power loss, an OS crash or a copy of a live store can leave
such a log; a ``kill -9`` of the process cannot (the kernel keeps its writes).

:func:`wal_cut` looks for the cut before anything opens the store. A log is a 32-byte
header and whole frames (24-byte header + one page). The frames of its current
generation come first and carry the header's salts; after a checkpoint the log restarts
from its beginning with new salts, so older frames may follow them (not a cut). A cut is
a file that ends inside a frame that still belongs to the current generation, or inside
the header. Checksums are not verified: that would read the whole log in Python. A cut
that falls exactly on a frame boundary is invisible here; the rows in OUT catch what
it cost in acks (crawler.recovery.statefiles).
"""

from __future__ import annotations

import os
import struct

__all__ = ["wal_cut"]

_MAGICS = (0x377F0682, 0x377F0683)
_HEADER = 32
_FRAME_HEADER = 24  # page number, database size (commit frames), salt-1, salt-2, two checksums


def wal_cut(db_path: str) -> str | None:
    """Why the write-ahead log of the SQLite database at ``db_path`` looks cut short, or
    None (no log, an empty one, or whole frames only)."""
    path = db_path + "-wal"
    try:
        size = os.path.getsize(path)
    except FileNotFoundError:
        return None
    if size == 0:
        return None
    with open(path, "rb") as f:
        head = f.read(_HEADER)
        if len(head) < _HEADER:
            return f"{path} is {size} bytes, shorter than a log header"
        magic, _version, page_size, _ckpt, salt1, salt2 = struct.unpack(">6I", head[:24])
        if magic not in _MAGICS or page_size < 512 or page_size > 65536 or page_size & (page_size - 1):
            return f"{path} does not start like a SQLite write-ahead log"
        frame = _FRAME_HEADER + page_size
        whole, tail = divmod(size - _HEADER, frame)
        current = 0
        while current < whole:  # the current generation: frames with the header's salts
            f.seek(_HEADER + current * frame + 8)
            if struct.unpack(">2I", f.read(8)) != (salt1, salt2):
                break
            current += 1
        if current < whole or not tail:
            return None  # ends on a frame boundary, or older frames follow the current ones
        f.seek(_HEADER + current * frame)
        partial = f.read(tail)
    if len(partial) < 16 or struct.unpack_from(">2I", partial, 8) == (salt1, salt2):
        return f"{path} ends {tail} bytes into frame {current + 1} of its current generation"
    return None
