"""The crawl's duplicate-content index, sharded: exact (SHA-256) and near (SimHash) duplicates.

One index answers, per fetched page and in order, whether its body was seen before
(``exact``), whether its text is within Hamming distance ``k`` of an original's
(``near``), or neither; only originals are indexed as near-duplicate targets, so a
verdict always names an original. It is split over ``shards`` :class:`ContentShard`
objects so that its memory is spread over processes and machines (docs/invariants.md #8):

* exact entries by the first byte of the SHA-256;
* the ``tables`` permuted SimHash tables (:class:`TableLayout`) by table and by the top
  bits of the table's key: one lookup probes one shard per table, and a batch of lookups
  is one call per shard.

Memory per indexed page, stated (``benchmarks/contentindex.py`` measures it): an exact
entry is 16 B of SHA-256 (128 bits) + an 8 B reference + a 1 B flag; a near entry is 8 B
of fingerprint + the 8 B reference, once per table. With 4 tables an original costs
89 B, a near-duplicate 25 B. No URL is kept: the reference is the page's ``url_hash``
(crawler.urls.url_hash, the row's public id), and a verdict names the original by it
(the ``dup_of`` column; join it to ``url_hash`` to get the URL).

Entries are numpy arrays in sorted runs (crawler.content.sortedruns: a log-structured
merge; each batch's additions become a run; runs of similar size are merged), so a lookup
is a binary search per run, vectorized over the batch; the tables' bit permutations are
crawler.content.simhashtables. Each shard appends its new entries to a log file as they
come (no copy kept in memory; the file is crawler.content.contentlog),
:meth:`ContentShard.save` makes them durable (fsync: only what changed since the last save
is written), and a restarted shard rebuilds its runs from it.

:class:`ContentIndexGroup` is the coordinator: it splits a batch into one request per
shard and resolves the replies in order. Verdicts depend on every earlier batch, so one
group serializes its batches (the caller runs one group per crawl: the in-process
service, or the Ray content actor).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

# The log and the table layout live in their own modules; their public names stay
# importable from here (crawler.session.preflight reads read_log_stamp from this module).
from crawler.content.contentlog import CONTENT_FIX, ShardLog, read_log_stamp
from crawler.content.simhashtables import NO_HIT, TableLayout
from crawler.content.sortedruns import SortedRuns
from crawler.urls import url_hash

__all__ = [
    "CONTENT_FIX",
    "NO_HIT",
    "ContentIndexGroup",
    "ContentShard",
    "ShardReply",
    "ShardRequest",
    "TableLayout",
    "read_log_stamp",
    "ref_hex",
    "ref_of",
]

_U64 = np.uint64
_MASK64 = (1 << 64) - 1


def ref_of(url: str) -> int:
    """The compact reference of a page: its ``url_hash`` as an unsigned 64-bit int."""
    return int(url_hash(url), 16)


def ref_hex(ref: int) -> str:
    """A reference as the row shows it (the original's ``url_hash``)."""
    return f"{ref:016x}"


#: Four columns of exact entries: k1, k2, ref, near flag.
_Columns4 = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


@dataclass
class ShardRequest:
    """One batch's work for one shard: additions first (from the previous batch), then
    exact lookups, then near probes. Plain numpy arrays (cheap to ship between processes)."""

    add_exact: _Columns4 | None = None  # k1, k2, ref, near flag
    add_near: list[tuple[int, np.ndarray, np.ndarray]] = field(default_factory=list)  # (table, keys, refs)
    exact: tuple[np.ndarray, np.ndarray] | None = None  # k1, k2
    near: list[tuple[int, np.ndarray]] = field(default_factory=list)  # (table, keys)


@dataclass
class ShardReply:
    """Answers in request order: exact (found, ref, near flag) and, per near probe list,
    (best distance or NO_HIT, that entry's ref, candidates checked)."""

    exact: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    near: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=list)


class ContentShard:
    """One shard of the index: its slice of the exact entries and of every table.

    With ``path`` it keeps an append-only log there (crawler.content.contentlog): additions
    are appended as they come, :meth:`save` makes them durable, and a new shard on the same
    path reads it back. A torn last record (a crash between two saves) is cut off when the
    log is opened, so what is appended next starts on a record boundary. With ``identity``
    the log's first record is its stamp (crawler.recovery.stamps): another crawl's log is
    refused, and a log made before stamps is rewritten once with the stamp first.
    """

    def __init__(self, k: int = 3, tables: int = 4, path: str | None = None, identity: str | None = None) -> None:
        self.layout = TableLayout(k, tables, 1)
        self.path = path
        self.exact = SortedRuns([_U64, _U64, np.uint8])  # key k1 -> k2, ref, near flag
        self.near = [SortedRuns([_U64]) for _ in range(tables)]  # key -> ref
        self._log: ShardLog | None = ShardLog(path) if path else None
        self.lookups = 0
        self.candidates = 0
        if self._log is not None:
            found = self._log.open(identity, tables)
            if found.exact is not None:
                self.exact.add(found.exact[0], found.exact[1:])
            for t, (keys, refs) in found.near.items():
                self.near[t].add(keys, [refs])

    def call(self, req: ShardRequest) -> ShardReply:
        """Apply the request's additions, then answer its lookups."""
        if req.add_exact is not None and len(req.add_exact[0]):
            k1, k2, ref, flag = req.add_exact
            self.exact.add(k1, [k2, ref, flag])
            if self._log is not None:
                self._log.append_exact([k1, k2, ref, flag])
        for t, keys, refs in req.add_near:
            if len(keys):
                self.near[t].add(keys, [refs])
                if self._log is not None:
                    self._log.append_near(t, [keys, refs])
        reply = ShardReply()
        if req.exact is not None:
            reply.exact = self._exact(*req.exact)
        for t, keys in req.near:
            reply.near.append(self._near(t, keys))
        return reply

    def _exact(self, k1: np.ndarray, k2: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        found = np.zeros(len(k1), np.bool_)
        ref = np.zeros(len(k1), _U64)
        flag = np.zeros(len(k1), np.uint8)
        q, _, (ck2, cref, cflag) = self.exact.within(k1, k1)
        hit = ck2 == k2[q]
        if hit.any():
            # The earliest entry wins (runs are oldest first; within a run, stable order).
            q, cref, cflag = q[hit][::-1], cref[hit][::-1], cflag[hit][::-1]
            found[q] = True
            ref[q] = cref
            flag[q] = cflag
        return found, ref, flag

    def _near(self, t: int, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        lo, hi = self.layout.bounds(t, keys)
        q, ck, (cref,) = self.near[t].within(lo, hi)
        n = len(keys)
        checked = np.bincount(q, minlength=n).astype(np.int32)
        best = np.full(n, NO_HIT, np.uint8)
        bref = np.zeros(n, _U64)
        self.lookups += n
        self.candidates += len(q)
        if len(q):
            dist = np.bitwise_count(ck ^ keys[q]).astype(np.uint8)
            ok = dist <= self.layout.k
            if ok.any():
                q, dist, cref = q[ok], dist[ok], cref[ok]
                # Nearest first, then the smaller reference: the same answer wherever it runs.
                order = np.lexsort((cref, dist, q))
                q, dist, cref = q[order], dist[order], cref[order]
                first = np.ones(len(q), np.bool_)
                first[1:] = q[1:] != q[:-1]
                best[q[first]] = dist[first]
                bref[q[first]] = cref[first]
        return best, bref, checked

    # -- durability: the log (crawler.content.contentlog) --------------------------------

    def save(self) -> None:
        """Make the entries added since the last save durable (flush + fsync of the log)."""
        if self._log is not None:
            self._log.save()

    def close(self) -> None:
        """Save and close the log."""
        if self._log is not None:
            self._log.close()

    def stats(self) -> dict[str, int]:
        """Entries and bytes held (array payload), lookups and candidates checked."""
        return {
            "exact_entries": len(self.exact),
            "near_entries": sum(len(r) for r in self.near),
            "bytes": self.exact.nbytes() + sum(r.nbytes() for r in self.near),
            "lookups": self.lookups,
            "candidates": self.candidates,
        }


def _sha_words(sha_hex: str) -> tuple[int, int]:
    """The first 128 bits of a hex SHA-256 as two ints (any other string is hashed first)."""
    if len(sha_hex) == 64:
        try:
            raw = bytes.fromhex(sha_hex)
        except ValueError:
            raw = hashlib.sha256(sha_hex.encode("utf-8", "surrogatepass")).digest()
    else:
        raw = hashlib.sha256(sha_hex.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(raw[:8], "big"), int.from_bytes(raw[8:16], "big")


@dataclass
class _Plan:
    refs: list[int]
    k1: np.ndarray
    k2: np.ndarray
    fps: list[int | None]
    exact_at: list[tuple[np.ndarray, np.ndarray]]  # per shard: (item index, position) of its lookups
    near_at: list[list[tuple[int, np.ndarray]]]  # per shard: (table, item indexes) per probe list


class ContentIndexGroup:
    """Coordinates ``shards`` shards: :meth:`plan` a batch, send each shard its request,
    :meth:`resolve` the replies. Additions ride on the next batch's requests (one call per
    shard per batch); :meth:`pending_requests` hands them over when no batch follows."""

    def __init__(self, k: int = 3, tables: int = 4, shards: int = 1) -> None:
        self.layout = TableLayout(k, tables, shards)
        self.shards = shards
        self._pending: list[ShardRequest] = [ShardRequest() for _ in range(shards)]
        self.originals = 0
        self.exact_dups = 0
        self.near_dups = 0

    def exact_owner(self, k1: np.ndarray) -> np.ndarray:
        return ((k1 >> _U64(56)).astype(np.int64)) % self.shards

    def plan(self, items: Sequence[tuple[str, str, int | None]]) -> tuple[_Plan, list[ShardRequest]]:
        """Requests for ``(url, sha256_hex, simhash_or_None)`` items, one per shard."""
        n = len(items)
        words = [_sha_words(sha) for _, sha, _ in items]
        k1 = np.fromiter((w[0] for w in words), _U64, n)
        k2 = np.fromiter((w[1] for w in words), _U64, n)
        fps: list[int | None] = []
        for _, _, fp in items:
            fp = None if fp is None else fp & _MASK64
            fps.append(fp or None)  # a fingerprint of 0 means "no words": exact check only
        reqs, self._pending = self._pending, [ShardRequest() for _ in range(self.shards)]
        owner = self.exact_owner(k1)
        exact_at = []
        for s in range(self.shards):
            idx = np.flatnonzero(owner == s)
            reqs[s].exact = (k1[idx], k2[idx])
            exact_at.append((idx, np.arange(len(idx))))
        near_at: list[list[tuple[int, np.ndarray]]] = [[] for _ in range(self.shards)]
        with_fp = np.array([i for i, f in enumerate(fps) if f is not None], np.int64)
        if len(with_fp):
            fp_arr = np.array([fps[i] for i in with_fp], _U64)
            for t in range(self.layout.tables):
                keys = self.layout.key(t, fp_arr)
                own = self.layout.owner(t, keys)
                for s in range(self.shards):
                    sel = np.flatnonzero(own == s)
                    if len(sel):
                        reqs[s].near.append((t, keys[sel]))
                        near_at[s].append((t, with_fp[sel]))
        refs = [ref_of(url) for url, _, _ in items]
        return _Plan(refs, k1, k2, fps, exact_at, near_at), reqs

    def resolve(self, plan: _Plan, replies: Sequence[ShardReply]) -> list[tuple[str | None, str | None]]:
        """Verdicts ``(dup_kind, original's url_hash)`` in item order; queues the additions."""
        n = len(plan.refs)
        found, eref, eflag, best, bref = _gather(plan, replies)
        out: list[tuple[str | None, str | None]] = []
        batch_sha: dict[tuple[int, int], tuple[str | None, int]] = {}  # verdict of a body seen in this batch
        batch_fps = np.zeros(n, _U64)  # originals of this batch with a fingerprint
        batch_refs: list[int] = []
        m = 0
        add_exact: list[tuple[int, int, int, int]] = []
        add_near: list[tuple[int, int]] = []
        k = self.layout.k
        k1s, k2s = plan.k1.tolist(), plan.k2.tolist()
        for i in range(n):
            key = (k1s[i], k2s[i])
            own = plan.refs[i]
            # A page is never a duplicate of itself: a recrawl of an unchanged (or slightly
            # changed) page, or a check retried after a service restart, is not a copy.
            if found[i] and int(eref[i]) == own:
                out.append((None, None))
                continue
            if found[i]:
                kind = "near" if eflag[i] else "exact"
                out.append((kind, ref_hex(int(eref[i]))))
                self._count(kind)
                continue
            earlier = batch_sha.get(key)
            if earlier is not None and earlier[1] == own:
                out.append((None, None))
                continue
            if earlier is not None:
                kind = earlier[0] or "exact"
                out.append((kind, ref_hex(earlier[1])))
                self._count(kind)
                continue
            fp = plan.fps[i]
            hit: tuple[int, int] | None = None  # (distance, ref)
            if fp is not None:
                if best[i] != NO_HIT:
                    hit = (int(best[i]), int(bref[i]))
                if m:  # originals earlier in this batch
                    dist = np.bitwise_count(batch_fps[:m] ^ _U64(fp))
                    j = int(dist.argmin())
                    d = int(dist[j])
                    if d <= k and (hit is None or d < hit[0]):
                        hit = (d, batch_refs[j])
            if hit is not None and hit[1] == own:  # its own earlier version, slightly changed
                out.append((None, None))
                batch_sha[key] = (None, own)
                add_exact.append((key[0], key[1], own, 0))
                continue
            if hit is not None:
                out.append(("near", ref_hex(hit[1])))
                self._count("near")
                batch_sha[key] = ("near", hit[1])
                add_exact.append((key[0], key[1], hit[1], 1))  # an exact copy of it is near the same original
                continue
            ref = own
            out.append((None, None))
            self.originals += 1
            batch_sha[key] = (None, ref)
            add_exact.append((key[0], key[1], ref, 0))
            if fp is not None:
                batch_fps[m] = fp
                m += 1
                batch_refs.append(ref)
                add_near.append((fp, ref))
        self._queue(add_exact, add_near)
        return out

    def _count(self, kind: str) -> None:
        if kind == "exact":
            self.exact_dups += 1
        else:
            self.near_dups += 1

    def _queue(self, add_exact: list[tuple[int, int, int, int]], add_near: list[tuple[int, int]]) -> None:
        if add_exact:
            cols = list(zip(*add_exact))
            k1 = np.array(cols[0], _U64)
            k2, ref, flag = np.array(cols[1], _U64), np.array(cols[2], _U64), np.array(cols[3], np.uint8)
            owner = self.exact_owner(k1)
            for s in range(self.shards):
                sel = np.flatnonzero(owner == s)
                if len(sel):
                    self._pending[s].add_exact = _cat(self._pending[s].add_exact, (k1[sel], k2[sel], ref[sel], flag[sel]))
        if add_near:
            fps = np.array([f for f, _ in add_near], _U64)
            refs = np.array([r for _, r in add_near], _U64)
            for t in range(self.layout.tables):
                keys = self.layout.key(t, fps)
                own = self.layout.owner(t, keys)
                for s in range(self.shards):
                    sel = np.flatnonzero(own == s)
                    if len(sel):
                        self._pending[s].add_near.append((t, keys[sel], refs[sel]))

    def pending_requests(self) -> list[ShardRequest | None]:
        """Requests carrying the queued additions only (None for a shard with none); call
        before saving, reading stats or closing, and send each to its shard."""
        reqs, self._pending = self._pending, [ShardRequest() for _ in range(self.shards)]
        return [r if (r.add_exact is not None or r.add_near) else None for r in reqs]

    def stats(self, shard_stats: Sequence[dict[str, int]]) -> dict[str, float | int]:
        """The crawl's content-index totals, with the shards' own counters."""
        lookups = sum(s["lookups"] for s in shard_stats)
        cands = sum(s["candidates"] for s in shard_stats)
        return {
            "originals": self.originals,
            "exact_dups": self.exact_dups,
            "near_dups": self.near_dups,
            "shards": self.shards,
            "tables": self.layout.tables,
            "exact_entries": sum(s["exact_entries"] for s in shard_stats),
            "near_index_entries": sum(s["near_entries"] for s in shard_stats),
            "bytes": sum(s["bytes"] for s in shard_stats),
            "table_probes": lookups,
            "candidates_checked_mean": cands / lookups * self.layout.tables if lookups else 0.0,
        }


def _gather(
    plan: _Plan, replies: Sequence[ShardReply]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The shards' replies per item: exact (found, ref, near flag), and the nearest
    neighbour over every table (distance or NO_HIT, its ref; ties: the smaller ref)."""
    n = len(plan.refs)
    found = np.zeros(n, np.bool_)
    eref = np.zeros(n, _U64)
    eflag = np.zeros(n, np.uint8)
    best = np.full(n, NO_HIT, np.int64)
    bref = np.zeros(n, _U64)
    for s, reply in enumerate(replies):
        idx, _ = plan.exact_at[s]
        if reply.exact is not None and len(idx):
            f, r, fl = reply.exact
            found[idx], eref[idx], eflag[idx] = f, r, fl
        for (_t, items), (dist, ref, _) in zip(plan.near_at[s], reply.near):
            d = dist.astype(np.int64)
            better = (d < best[items]) | ((d == best[items]) & (d != NO_HIT) & (ref < bref[items]))
            best[items[better]] = d[better]
            bref[items[better]] = ref[better]
    return found, eref, eflag, best, bref


def _cat(a: _Columns4 | None, b: _Columns4) -> _Columns4:
    if a is None:
        return b
    return (
        np.concatenate([a[0], b[0]]),
        np.concatenate([a[1], b[1]]),
        np.concatenate([a[2], b[2]]),
        np.concatenate([a[3], b[3]]),
    )
