"""The seen-URL set: which URLs a crawl has already enqueued (docs/invariants.md #3).

A URL is marked seen when it is enqueued and is never fetched twice in one crawl pass.
The set keeps 64-bit URL hashes, a Bloom filter in front of an exact store, sharded by
hash over N seen shards. Modules, each importing only those above it:

* :mod:`~crawler.seen.hashing`: :func:`url_hash64`, :func:`shard_of`;
* :mod:`~crawler.seen.bloom`: the Bloom backends (pybloom-live, optional rbloom);
* :mod:`~crawler.seen.store`: the exact stores (memory, SQLite) and the hot cache;
* :mod:`~crawler.seen.snapshot`: the ``<path>.bloom`` file and the snapshot blob;
* :mod:`~crawler.seen.ondisk`: :class:`SeenOnDisk`, the files of a set with a path (and
  their stamps) and its exact check against SQLite;
* :mod:`~crawler.seen.inmemory`: the checks without a database (exact in memory,
  Bloom-only);
* :mod:`~crawler.seen.seenstats`: the set's counters and figures;
* :mod:`~crawler.seen.set`: :class:`SeenSet`, one shard's set;
* :mod:`~crawler.seen.group`: :class:`SeenGroup`, a batch split over the shards.
"""

from crawler.seen.bloom import BLOOM_BACKENDS, DEFAULT_BLOOM
from crawler.seen.group import ForgetCall, SeenGroup, ShardCall
from crawler.seen.hashing import shard_of, url_hash64
from crawler.seen.set import SeenSet

__all__ = ["BLOOM_BACKENDS", "DEFAULT_BLOOM", "ForgetCall", "SeenGroup", "SeenSet", "ShardCall", "shard_of", "url_hash64"]
