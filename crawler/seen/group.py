"""The seen set split over N shards by URL hash: one call per shard, verdicts in order.

A crawl's seen set is sharded (each shard a :class:`~crawler.seen.set.SeenSet`, on a
cluster one per actor). :class:`SeenGroup` is the one place that splits a batch of URLs
by :func:`~crawler.seen.hashing.shard_of`, asks every shard that owns part of the batch
once, concurrently, and puts the verdicts back in input order. It knows nothing about
Ray: a shard is any async callable from a list of URL hashes to one verdict per hash,
so the splitting is tested with plain fakes and the Ray client is a thin shell over it.

Invariant: every URL's verdict comes from the shard that owns its hash, and a URL
repeated in one batch goes to the same shard in the same call (so, as with a single
SeenSet, only its first position is novel). A shard that fails, or answers with the
wrong number of verdicts, fails the whole call: the caller cannot tell which URLs that
shard marked, so it must not drop any (the link router then delivers the batch
unfiltered and each owner's durable store de-duplicates).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from crawler.errors import ConfigError
from crawler.seen.hashing import shard_of, url_hash64

__all__ = ["ForgetCall", "SeenGroup", "ShardCall"]

ShardCall = Callable[[list[int]], Awaitable[Sequence[bool]]]
"""One seen shard: URL hashes in, one "novel" verdict per hash out (``check_and_add_hashes``)."""

ForgetCall = Callable[[list[int]], Awaitable[int]]
"""One seen shard's ``forget_hashes``: URL hashes in, how many marks were undone out."""


class SeenGroup:
    """Which URLs are new, asked of the seen shards that own them.

    Args:
        shards: one callable per shard, in shard order (shard ``i`` owns the hashes with
            ``shard_of(h, len(shards)) == i``; the order must be the same everywhere the
            crawl asks, or a URL would be checked against a shard that never saw it).
            Each returns an awaitable (a coroutine, a future, a Ray ``ObjectRef``).
    """

    def __init__(self, shards: Sequence[ShardCall], forget: Sequence[ForgetCall] = ()) -> None:
        if not shards:
            raise ConfigError("seen shards: a seen group needs at least one shard")
        if forget and len(forget) != len(shards):
            raise ConfigError("seen shards: give one forget call per shard, or none")
        self._shards = list(shards)
        self._forget = list(forget)

    def _split(self, urls: Sequence[str]) -> tuple[list[int], dict[int, list[int]]]:
        n = len(self._shards)
        hashes = [url_hash64(u) for u in urls]
        parts: dict[int, list[int]] = {}
        for i, h in enumerate(hashes):
            parts.setdefault(shard_of(h, n), []).append(i)
        return hashes, parts

    async def forget(self, urls: Sequence[str]) -> int:
        """Undo the marks :meth:`check_and_add` just made for ``urls`` (their delivery
        failed; see :meth:`crawler.seen.set.SeenSet.forget_hashes`). Returns how many
        marks were undone."""
        if not self._forget:
            raise ConfigError("seen group: built without forget calls")
        hashes, parts = self._split(urls)
        done = await asyncio.gather(*(self._forget[s]([hashes[i] for i in pos]) for s, pos in parts.items()))
        return sum(done)

    def __len__(self) -> int:
        """Number of shards."""
        return len(self._shards)

    async def check_and_add(self, urls: Sequence[str]) -> list[bool]:
        """For each URL, True if no shard had seen it (it is now marked seen).

        One call per shard owning at least one of the URLs, all concurrently. The first
        shard exception propagates as soon as it is raised (the other calls are not
        cancelled: they may still mark their URLs seen); a shard that answers with the
        wrong number of verdicts raises ValueError.
        """
        hashes, parts = self._split(urls)
        owners = list(parts)
        answers = await asyncio.gather(*(self._shards[s]([hashes[i] for i in parts[s]]) for s in owners))
        out = [False] * len(hashes)
        for s, answer in zip(owners, answers):
            positions = parts[s]
            if len(answer) != len(positions):
                # zip would leave the unanswered URLs at False ("seen"), i.e. drop them.
                raise ValueError(f"seen shard {s} answered {len(answer)} verdicts for {len(positions)} URLs")
            for i, novel in zip(positions, answer):
                out[i] = novel
        return out
