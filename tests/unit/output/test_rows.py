"""Row values: what the writer stores for each OutcomeRow, and what it refuses."""

from __future__ import annotations

import dataclasses
import datetime as dt

import numpy as np
import pytest

from crawler.output import OutcomeRow, simhash_to_signed, simhash_to_unsigned
from crawler.output.rows import row_key, to_values
from crawler.output.schema import COLUMNS

from .helpers import T0, page


def value(row: OutcomeRow, column: str):
    return to_values(row)[COLUMNS.index(column)]


def test_timestamps_are_utc_milliseconds_from_aware_datetimes_or_unix_seconds():
    plus2 = dt.timezone(dt.timedelta(hours=2))
    local = dt.datetime(2024, 5, 1, 14, 0, 0, 250000, tzinfo=plus2)
    ms = int(T0.timestamp() * 1000) + 250
    assert value(page("http://a.test/", fetched_at=local)[0], "fetched_at") == ms
    assert value(page("http://a.test/", fetched_at=T0.timestamp() + 0.25)[0], "fetched_at") == ms


def test_simhash_is_stored_as_its_signed_view():
    fp = 0xF000_0000_0000_0001  # above 2**63
    stored = value(page("http://a.test/", simhash=fp)[0], "simhash")
    assert stored < 0 and simhash_to_unsigned(stored) == fp
    assert value(page("http://a.test/", simhash=stored)[0], "simhash") == stored  # already signed
    assert simhash_to_signed(simhash_to_unsigned(-1)) == -1
    with pytest.raises(ValueError):
        simhash_to_signed(2**64)


def test_numpy_scalars_are_accepted_as_plain_values():
    row, _ = page("http://a.test/", depth=np.int32(3), truncated=np.bool_(True))
    assert value(row, "depth") == 3 and value(row, "truncated") is True


def test_undecodable_web_text_is_made_valid_utf8():
    # aiohttp decodes raw header bytes with surrogateescape; Arrow needs valid UTF-8.
    row, _ = page("http://a.test/", etag="\udcff\udcfe-tag", error="bad \ud800 text")
    etag, error = value(row, "etag"), value(row, "error")
    assert etag.endswith("-tag") and error.startswith("bad ")
    etag.encode("utf-8"), error.encode("utf-8")  # would raise if still invalid


@pytest.mark.parametrize(
    "bad",
    [
        {"status": "200"},
        {"status": 2**40},
        {"depth": 1.5},
        {"attempts": True},
        {"simhash": 2**64},
        {"outcome": "ok"},
        {"content_sha256": "ABC"},
        {"fetched_at": dt.datetime(2024, 1, 1)},  # naive: which zone?
        {"fetched_at": 1e300},
        {"fetched_at": float("nan")},
        {"fetched_at": "2024-01-01"},
        {"dup_kind": "similar"},
        {"truncated": "no"},
        {"url": None},
        {"url": ""},
        {"host": b"a.test"},
    ],
)
def test_wrong_types_and_values_raise_valueerror(bad):
    row = dataclasses.replace(page("http://a.test/")[0], **bad)
    with pytest.raises(ValueError):
        to_values(row)


def test_only_outcome_rows_are_rows():
    with pytest.raises(TypeError):
        to_values({"url": "http://a.test/", "outcome": "fetched"})  # type: ignore[arg-type]


def test_idempotence_key_is_url_and_hash_or_url_and_outcome():
    with_body, _ = page("http://a.test/", b"v1")
    key = row_key(to_values(with_body))
    # Same URL and content: same key, whatever else differs.
    later = dataclasses.replace(with_body, fetched_at=T0 + dt.timedelta(hours=1), shard="s2")
    assert row_key(to_values(later)) == key
    assert row_key(to_values(page("http://a.test/", b"v2")[0])) != key
    assert row_key(to_values(page("http://b.test/", b"v1")[0])) != key
    failed = OutcomeRow(url="http://a.test/f", outcome="failed")
    keys = {row_key(to_values(r)) for r in (
        failed,
        dataclasses.replace(failed, error="another reason"),
        dataclasses.replace(failed, outcome="http_error"),
        dataclasses.replace(failed, url="http://a.test/g"),
    )}
    assert len(keys) == 3
    assert row_key(to_values(dataclasses.replace(failed, error="x"))) in keys
