"""PagePipeline on fakes and the mock clock: one classified response in, one outcome out.

What a user sees of it: the row written for the URL (its fields, its time, why a body is
partial), the links the crawl goes on to (depth, referrer, the ones not followed counted
by reason), duplicates counted and named, and when the URL is due again. The duplicate-
content service is a fake that answers from a table and records what it was asked.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone

import pytest

from crawler.config import settings as config
from crawler.clock import MockClock
from crawler.frontier.urlitem import UrlItem
from crawler.output import BlobStore
from crawler.engine.pipeline import PagePipeline
from crawler.frontier.recrawl import Previous, RecrawlPolicy
from crawler.engine.partbuilders import build_link_policy

from tests.unit.doubles import ContentTable, response

SEED = "http://a.test/"
WALL0 = 1_700_000_000.0
INITIAL_S = 3600.0


def html(*links: str, words: int = 40, extra: str = "") -> bytes:
    text = " ".join(f"word{i}" for i in range(words))
    anchors = "".join(f'<a href="{u}">x</a>' for u in links)
    return f"<html><head>{extra}</head><body><p>{text}</p>{anchors}</body></html>".encode()


def make(content: ContentTable | None = None, *, store_bodies: bool = True, clock: MockClock | None = None,
         max_links: int = 100) -> PagePipeline:
    cfg = config.from_dict({"seeds": [SEED], "scope": "host", "limits": {"max_depth": 3}})
    return PagePipeline(
        "shard-007",
        build_link_policy(cfg, [SEED]),
        content if content is not None else ContentTable(),
        clock or MockClock(wall_start=WALL0),
        user_agent_token="raycrawl",
        max_links_per_page=max_links,
        min_text_tokens=5,
        max_body_bytes=1000,
        store_bodies=store_bodies,
        recrawl=RecrawlPolicy(min_interval_s=60.0, max_interval_s=86400.0, initial_interval_s=INITIAL_S,
                              grow_factor=2.0, shrink_factor=0.5, fingerprint_distance=3),
    )


async def test_a_page_gives_its_row_and_the_links_to_follow_with_the_rest_counted_by_reason() -> None:
    clock = MockClock(wall_start=WALL0)
    clock.advance(12.5)
    content = ContentTable()
    p = make(content, clock=clock)
    body = html("/b", "/b#again", "http://other.test/x", "mailto:me@a.test", "/c?utm_source=feed")
    item = UrlItem("http://a.test/a", depth=1, referrer=SEED)
    out = await p.page(item, response(item.url, 200, body, etag='"v1"'))

    assert [(link.url, link.depth, link.referrer) for link in out.links] == [
        ("http://a.test/b", 2, item.url), ("http://a.test/c", 2, item.url),
    ]
    assert dict(p.dropped) == {"duplicate_on_page": 1, "scope": 1, "unsupported_scheme": 1}
    row = out.row
    sha = hashlib.sha256(body).hexdigest()
    assert (row.url, row.outcome, row.status, row.depth, row.referrer, row.shard) == (
        item.url, "fetched", 200, 1, SEED, "shard-007")
    assert row.fetched_at == datetime.fromtimestamp(WALL0 + 12.5, timezone.utc)
    assert (row.content_sha256, row.content_length, row.blob_key) == (sha, len(body), BlobStore.key_for(sha))
    assert (row.etag, row.error, row.dup_kind, row.truncated) == ('"v1"', None, None, False)
    assert out.body == body and out.duplicate is False
    # The content service was asked once, about this page, with its text fingerprint.
    assert len(content.asked) == 1 and content.asked[0][:2] == (item.url, sha) and content.asked[0][2] is not None
    assert p.counters.bytes == len(body)
    # First fetch: nothing to compare, due again one initial interval after it was fetched.
    assert out.schedule is not None
    assert (out.schedule.changed, out.schedule.next_crawl_at) == (None, WALL0 + 12.5 + INITIAL_S)


@pytest.mark.parametrize("kind", ["exact", "near"])
async def test_a_duplicate_page_is_named_in_its_row_and_counted(kind: str) -> None:
    body = html("/b")
    sha = hashlib.sha256(body).hexdigest()
    p = make(ContentTable({sha: (kind, "http://a.test/original")}))
    out = await p.page(UrlItem("http://a.test/copy"), response("http://a.test/copy", 200, body))
    assert (out.row.dup_kind, out.row.dup_of, out.duplicate) == (kind, "http://a.test/original", True)
    assert p.counters.families[f"dup_{kind}"] == 1
    assert [link.url for link in out.links] == ["http://a.test/b"]  # a duplicate's links still count


async def test_a_truncated_body_says_so_in_the_row() -> None:
    p = make()
    out = await p.page(UrlItem("http://a.test/big"), response("http://a.test/big", 200, html(), truncated=True))
    assert out.row.truncated is True
    assert out.row.error == "body truncated at limits.max_body_bytes (1000 bytes)"


async def test_meta_nofollow_follows_nothing_and_counts_each_link() -> None:
    p = make()
    body = html("/b", "/c", extra='<meta name="robots" content="nofollow">')
    out = await p.page(UrlItem("http://a.test/a"), response("http://a.test/a", 200, body))
    assert out.links == [] and p.dropped["meta_nofollow"] == 2


async def test_links_past_the_depth_limit_are_not_followed() -> None:
    p = make()
    out = await p.page(UrlItem("http://a.test/deep", depth=3), response("http://a.test/deep", 200, html("/b")))
    assert out.links == [] and p.dropped["depth"] == 1


async def test_without_stored_bodies_no_body_and_no_blob_key() -> None:
    p = make(store_bodies=False)
    out = await p.page(UrlItem("http://a.test/a"), response("http://a.test/a", 200, html()))
    assert out.body is None and out.row.blob_key is None and out.row.content_sha256 is not None


async def test_a_non_html_body_is_hashed_and_stored_but_has_no_links() -> None:
    p = make()
    body = b"%PDF-1.4 http://a.test/b"
    out = await p.page(UrlItem("http://a.test/doc.pdf"), response("http://a.test/doc.pdf", 200, body, ctype="application/pdf"))
    assert out.links == [] and out.row.content_sha256 == hashlib.sha256(body).hexdigest()
    assert out.row.simhash is None and out.row.content_type == "application/pdf"


async def test_a_refetched_page_with_the_same_body_is_unchanged_and_waits_longer() -> None:
    p = make()
    body = html()
    prev = Previous(fetches=1, interval_s=1000.0, content_sha256=hashlib.sha256(body).hexdigest())
    item = UrlItem("http://a.test/a", kind="refresh", prev=prev, fetch_seq=2)
    out = await p.page(item, response(item.url, 200, body))
    assert out.row.changed is False and out.row.fetch_seq == 2
    assert out.schedule is not None and out.schedule.changed is False and out.schedule.interval_s == 2000.0


def test_a_redirect_target_is_a_link_one_hop_deeper() -> None:
    p = make()
    item = UrlItem("http://a.test/old", depth=1)
    out = p.redirect(item, response(item.url, 301, location="/new?utm_source=x"))
    assert (out.row.outcome, out.row.status, out.row.redirect_to) == ("redirect", 301, "http://a.test/new")
    assert [(link.url, link.depth, link.referrer) for link in out.links] == [("http://a.test/new", 2, item.url)]
    assert out.row.content_length is None and out.body is None


def test_a_redirect_off_scope_is_recorded_not_followed_and_counted() -> None:
    p = make()
    out = p.redirect(UrlItem("http://a.test/go"), response("http://a.test/go", 302, location="http://elsewhere.test/"))
    assert out.row.redirect_to == "http://elsewhere.test/" and out.links == []
    assert p.dropped["scope"] == 1


@pytest.mark.parametrize("location", ["", "http://[broken"])
def test_a_redirect_without_a_usable_location_is_a_row_with_the_reason(location: str) -> None:
    p = make()
    res = response("http://a.test/go", 302, location=location) if location else response("http://a.test/go", 302)
    out = p.redirect(UrlItem("http://a.test/go"), res)
    assert out.links == [] and out.row.outcome == "redirect" and out.row.redirect_to is None
    assert out.row.error is not None and out.row.error.startswith("unusable Location header")


def test_a_robots_refusal_gets_a_row_and_is_never_due_again() -> None:
    p = make()
    out = p.outcome(UrlItem("http://a.test/private"), "robots_blocked")
    assert (out.row.outcome, out.row.status, out.row.error) == ("robots_blocked", None, None)
    assert out.schedule is None


def test_an_error_row_carries_the_fetchers_reason_and_is_scheduled() -> None:
    p = make()
    res = response("http://a.test/x", None, error="connect: refused")  # type: ignore[arg-type]
    out = p.outcome(UrlItem("http://a.test/x", attempts=3), "failed", res)
    assert (out.row.outcome, out.row.error, out.row.attempts, out.row.content_length) == ("failed", "connect: refused", 3, None)
    assert out.schedule is not None and out.schedule.next_crawl_at == WALL0 + INITIAL_S


def test_links_of_a_stored_page_are_those_a_fetch_would_follow() -> None:
    p = make()
    assert [i.url for i in p.links_from("http://a.test/a", 1, "text/html", html("/b", "http://x.test/"))] == ["http://a.test/b"]
    assert p.links_from("http://a.test/a", 1, "image/png", b"\x89PNG") == []
