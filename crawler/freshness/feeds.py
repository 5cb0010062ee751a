"""RSS and Atom feeds: what a feed lists, and when it asks to be read again.

A feed is read with ``feedparser`` (RSS 0.9x/1.0/2.0, Atom 0.3/1.0, their many broken
variants). What the crawler takes from it:

* each entry's link, resolved against the feed's URL, with its publication time (the
  entry's ``published``, else ``updated``) as wall seconds when the feed gives one;
* the RSS 2.0 scheduling hints, honoured as floors on the feed's own schedule
  (crawler.freshness.news): ``<ttl>`` minutes before it should be read again, ``<skipHours>``
  (UTC hours, 0-23) and ``<skipDays>`` when it should not be read at all.

feedparser does not keep every ``<skipHours><hour>`` (it keeps the last), so those two
lists are read from the channel by a small pull parser. No DTD or entity declaration is
accepted (an XML bomb is a malformed feed here, as it is a malformed sitemap in
crawler.freshness.sitemaps). Anything malformed costs that one feed (a result with an error).
"""

from __future__ import annotations

import calendar
import datetime as dt
import re
from dataclasses import dataclass, field
from xml.etree.ElementTree import ParseError, XMLPullParser

import feedparser

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


def _wall(parsed) -> float | None:
    """A feedparser time tuple (always UTC) as wall seconds."""
    if parsed is None:
        return None
    try:
        return float(calendar.timegm(parsed))
    except (TypeError, ValueError, OverflowError):
        return None


def parse_feed(body: bytes, url: str, *, max_entries: int = 1000) -> Feed:
    """Read one feed fetched from ``url`` (relative links resolve against it)."""
    result = Feed()
    if _DTD.search(body[:4096]):
        result.error = "DTD or entity declaration (refused)"
        return result
    try:
        parsed = feedparser.parse(body, response_headers={"content-location": url, "content-type": "application/xml"})
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
        published = _wall(entry.get("published_parsed")) or _wall(entry.get("updated_parsed"))
        result.entries.append((target, published, entry.get("title")))
        if len(result.entries) >= max_entries:
            result.truncated = True
            break
    ttl = parsed.feed.get("ttl")
    try:
        minutes = float(ttl) if ttl is not None else None
    except ValueError:
        minutes = None
    if minutes is not None and minutes > 0:
        result.ttl_s = min(MAX_TTL_S, minutes * 60.0)
    result.skip_hours, result.skip_days = _skips(body)
    return result


def _skips(body: bytes) -> tuple[frozenset[int], frozenset[int]]:
    """RSS 2.0 ``<skipHours><hour>`` and ``<skipDays><day>`` of the channel (malformed
    values ignored; a feed that is not well-formed XML has none)."""
    hours: set[int] = set()
    days: set[int] = set()
    if b"skip" not in body:
        return frozenset(), frozenset()
    parser = XMLPullParser(events=("end",))
    try:
        parser.feed(body)
        parser.close()
    except ParseError:
        pass  # feedparser already took what the feed lists; the hints are optional
    for _, elem in parser.read_events():
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
