"""Crawl output: the Parquet page dataset and the blob store of page bodies.

This is the public contract indexers read (see :mod:`crawler.output.layout`)::

    OUT/pages/part-<name>-<seq:06d>.parquet   one OutcomeRow per URL outcome, zstd
    OUT/blobs/packs/<name>-<seq:06d>.pack     the bodies of one flush, a zstd frame each
    OUT/blobs/<sha[0:2]>/<sha[2:4]>/<sha>.gz  one gzip file per body (older outputs)

(``<name>``: the writer's id, with a shard's generation: ``shard-000-g00000003``.)

Modules, each importing only the ones before it (nothing imports back up)::

    schema   OutcomeRow (the one row type), PAGES_SCHEMA derived from it, OUTCOMES...
    layout   paths and names: pages/, blobs/, part files, packs, blob keys, temp names
    fs       open_fs, local/remote, atomic publication (fsync + rename, or one PUT)
    blobs    BlobStore                                       (layout, fs)
    rows     OutcomeRow -> checked Arrow values               (schema, layout)
    writer   ResultWriter                                    (all of the above)
    reader   read_pages, summarize, compact_pages            (schema, layout, fs)
"""

from crawler.output.blobs import DEFAULT_COMPRESSLEVEL, BlobStore
from crawler.output.fs import open_fs
from crawler.output.layout import blob_key
from crawler.output.reader import compact_pages, dedupe_pages, read_pages, summarize
from crawler.output.schema import (
    DUP_KINDS,
    OUTCOMES,
    PAGES_SCHEMA,
    OutcomeRow,
    simhash_to_signed,
    simhash_to_unsigned,
)
from crawler.output.writer import ResultWriter

__all__ = [
    "DEFAULT_COMPRESSLEVEL",
    "DUP_KINDS",
    "OUTCOMES",
    "PAGES_SCHEMA",
    "BlobStore",
    "OutcomeRow",
    "ResultWriter",
    "blob_key",
    "compact_pages",
    "dedupe_pages",
    "open_fs",
    "read_pages",
    "simhash_to_signed",
    "simhash_to_unsigned",
    "summarize",
]
