"""Where things live under an output root ``OUT`` (a local folder or ``s3://bucket/prefix``)::

    OUT/pages/part-<name>-<seq:06d>.parquet   one row per URL outcome (PAGES_SCHEMA), zstd
    OUT/blobs/packs/<name>-<seq:06d>.pack     the bodies of that flush: one zstd frame each
    OUT/blobs/<sha[0:2]>/<sha[2:4]>/<sha>.gz  one gzip file per body (older outputs)

``<name>`` is the writer's id and, for a shard, the generation its incarnation claimed
(:func:`generation_name`: ``shard-000-g00000003``). Generations are claimed once each
(crawler.recovery.incarnation), so two incarnations of one shard never write the same
name, even when an old one comes back from a partition (DESIGN invariant 15).

A body in a pack is named by ``blobs/packs/<pack>:<offset>:<length>:<sha256>``: where
its frame starts, how long it is, and the SHA-256 of the decoded body it must match.

Two rules keep readers safe:

* A blob key is derived only from a hash, never from anything in the page: stored bodies
  are data, never paths.
* Temporary files start with ``.``: ``pyarrow.dataset`` skips basenames starting with
  ``.`` or ``_`` by default, and the readers here list only names matching
  :data:`PART_RE`, so a half-written file is never read.
"""

from __future__ import annotations

import re
import uuid

__all__ = [
    "BLOBS_DIR",
    "PACKS_DIR",
    "PAGES_DIR",
    "PART_RE",
    "blob_key",
    "blob_sha",
    "pack_key",
    "pack_name",
    "pack_seq",
    "parse_pack_key",
    "check_sha256",
    "check_writer_id",
    "generation_name",
    "part_name",
    "part_seq",
    "shard_part_order",
    "temp_name",
    "temp_target",
]

PAGES_DIR = "pages"
BLOBS_DIR = "blobs"
PACKS_DIR = f"{BLOBS_DIR}/packs"

PART_RE = re.compile(r"part-.+-\d{6,}\.parquet")
"""Basename of a finished part file (any writer)."""

_SHA_RE = re.compile(r"[0-9a-f]{64}")
_KEY_RE = re.compile(r"blobs/([0-9a-f]{2})/([0-9a-f]{2})/([0-9a-f]{64})\.gz")
_PACK_KEY_RE = re.compile(r"blobs/packs/([A-Za-z0-9][A-Za-z0-9_.=-]{0,139}-\d{6,}\.pack):(\d{1,15}):(\d{1,15}):([0-9a-f]{64})")
# Not starting with "." or "_" (hidden from dataset discovery) or "-" (ambiguous in names).
_WRITER_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.=-]{0,127}")
# A writer id with its generation (generation_name): 10 characters longer.
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.=-]{0,139}")
_TEMP_SUFFIX = ".tmp"
_TEMP_RE = re.compile(r"\.(.+)\.[0-9a-f]{32}\.tmp")


def check_sha256(sha256_hex: str) -> str:
    """Return ``sha256_hex`` if it is a lowercase hex SHA-256 digest; ValueError otherwise."""
    if not isinstance(sha256_hex, str) or _SHA_RE.fullmatch(sha256_hex) is None:
        raise ValueError(f"not a lowercase hex SHA-256 digest: {sha256_hex!r}")
    return sha256_hex


def blob_key(sha256_hex: str) -> str:
    """The storage key of a body with this SHA-256: ``blobs/ab/cd/<sha>.gz``."""
    sha = check_sha256(sha256_hex)
    return f"{BLOBS_DIR}/{sha[0:2]}/{sha[2:4]}/{sha}.gz"


def generation_name(writer_id: str, generation: int | None) -> str:
    """What a writer's files are named after: its id, and the generation its incarnation
    claimed if it has one (``shard-000-g00000003``)."""
    check_writer_id(writer_id)
    if generation is None:
        return writer_id
    if not isinstance(generation, int) or isinstance(generation, bool) or not 0 < generation < 10**8:
        raise ValueError(f"generation must be an int in 1..99999999, got {generation!r}")
    return f"{writer_id}-g{generation:08d}"


def pack_name(writer_id: str, seq: int) -> str:
    """Basename of the pack holding the bodies of a writer's ``seq``-th flush (``writer_id``:
    a :func:`generation_name`)."""
    if not isinstance(writer_id, str) or _NAME_RE.fullmatch(writer_id) is None:
        check_writer_id(writer_id)  # the error names the rule
    return f"{writer_id}-{seq:06d}.pack"


def pack_seq(name: str, writer_id: str) -> int | None:
    """The sequence number if ``name`` is a pack of exactly this writer, else None."""
    prefix = f"{writer_id}-"
    if not name.startswith(prefix) or not name.endswith(".pack"):
        return None
    digits = name[len(prefix) : -len(".pack")]
    if len(digits) < 6 or not digits.isdigit() or not digits.isascii():
        return None
    return int(digits)


def pack_key(pack: str, offset: int, length: int, sha256_hex: str) -> str:
    """The key of one body inside a pack (see the module docstring)."""
    return f"{PACKS_DIR}/{pack}:{offset}:{length}:{check_sha256(sha256_hex)}"


def parse_pack_key(key: str) -> tuple[str, int, int, str] | None:
    """``(pack path under OUT, offset, length, sha256)`` of a pack key; None for any other string."""
    m = _PACK_KEY_RE.fullmatch(key) if isinstance(key, str) else None
    if m is None:
        return None
    return f"{PACKS_DIR}/{m.group(1)}", int(m.group(2)), int(m.group(3)), m.group(4)


def blob_sha(key: str) -> str:
    """The SHA-256 a blob key names (a pack key or a :func:`blob_key`); ValueError if it is
    not a blob key."""
    packed = parse_pack_key(key)
    if packed is not None:
        return packed[3]
    m = _KEY_RE.fullmatch(key) if isinstance(key, str) else None
    if m is None or m.group(3)[0:2] != m.group(1) or m.group(3)[2:4] != m.group(2):
        raise ValueError(f"not a blob key: {key!r}")
    return m.group(3)


def check_writer_id(writer_id: str) -> str:
    """Return ``writer_id`` if it can name part files; ValueError otherwise."""
    if not isinstance(writer_id, str) or _WRITER_ID_RE.fullmatch(writer_id) is None:
        raise ValueError(
            f"writer_id must be 1-128 chars of [A-Za-z0-9_.=-] not starting with '.', "
            f"'_' or '-', got {writer_id!r}"
        )
    return writer_id


def part_name(writer_id: str, seq: int) -> str:
    """Basename of a writer's ``seq``-th part file."""
    return f"part-{writer_id}-{seq:06d}.parquet"


def part_seq(name: str, writer_id: str) -> int | None:
    """The sequence number if ``name`` is a part of exactly this writer, else None.

    Exact, not a prefix match: ``part-w0-x-000000.parquet`` belongs to ``w0-x``, not ``w0``.
    """
    prefix = f"part-{writer_id}-"
    if not name.startswith(prefix) or not name.endswith(".parquet"):
        return None
    digits = name[len(prefix) : -len(".parquet")]
    if len(digits) < 6 or not digits.isdigit() or not digits.isascii():
        return None
    return int(digits)


def shard_part_order(name: str, shard_id: str) -> tuple[int, int] | None:
    """(generation, sequence) if ``name`` is a part written by any incarnation of
    ``shard_id`` (``part-shard-000-g00000002-000007.parquet``; generation 0 for a part
    written before generations existed), else None: the order the shard wrote them in."""
    seq = part_seq(name, shard_id)
    if seq is not None:
        return 0, seq
    prefix = f"part-{shard_id}-g"
    if not name.startswith(prefix):
        return None
    gen, _, rest = name[len(prefix):].partition("-")
    seq = part_seq(f"part-x-{rest}", "x")
    if len(gen) != 8 or not gen.isdigit() or not gen.isascii() or seq is None:
        return None
    return int(gen), seq


def temp_name(name: str) -> str:
    """A unique hidden temporary basename to write ``name`` under before renaming it."""
    return f".{name}.{uuid.uuid4().hex}{_TEMP_SUFFIX}"


def temp_target(temp: str) -> str | None:
    """The basename a :func:`temp_name` was made for, or None if ``temp`` is not one."""
    m = _TEMP_RE.fullmatch(temp)
    return m.group(1) if m else None
