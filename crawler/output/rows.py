"""From :class:`~crawler.output.schema.OutcomeRow` to Arrow column values, checked.

Rows carry text from the web (header values, error messages, URLs): such text is cleaned
so one bad value cannot make a whole part file unwritable (docs/invariants.md #7). A value
of the wrong type or out of range is a programming error and raises ValueError, before
the writer buffers anything of the call.
"""

from __future__ import annotations

import datetime as _dt
import math
import numbers
import operator
from collections.abc import Callable
from typing import Any, cast

import numpy as np
import pyarrow as pa
import xxhash

from crawler.output.layout import check_sha256
from crawler.output.schema import (
    COLUMNS,
    DUP_KINDS,
    OUTCOMES,
    PAGES_SCHEMA,
    OutcomeRow,
    simhash_to_signed,
)

__all__ = ["I_BLOB", "I_RAW_BLOB", "I_RAW_SHA", "I_SHA", "I_URL", "build_table", "row_key", "to_values"]

I_URL = COLUMNS.index("url")
I_SHA = COLUMNS.index("content_sha256")
I_BLOB = COLUMNS.index("blob_key")
I_RAW_SHA = COLUMNS.index("raw_sha256")
I_RAW_BLOB = COLUMNS.index("raw_blob_key")
_I_OUTCOME = COLUMNS.index("outcome")
_I_SEQ = COLUMNS.index("fetch_seq")
_I_DUPKIND = COLUMNS.index("dup_kind")

_I32_MIN, _I32_MAX = -(2**31), 2**31 - 1
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
_MS = _dt.timedelta(milliseconds=1)


def _clean_str(v: str) -> str:
    """Make a string encodable as UTF-8 (Arrow requires it).

    Header values and error texts from the web may carry lone surrogates (aiohttp decodes
    with ``surrogateescape``); one such value must not make a whole file unwritable.
    """
    try:
        v.encode("utf-8")
        return v
    except UnicodeEncodeError:
        try:
            return v.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        except UnicodeEncodeError:
            return v.encode("utf-8", "replace").decode("utf-8")


def _conv_str(name: str, v: Any) -> str:
    if type(v) is not str:
        if not isinstance(v, str):
            raise ValueError(f"column {name!r} takes a str, got {type(v).__name__}")
        v = str(v)
    return v if v.isascii() else _clean_str(v)


def _as_int(name: str, v: Any) -> int:
    if type(v) is int:
        return v
    if isinstance(v, (bool, np.bool_)):
        raise ValueError(f"column {name!r} takes an int, got a bool")
    try:
        return operator.index(v)  # ints and numpy integers, not floats or strings
    except TypeError as exc:
        raise ValueError(f"column {name!r} takes an int, got {type(v).__name__}") from exc


def _conv_i32(name: str, v: Any) -> int:
    n = _as_int(name, v)
    if not _I32_MIN <= n <= _I32_MAX:
        raise ValueError(f"column {name!r} value {n} does not fit int32")
    return n


def _conv_i64(name: str, v: Any) -> int:
    n = _as_int(name, v)
    if not _I64_MIN <= n <= _I64_MAX:
        raise ValueError(f"column {name!r} value {n} does not fit int64")
    return n


def _conv_simhash(name: str, v: Any) -> int:
    try:
        return simhash_to_signed(_as_int(name, v))
    except ValueError as exc:
        raise ValueError(f"column {name!r}: {exc}") from exc


def _conv_bool(name: str, v: Any) -> bool:
    if type(v) is bool:
        return v
    if isinstance(v, np.bool_):
        return bool(v)
    raise ValueError(f"column {name!r} takes a bool, got {type(v).__name__}")


def _conv_ts(name: str, v: Any) -> int:
    """Timestamps are stored as integer milliseconds since the Unix epoch, UTC."""
    if isinstance(v, _dt.datetime):
        if v.tzinfo is None or v.utcoffset() is None:
            raise ValueError(f"column {name!r} needs a timezone-aware datetime, got {v!r}")
        return (v - _EPOCH) // _MS
    if isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_)):
        # Unix seconds, as time.time() returns. Checked here so that a value Arrow cannot
        # hold fails this add() call instead of every later flush.
        secs = cast(float, v)  # any numbers.Real (int, float, numpy, Fraction), whose stubs have no arithmetic
        if not math.isfinite(secs) or not _I64_MIN <= secs * 1000 <= _I64_MAX:
            raise ValueError(f"column {name!r} got an out-of-range timestamp {v!r}")
        return int(round(secs * 1000))
    raise ValueError(
        f"column {name!r} takes an aware datetime or Unix seconds, got {type(v).__name__}"
    )


_CONVERTERS: dict[pa.DataType, Callable[[str, Any], Any]] = {
    pa.string(): _conv_str,
    pa.int32(): _conv_i32,
    pa.int64(): _conv_i64,
    pa.bool_(): _conv_bool,
    pa.timestamp("ms", tz="UTC"): _conv_ts,
}
# A schema column of a type with no converter fails here, at import, not at the first row.
_CONV: tuple[Callable[[str, Any], Any], ...] = tuple(
    _conv_simhash if f.name == "simhash" else _CONVERTERS[f.type] for f in PAGES_SCHEMA
)
_GET = operator.attrgetter(*COLUMNS)


def to_values(row: OutcomeRow) -> list[Any]:
    """Check one row and return its storage values in schema order (ValueError if bad).

    Timestamps become UTC milliseconds, the SimHash its signed view, and text is made
    valid UTF-8. TypeError if ``row`` is not an :class:`OutcomeRow`.
    """
    if type(row) is not OutcomeRow:
        raise TypeError(f"result rows are OutcomeRow, got {type(row).__name__}")
    out: list[Any] = [v if v is None else conv(name, v) for name, conv, v in zip(COLUMNS, _CONV, _GET(row))]
    if not out[I_URL]:
        raise ValueError(f"result row needs a url: {row!r}")
    if out[_I_OUTCOME] not in OUTCOMES:
        raise ValueError(f"outcome must be one of {OUTCOMES}, got {out[_I_OUTCOME]!r}")
    if out[I_SHA] is not None:
        check_sha256(out[I_SHA])
    if out[I_RAW_SHA] is not None:
        check_sha256(out[I_RAW_SHA])
    if out[_I_DUPKIND] is not None and out[_I_DUPKIND] not in DUP_KINDS:
        raise ValueError(f"dup_kind must be one of {DUP_KINDS} or None, got {out[_I_DUPKIND]!r}")
    return out


def row_key(vals: list[Any]) -> int:
    """Idempotence key: (url, fetch_seq, sha), or (url, fetch_seq, outcome) when there is
    no body hash: a fetch written twice (across a crash) is one row; a recrawl is another."""
    sha = vals[I_SHA]
    if sha is not None:
        text = f"{vals[I_URL]}\x00{vals[_I_SEQ]}\x00{sha}"
    else:
        text = f"{vals[I_URL]}\x00{vals[_I_SEQ]}\x00\x01{vals[_I_OUTCOME]}"
    # 128-bit digest: a collision (which would drop a real row) is out of reach in practice.
    return xxhash.xxh3_128_intdigest(text.encode("utf-8"))


def build_table(cols: list[list[Any]]) -> pa.Table:
    """A PAGES_SCHEMA table from column lists of :func:`to_values` outputs."""
    arrays = [pa.array(col, type=field.type) for col, field in zip(cols, PAGES_SCHEMA)]
    return pa.Table.from_arrays(arrays, schema=PAGES_SCHEMA)
