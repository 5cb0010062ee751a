"""Naming lost URLs from the output, so that they can be queued again.

A seen set keeps only each URL's 64-bit hash (crawler.seen), so a URL marked seen that no
shard holds (a lost delivery, found by crawler.session.ledgeraudit) is known by its hash
alone. Its text is still in what the crawl stored: it was a seed, a redirect's target, or
a link of a page whose body is in OUT (a page is acked only once its links were
delivered, so the page that sent a lost link has its row). :func:`find` reads those
again, the seeds, every row's ``redirect_to`` and the links of every stored page (HTML
links and feed links, joined and normalized the way the shards do it), and keeps the
URLs whose hash is wanted, stopping as soon as each one is named. Every link is offered,
not only the ones the crawl followed: only wanted hashes are kept, so reading more costs
nothing but time.

Not found: URLs that only a sitemap, a feed entry read from an unstored body, or an
operator's ``POST /seeds`` brought in; and everything when ``output.store_bodies`` is off.
Cost: a page parse per stored page read (the stage table in the README: ~0.4 ms), done
only when an audit found lost URLs, and only until all of them are named.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Sequence

import pyarrow.parquet as pq

from crawler.config.settings import CrawlConfig
from crawler.engine.partbuilders import build_link_policy
from crawler.errors import StorageError
from crawler.parse.feeds import looks_like_feed, parse_feed
from crawler.output import open_fs
from crawler.output.blobs import BlobStore
from crawler.output.reader import list_parts
from crawler.output.schema import PAGES_SCHEMA
from crawler.parse import is_html, parse_page
from crawler.seen import url_hash64
from crawler.seen.hashing import MASK64

log = logging.getLogger(__name__)

_COLUMNS = ["url", "depth", "outcome", "blob_key", "content_type", "redirect_to"]


@dataclass(frozen=True)
class Found:
    """A lost URL named: where it was found, to queue it as it was first admitted."""

    url: str
    depth: int
    referrer: str | None


def _rows(cfg: CrawlConfig) -> Iterator[dict[str, Any]]:
    """OUT's rows, one part file at a time (bounded memory; a stop after any part)."""
    opts = dict(cfg.output.storage_options) or None
    fs, root = open_fs(cfg.output.path, opts)
    for path in list_parts(fs, root):
        try:
            with fs.open(path, "rb") as f:
                table = pq.read_table(f, columns=_COLUMNS, schema=PAGES_SCHEMA)
        except Exception as exc:  # noqa: BLE001 - pyarrow, botocore and OS errors alike: one part
            log.warning("naming lost URLs: %s could not be read (%r); its pages are skipped", path, exc)
            continue
        yield from table.to_pylist()


def _links(cfg: CrawlConfig, url: str, content_type: str | None, body: bytes) -> Iterator[str]:
    """Every link of a stored body, as resolved (not yet normalized)."""
    if is_html(content_type, body):
        page = parse_page(body, url, content_type, {}, user_agent_token=cfg.product_token(),
                          max_links=cfg.urls.max_links_per_page)
        for link in page.links:
            if link.resolved:
                yield link.resolved
        yield from page.feeds
    elif looks_like_feed(content_type, body):
        for entry_url, _, _ in parse_feed(body, url).entries:
            yield entry_url


def find(cfg: CrawlConfig, seeds: Sequence[str], keys: Iterable[int]) -> dict[int, Found]:
    """The URLs whose :func:`~crawler.seen.url_hash64` is one of ``keys`` (signed or not),
    as ``{key as given: Found}``; keys not found are left out (see the module docstring)."""
    wanted = {k & MASK64: k for k in keys}
    found: dict[int, Found] = {}
    if not wanted:
        return found
    normalize = build_link_policy(cfg, seeds).normalizer

    def offer(url: str | None, depth: int, referrer: str | None) -> None:
        if not url:
            return
        h = url_hash64(url)
        if h in wanted and wanted[h] not in found:
            found[wanted[h]] = Found(url, depth, referrer)

    for seed in seeds:
        offer(seed, 0, None)
    blobs = BlobStore(cfg.output.path, dict(cfg.output.storage_options) or None)
    pages = 0
    for row in _rows(cfg):
        if len(found) == len(wanted):
            break
        depth = (row["depth"] or 0) + 1
        offer(row["redirect_to"], depth, row["url"])
        if row["outcome"] != "fetched" or not row["blob_key"]:
            continue
        try:
            body = blobs.get(row["blob_key"])
        except (StorageError, ValueError) as exc:
            log.warning("naming lost URLs: the body of %s is unreadable (%s)", row["url"], exc)
            continue
        pages += 1
        for link in _links(cfg, row["url"], row["content_type"], body):
            offer(normalize(link), depth, row["url"])
    log.info("named %d of %d lost URLs from %d stored pages", len(found), len(wanted), pages)
    return found
