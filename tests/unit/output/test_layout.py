"""Names under OUT: blob keys come from hashes only, part names belong to one writer."""

from __future__ import annotations

import pytest

from crawler.output.layout import (
    PART_RE,
    blob_key,
    blob_sha,
    check_writer_id,
    part_name,
    part_seq,
    temp_name,
    temp_target,
)

from .helpers import sha


def test_blob_keys_are_derived_from_the_hash_only():
    h = sha(b"body")
    assert blob_key(h) == f"blobs/{h[:2]}/{h[2:4]}/{h}.gz"
    assert blob_sha(blob_key(h)) == h
    for bad in ("../../etc/passwd", h.upper(), h[:-1], h + "0", 123, None):
        with pytest.raises(ValueError):
            blob_key(bad)


@pytest.mark.parametrize(
    "key",
    ["blobs/../../x.gz", f"blobs/00/00/{sha(b'a')}.gz", "pages/part-w0-000000.parquet",
     f"/blobs/{sha(b'a')[:2]}/{sha(b'a')[2:4]}/{sha(b'a')}.gz", None],
)
def test_anything_else_is_not_a_blob_key(key):
    with pytest.raises(ValueError):
        blob_sha(key)


def test_part_names_belong_to_exactly_one_writer():
    assert part_name("w0", 7) == "part-w0-000007.parquet"
    assert PART_RE.fullmatch(part_name("w0", 7))
    assert PART_RE.fullmatch(part_name("w0", 1_234_567))  # past six digits, still a part
    assert part_seq("part-w0-000007.parquet", "w0") == 7
    assert part_seq("part-w0-x-000000.parquet", "w0") is None  # a prefix-sharing id is someone else
    assert part_seq("part-w0-x-000000.parquet", "w0-x") == 0
    assert part_seq("part-w0-00007.parquet", "w0") is None
    assert part_seq(".part-w0-000007.parquet", "w0") is None


def test_temp_names_are_hidden_unique_and_name_their_target():
    a, b = temp_name("part-w0-000000.parquet"), temp_name("part-w0-000000.parquet")
    assert a != b and a.startswith(".") and not PART_RE.fullmatch(a)
    assert temp_target(a) == "part-w0-000000.parquet"
    assert temp_target("part-w0-000000.parquet") is None
    assert temp_target(".part-w0-000000.parquet.deadbeef.tmp") is None


@pytest.mark.parametrize("bad", ["", ".hidden", "_x", "-x", "a/b", "a b", "x" * 129, 5])
def test_writer_ids_that_cannot_name_files_are_refused(bad):
    with pytest.raises(ValueError):
        check_writer_id(bad)


def test_writer_ids_that_can():
    for good in ("w0", "shard-003", "host.a=1", "x" * 128):
        assert check_writer_id(good) == good


def test_a_generation_goes_into_the_names_of_a_writers_files():
    from crawler.output.layout import generation_name, pack_key, pack_name, parse_pack_key

    name = generation_name("shard-000", 3)
    assert name == "shard-000-g00000003" and generation_name("shard-000", None) == "shard-000"
    assert part_name(name, 0) == "part-shard-000-g00000003-000000.parquet"
    assert part_seq("part-shard-000-g00000003-000000.parquet", "shard-000") is None  # not the plain writer's
    long = generation_name("x" * 128, 99_999_999)
    key = pack_key(pack_name(long, 1), 0, 10, "ab" * 32)
    assert parse_pack_key(key) == (f"blobs/packs/{long}-000001.pack", 0, 10, "ab" * 32)
    for bad in (0, -1, 10**8, True, "3"):
        with pytest.raises(ValueError):
            generation_name("shard-000", bad)


@pytest.mark.parametrize(("name", "expected"), [
    ("part-shard-000-000007.parquet", (0, 7)),  # written before generations existed
    ("part-shard-000-g00000002-000007.parquet", (2, 7)),
    ("part-shard-000-g00000010-000000.parquet", (10, 0)),
    ("part-shard-0001-g00000002-000007.parquet", None),  # another shard's
    ("part-shard-000-g0002-000007.parquet", None),  # not eight digits
    ("part-shard-000-g00000002-7.parquet", None),
    ("part-shard-000-g00000002-000007.pack", None),
    ("part-shard-000-gxxxxxxxx-000007.parquet", None),
])
def test_shard_part_order_reads_every_generation_of_one_shard(name, expected):
    from crawler.output.layout import shard_part_order

    assert shard_part_order(name, "shard-000") == expected
