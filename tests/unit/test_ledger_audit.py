"""The ledger's audit (crawler.session.ledgeraudit): the seen sets' marks against the shards'
stores, key by key in bounded pages, and lost URLs named from the output
(crawler.session.relink) and queued again at their owners."""

from __future__ import annotations

import asyncio
import hashlib
import random

from crawler.config import settings as config
from crawler.frontier.store import FrontierStore
from crawler.frontier.urlitem import UrlItem
from crawler.output import OutcomeRow, ResultWriter
from crawler.seen import SeenSet, shard_of, url_hash64
from crawler.session import ledgeraudit, relink

SIGNED = 1 << 63


def _signed(h: int) -> int:
    return h - (1 << 64) if h >= SIGNED else h


def _pages(keys):
    ordered = sorted(keys)
    calls = []

    async def fetch(after, limit):
        calls.append(limit)
        return [k for k in ordered if after is None or k > after][:limit]

    fetch.calls = calls  # type: ignore[attr-defined]
    return fetch


def test_marks_no_store_holds_are_found_in_small_pages_whatever_the_split():
    rng = random.Random(7)
    universe = [rng.randrange(-SIGNED, SIGNED) for _ in range(3000)]
    held = set(universe[:2700])
    marked = set(universe[300:])  # 300 held without a mark, 300 marked and not held
    # Seen sets split by hash range, shards by anything: here at random.
    seen_parts = [{k for k in marked if shard_of(k % (1 << 64), 3) == i} for i in range(3)]
    held_parts = [set(), set(), set()]
    for k in held:
        held_parts[rng.randrange(3)].add(k)
    seen = [_pages(p) for p in seen_parts]
    stores = [_pages(p) for p in held_parts]
    found = asyncio.run(ledgeraudit.audit_marks(seen, stores, page=37, keep=100))
    lost = marked - held
    assert (found.marks, found.held, found.lost, found.unmarked) == (2700, 2700, len(lost), 300)
    assert len(found.lost_keys) == 100 and set(found.lost_keys) <= lost
    assert all(max(f.calls) == 37 for f in seen + stores)  # bounded: never more than a page per call


def test_nothing_lost_when_every_mark_is_held_and_empty_stores_are_fine():
    keys = list(range(-50, 50))
    found = asyncio.run(ledgeraudit.audit_marks([_pages(keys[:60]), _pages(keys[60:])], [_pages(keys), _pages([])], page=8))
    assert (found.marks, found.held, found.lost, found.unmarked) == (100, 100, 0, 0)
    assert asyncio.run(ledgeraudit.audit_marks([_pages([])], [_pages([])])).marks == 0


def test_the_real_stores_are_read_in_key_order_also_once_closed(tmp_path):
    urls = [f"http://h{i % 7}.test/p{i}" for i in range(400)]
    seen = [SeenSet(1000, path=str(tmp_path / f"seen-{i}.sqlite")) for i in range(2)]
    for u in urls:
        h = url_hash64(u)
        seen[shard_of(h, 2)].check_and_add_hashes([h])
    stores = [FrontierStore(str(tmp_path / f"shard-{i}.sqlite")) for i in range(2)]
    lost = urls[::50]
    for i, s in enumerate(stores):
        s.add([UrlItem(u, 1) for u in urls if u not in lost and hash(u.split("/")[2]) % 2 == i])
    stores[1].close()  # a stopped shard: its file is read again

    async def call(fn):
        async def fetch(after, limit):
            return fn(after, limit)
        return fetch

    async def run():
        return await ledgeraudit.audit_marks(
            [await call(s.key_page) for s in seen], [await call(s.audit.keys) for s in stores], page=64)

    found = asyncio.run(run())
    assert (found.marks, found.lost, found.unmarked) == (400, len(lost), 0)
    assert sorted(found.lost_keys) == sorted(_signed(url_hash64(u)) for u in lost)
    ids = stores[1].audit.ids(None, 1000)
    assert ids == sorted(ids) and all(isinstance(u, str) for _, _, u in ids)


def _output(tmp_path, pages):
    """OUT with one fetched HTML page per (url, html) and a redirect row."""
    out = tmp_path / "out"
    rows, bodies = [], {}
    for url, html in pages:
        body = html.encode()
        sha = hashlib.sha256(body).hexdigest()
        rows.append(OutcomeRow(url=url, host=url.split("/")[2], depth=1, outcome="fetched", status=200,
                               content_type="text/html", content_sha256=sha, fetched_at=0.0))
        bodies[sha] = body
    rows.append(OutcomeRow(url="http://a.test/old", host="a.test", depth=1, outcome="redirect", status=301,
                           redirect_to="http://a.test/moved", fetched_at=0.0))
    with ResultWriter(str(out), "w0") as w:
        w.add(rows, bodies)
    return config.from_dict({"seeds": ["http://a.test/"], "output": {"path": str(out)}})


def test_lost_urls_are_named_from_links_redirects_and_seeds(tmp_path):
    cfg = _output(tmp_path, [("http://a.test/p1", '<a href="/x?utm_source=n#frag">x</a> <a href="http://b.test/y">y</a>')])
    wanted = {_signed(url_hash64(u)): u for u in ("http://a.test/x", "http://b.test/y", "http://a.test/moved", "http://a.test/")}
    wanted[_signed(url_hash64("http://a.test/nowhere"))] = "http://a.test/nowhere"
    found = relink.find(cfg, ["http://a.test/"], list(wanted))
    assert {k: f.url for k, f in found.items()} == {k: u for k, u in wanted.items() if not u.endswith("nowhere")}
    x = found[_signed(url_hash64("http://a.test/x"))]
    assert (x.depth, x.referrer) == (2, "http://a.test/p1")  # as the page's links were admitted


class FakeRuntime:
    """The audit's view of a runtime: two seen shards, two shard stores, deliveries noted."""

    def __init__(self, marks, held):
        self.marks = [sorted(_signed(h) for h in marks if shard_of(h, 2) == i) for i in range(2)]
        self.held = {"s0": sorted(_signed(h) for h in held)}
        self.delivered: dict[str, list[UrlItem]] = {}
        self.forgotten: list[int] = []

    async def seen_keys(self, index, after, limit):
        return [k for k in self.marks[index] if after is None or k > after][:limit]

    async def held_keys(self, shard_id, after, limit):
        return [k for k in self.held[shard_id] if after is None or k > after][:limit]

    async def seen_forget_keys(self, index, keys):
        self.forgotten.extend(keys)
        return len(keys)

    async def deliver(self, shard_id, items):
        self.delivered.setdefault(shard_id, []).extend(items)


def test_a_finished_crawl_queues_its_named_lost_urls_again_and_unmarks_the_rest(tmp_path):
    cfg = _output(tmp_path, [("http://a.test/p1", '<a href="/x">x</a>')])
    held = ["http://a.test/", "http://a.test/p1"]
    lost_named, lost_unnamed = "http://a.test/x", "http://a.test/sitemap-only"
    rt = FakeRuntime([url_hash64(u) for u in [*held, lost_named, lost_unnamed]], [url_hash64(u) for u in held])
    marks = asyncio.run(ledgeraudit.marks_at_stop(rt, cfg, ["http://a.test/"], ["s0"], 2, lambda host: "s0", finished=True))
    assert (marks["lost"], marks["requeued"], marks["unnamed"], marks["sample"]) == (2, 1, 1, [lost_named])
    assert [(i.url, i.depth, i.referrer) for i in rt.delivered["s0"]] == [(lost_named, 2, "http://a.test/p1")]
    assert rt.forgotten == [url_hash64(lost_unnamed)]  # a later link to it admits it again


def test_an_unfinished_or_bloom_only_crawl_is_not_audited(tmp_path):
    cfg = _output(tmp_path, [])
    rt = FakeRuntime([1], [])
    marks = asyncio.run(ledgeraudit.marks_at_stop(rt, cfg, [], ["s0"], 2, str, finished=False))
    assert marks["checked"] is False and not rt.delivered
    lossy = config.from_dict({"seeds": ["http://a.test/"], "output": {"path": cfg.output.path}, "dedup": {"seen_exact": False}})
    assert asyncio.run(ledgeraudit.marks_at_stop(rt, lossy, [], ["s0"], 2, str, finished=True))["checked"] is False


def test_rows_are_checked_against_what_the_shards_acked(tmp_path):
    cfg = _output(tmp_path, [("http://a.test/p1", "<p>one</p>")])

    def ident(url):
        return ledgeraudit._signed(__import__("crawler.urls", fromlist=["url_hash"]).url_hash(url))

    held = sorted([(ident("http://a.test/p1"), 2, "http://a.test/p1"), (ident("http://a.test/gone"), 2, "http://a.test/gone"),
                   (ident("http://a.test/q"), 0, "http://a.test/q")])

    async def fetch(after, limit):
        return [r for r in held if after is None or r[0] > after][:limit]

    res = asyncio.run(ledgeraudit.audit_rows([fetch], cfg.output.path, None, page=2))
    assert (res.acked_without_row, res.sample_acked) == (1, ["http://a.test/gone"])
    assert (res.rows_without_holder, res.sample_rows) == (1, ["http://a.test/old"])


def test_marks_undone_after_a_failed_delivery_are_not_lost(tmp_path):
    """A delivery that failed undoes its marks (SeenSet.forget_hashes): neither a mark nor
    a holder is left, and the audit finds nothing lost; a batch delivered unfiltered after
    a failed seen call leaves holders without marks, which is harmless."""
    seen = SeenSet(1000, path=str(tmp_path / "seen.sqlite"))
    store = FrontierStore(str(tmp_path / "shard.sqlite"))
    delivered = [f"http://a.test/{i}" for i in range(10)]
    failed = [f"http://b.test/{i}" for i in range(5)]
    unfiltered = [f"http://c.test/{i}" for i in range(3)]
    seen.check_and_add([*delivered, *failed])
    store.add([UrlItem(u, 1) for u in [*delivered, *unfiltered]])
    assert seen.forget_hashes([url_hash64(u) for u in failed]) == 5

    async def run():
        async def marks(after, limit):
            return seen.key_page(after, limit)

        async def held(after, limit):
            return store.audit.keys(after, limit)

        return await ledgeraudit.audit_marks([marks], [held], page=4)

    found = asyncio.run(run())
    assert (found.marks, found.held, found.lost, found.unmarked) == (10, 13, 0, 3)
