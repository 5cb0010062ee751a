"""RSS and Atom feeds: what a feed lists, and when it asks to be read again.

What the crawler takes from a feed (RSS 0.9x/1.0/2.0, Atom 0.3/1.0):

* each entry's link, resolved against the feed's URL, with its publication time (the
  entry's ``published``, else ``updated``) as wall seconds when the feed gives one;
* the RSS 2.0 scheduling hints, honoured as floors on the feed's own schedule
  (crawler.freshness.news): ``<ttl>`` minutes before it should be read again, ``<skipHours>``
  (UTC hours, 0-23) and ``<skipDays>`` when it should not be read at all.

A feed is cut to ``max_entries`` while it is parsed (DESIGN invariant 16): a well-formed
one is read by crawler.parse.feedstream, which stops after that many entries and
keeps what feedparser would have kept. Only a feed expat cannot read (broken XML, an
odd encoding, a root that is not a feed) goes to ``feedparser``, whose lenient parser
reads broken variants; it gets at most ``LENIENT_MAX_BYTES``, cut after the
``max_entries``-th entry's end tag, so it too costs a bounded amount (about a second of
CPU at worst, off the event loop: crawler.engine.pipeline and crawler.freshness.sitemaps
call this through their ``run_blocking``). No DTD or entity declaration is accepted (an
XML bomb is a malformed feed here, as it is a malformed sitemap in
crawler.freshness.sitemaps). Anything malformed costs that one feed (a result with an
error).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from xml.etree.ElementTree import Element, ParseError, XMLPullParser

import feedparser

from crawler.parse.feedstream import NotStreamable, Refused, stream_feed
from crawler.parse.feedstream import wall_of
from crawler.urls import join_url

#: Content types that name a feed (also the ``type`` of a ``<link rel="alternate">``).
FEED_TYPES = frozenset({
    "application/rss+xml", "application/atom+xml", "application/rdf+xml", "application/feed+xml",
})
#: Types a feed is often served as: the body decides (:func:`looks_like_feed`).
XML_TYPES = frozenset({"application/xml", "text/xml", "text/plain", ""})

_DTD = re.compile(rb"<!(DOCTYPE|ENTITY)", re.IGNORECASE)
_ROOT = re.compile(rb"<(rss|feed|rdf:RDF)[\s>]")
_DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
#: A ``<ttl>`` beyond a day says "rarely", not "never": no floor above one day.
MAX_TTL_S = 86_400.0
#: Entries read from one feed; the rest of it is not parsed.
MAX_ENTRIES = 1000
#: The most of a feed expat could not read that feedparser is given: about a second of
#: its CPU, off the event loop (1.1 s for 1 MiB of escaped HTML, its slowest input per
#: byte: benchmarks/results/parsecost.json, case feed_broken). A broken feed's entries
#: past it are not read (the feed is marked truncated).
LENIENT_MAX_BYTES = 1 << 20
# An entry's end tag, any prefix, any case: where a lenient read may be cut.
_ENTRY_END = re.compile(rb"</(?:[A-Za-z_][\w.\-]*:)?(?:item|entry)\s*>", re.IGNORECASE)


@dataclass
class Feed:
    """What one feed said: entries (url, published wall seconds or None, title or None)
    in feed order, and its scheduling hints."""

    entries: list[tuple[str, float | None, str | None]] = field(default_factory=list)
    ttl_s: float | None = None
    skip_hours: frozenset[int] = frozenset()
    skip_days: frozenset[int] = frozenset()  # 0 = Monday, as datetime.weekday()
    error: str | None = None
    truncated: bool = False
    bytes_parsed: int = 0  # bytes handed to a parser: the work the feed cost
    lenient: bool = False  # read by feedparser (expat could not read it as a feed)


def mime_essence(content_type: str | None) -> str:
    """``type/subtype`` lowercased ("" when absent)."""
    return (content_type or "").split(";", 1)[0].strip().lower()


def looks_like_feed(content_type: str | None, body: bytes) -> bool:
    """A feed by its type, or an XML-ish body whose root element is rss, feed or rdf:RDF."""
    essence = mime_essence(content_type)
    if essence in FEED_TYPES:
        return True
    if essence not in XML_TYPES:
        return False
    return _ROOT.search(body[:2048]) is not None


def parse_feed(body: bytes, url: str, *, max_entries: int = MAX_ENTRIES) -> Feed:
    """Read one feed fetched from ``url`` (relative links resolve against it), at most
    ``max_entries`` of its entries (module docstring). CPU-bound: callers on an event
    loop run it through their ``run_blocking``."""
    result = Feed()
    try:
        streamed = stream_feed(body, url, max_entries=max_entries)
    except Refused:
        result.error = "DTD or entity declaration (refused)"
        return result
    except NotStreamable:
        return parse_leniently(body, url, max_entries)
    result.entries, result.truncated, result.bytes_parsed = streamed.entries, streamed.truncated, streamed.bytes_parsed
    result.ttl_s = _ttl(streamed.ttl)
    result.skip_hours, result.skip_days = frozenset(streamed.skip_hours), frozenset(streamed.skip_days)
    return result


def lenient_cut(body: bytes, max_entries: int, max_bytes: int = LENIENT_MAX_BYTES) -> bytes:
    """The part of ``body`` a lenient read gets: up to the end tag of its ``max_entries``-th
    entry, and no more than ``max_bytes`` (cut after the last entry that fits, if any)."""
    window = body[:max_bytes]
    n, end = 0, None
    for match in _ENTRY_END.finditer(window):
        n, end = n + 1, match.end()
        if n >= max_entries:
            return body[:end]
    if len(body) <= max_bytes:
        return body
    return body[:end] if end is not None else window


def parse_leniently(body: bytes, url: str, max_entries: int = MAX_ENTRIES) -> Feed:
    """feedparser on a bounded prefix of ``body`` (:func:`lenient_cut`): what :func:`parse_feed`
    does with a feed expat could not read."""
    cut = lenient_cut(body, max_entries)
    result = Feed(truncated=len(cut) < len(body), bytes_parsed=len(cut), lenient=True)
    if _DTD.search(cut[:4096]):
        result.error = "DTD or entity declaration (refused)"
        return result
    try:
        parsed = feedparser.parse(cut, response_headers={"content-location": url, "content-type": "application/xml"})
    except Exception as exc:  # noqa: BLE001 - feedparser on hostile bytes: one feed, never the shard
        result.error = f"feedparser: {type(exc).__name__}: {exc}"[:300]
        return result
    if not parsed.get("version") and not parsed.entries:
        result.error = f"not a feed: {parsed.get('bozo_exception') or 'no rss/atom root'}"[:300]
        return result
    for entry in parsed.entries:
        link = entry.get("link")
        if not link:
            continue
        target = join_url(url, link)
        if target is None:
            continue
        published = wall_of(entry.get("published_parsed")) or wall_of(entry.get("updated_parsed"))
        result.entries.append((target, published, entry.get("title")))
        if len(result.entries) >= max_entries:
            result.truncated = True
            break
    ttl = parsed.feed.get("ttl")
    result.ttl_s = _ttl(ttl if isinstance(ttl, str) else None)
    result.skip_hours, result.skip_days = _skips(cut)
    return result


def _ttl(text: str | None) -> float | None:
    """``<ttl>`` minutes as seconds, capped at :data:`MAX_TTL_S` (None: absent or unreadable)."""
    try:
        minutes = float(text) if text is not None else None
    except ValueError:
        return None
    if minutes is None or not minutes > 0:
        return None
    return min(MAX_TTL_S, minutes * 60.0)


def _skips(body: bytes) -> tuple[frozenset[int], frozenset[int]]:
    """RSS 2.0 ``<skipHours><hour>`` and ``<skipDays><day>`` of the channel (malformed
    values ignored; a feed that is not well-formed XML has those before its first error)."""
    hours: set[int] = set()
    days: set[int] = set()
    if b"skip" not in body:
        return frozenset(), frozenset()
    parser: XMLPullParser[Element] = XMLPullParser(events=("end",))
    try:
        parser.feed(body)
        parser.close()
    except ParseError:
        pass  # feedparser already took what the feed lists; the hints are optional
    for event in parser.read_events():
        elem = event[-1]  # (event, element): "end" events carry elements
        if not isinstance(elem, Element):
            continue
        tag = elem.tag.rsplit("}", 1)[-1]
        text = (elem.text or "").strip()
        if tag == "hour" and text.isdigit() and 0 <= int(text) <= 24:
            hours.add(int(text) % 24)  # some feeds write 1-24
        elif tag == "day" and text.lower() in _DAYS:
            days.add(_DAYS.index(text.lower()))
    return frozenset(hours), frozenset(days)


def next_allowed(at_wall: float, skip_hours: frozenset[int], skip_days: frozenset[int]) -> float:
    """The first time at or after ``at_wall`` outside the feed's skipped hours and days
    (both UTC, RSS 2.0); ``at_wall`` itself when nothing is skipped or everything is."""
    if not skip_hours and not skip_days:
        return at_wall
    t = dt.datetime.fromtimestamp(at_wall, dt.timezone.utc)
    for _ in range(24 * 8):  # a week and a day of hours covers every combination
        if t.hour not in skip_hours and t.weekday() not in skip_days:
            return max(at_wall, t.timestamp())
        t = (t + dt.timedelta(hours=1)).replace(minute=0, second=0, microsecond=0)
    return at_wall  # every hour skipped: the hint says nothing usable
