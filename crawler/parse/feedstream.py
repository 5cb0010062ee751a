"""Reading an RSS or Atom feed while it is parsed, and stopping at its entry limit.

A feed is input-sized work: a hostile one lists a million items, and feedparser builds
every one of them (with its dates, sanitized HTML and detail dicts) before the crawler
could take the first ``max_entries``: 65 s of CPU and 672 MB for 1,000,000 items, the
event loop blocked throughout (benchmarks/results/parsecost_before.json). DESIGN
invariant 16 wants the document cut to its limits while it is parsed, docs/invariants.md
#8 its memory set by them: :func:`stream_feed` feeds the bytes to expat in chunks and
keeps per entry only what the crawler uses, raising out of the parser once
``max_entries`` entries are read. Its cost is that of the entries it reads, not of the
document (0.01 s and under 1 MB for the same feed: benchmarks/results/parsecost.json).

What it keeps is what feedparser would have given (crawler.parse.feeds compares the
two on its tests and on generated feeds): an entry's link (an Atom ``<link>`` whose
``rel`` is ``alternate`` and ``type`` HTML, else the text of an RSS ``<link>``, else a
permalink ``<guid>`` or Atom ``<id>``; relative to the ``xml:base`` in force, else the
feed's URL), its publication time (``pubDate``/``published``/``issued``/
``dcterms:issued``, else ``updated``/``modified``/``dc:date``/``dcterms:modified``, read
by feedparser's own date parser), its title; the channel's ``<ttl>``, ``<skipHours>``
and ``<skipDays>``. Element names are matched as feedparser matches them: lowercased,
the RSS and Atom namespaces (and undeclared or default ones) bare, Dublin Core by its
``dc:``/``dcterms:`` prefix, other declared namespaces ignored; what sits inside a text
element (``description``, ``content``, ``summary``...) is markup, not feed elements. Two
known differences, both in titles, which the crawler keeps for reports only: markup
elements inside a title give their text, not their (sanitized) tags; and the HTML
entities below are read where feedparser, whose strict parser refuses them, falls to its
lenient one (which keeps ``&amp;`` in a ``<guid>`` link: the streamed link is the one its
strict parser would give).

XML attacks: a document with a DOCTYPE is refused as soon as expat meets it, wherever
it is, so no entity can be declared and none expanded (billion laughs) and no external
entity is ever loaded. HTML entities such as ``&nbsp;`` (undeclared, so a strict XML
error) are read as their characters, as feedparser's lenient parser reads them.

Anything else expat refuses (bytes not in the declared encoding, an unescaped ``&``, an
unknown multibyte encoding, a root that is not ``rss``, ``feed`` or RSS 1.0 ``rdf:RDF``)
raises :class:`NotStreamable`: crawler.parse.feeds then hands a bounded prefix to
feedparser, which reads broken feeds leniently.
"""

from __future__ import annotations

import calendar
import html.entities
import re
from dataclasses import dataclass, field
from typing import Any

import pyexpat
from feedparser.datetimes import _parse_date as feed_date  # feedparser's date formats, the same results

from crawler.urls import join_url

#: Bytes handed to expat per call: small enough that the limit stops the parse within
#: one chunk's worth of entries, large enough that the calls cost nothing.
CHUNK_BYTES = 64 * 1024

_SEP = " "  # expat's namespace separator: cannot occur in a URI or a name
# Namespaces whose elements are the base formats (feedparser's supported_namespaces).
_BASE_NS = frozenset({
    "", "http://backend.userland.com/rss", "http://blogs.law.harvard.edu/tech/rss", "http://purl.org/rss/1.0/",
    "http://my.netscape.com/rdf/simple/0.9/", "http://example.com/newformat#", "http://example.com/necho",
    "http://purl.org/echo/", "uri/of/echo/namespace#", "http://purl.org/pie/", "http://purl.org/atom/ns#",
    "http://www.w3.org/2005/atom", "http://purl.org/rss/1.0/modules/rss091#",
})
_KNOWN_NS = {  # the prefixes this reader reads (others only need to be told apart)
    "http://purl.org/dc/elements/1.1/": "dc", "http://purl.org/dc/terms/": "dcterms",
    "http://search.yahoo.com/mrss": "media", "http://search.yahoo.com/mrss/": "media",
    "http://purl.org/rss/1.0/modules/content/": "content", "http://www.w3.org/1999/xhtml": "xhtml",
    "http://www.itunes.com/dtds/podcast-1.0.dtd": "itunes", "http://rssnamespace.org/feedburner/ext/1.0": "feedburner",
}
_RDF_NS = "http://www.w3.org/1999/02/22-rdf-syntax-ns#"
_RSS1_NS = ("http://purl.org/rss/1.0/", "http://my.netscape.com/rdf/simple/0.9/")
_XML_BASE = "http://www.w3.org/XML/1998/namespace base"

_PUBLISHED = frozenset({"pubdate", "published", "issued", "dcterms:issued"})
_UPDATED = frozenset({"updated", "modified", "lastbuilddate", "dc:date", "dcterms:modified"})
_TITLES = frozenset({"title", "dc:title", "media:title"})
# Text elements: what they contain is markup (feedparser's push_content elements).
_TEXTS = _TITLES | frozenset({
    "subtitle", "tagline", "itunes:subtitle", "rights", "copyright", "dc:rights", "summary", "itunes:summary",
    "description", "dc:description", "media:description", "abstract", "content", "content:encoded", "fullitem",
    "body", "xhtml:body", "info", "feedburner:browserfriendly",
})
_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml", "html", "xhtml"})
_KEEP_IMAGE = frozenset({"title", "link", "description", "url", "href", "width", "height"})
_KEEP_TEXTINPUT = frozenset({"title", "link", "description", "name"})
_DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_ENTITY_REF = re.compile(r"&([A-Za-z0-9_]+);")
# feedparser maps C1 controls to the windows-1252 characters they were meant to be.
_CP1252 = {c: bytes([c]).decode("cp1252") for c in range(0x80, 0xA0) if c not in (0x81, 0x8D, 0x8F, 0x90, 0x9D)}


class NotStreamable(Exception):
    """The document is not a well-formed RSS/Atom feed expat can read: read it leniently."""


class Refused(Exception):
    """The document declares a DTD (entities): refused, never expanded."""


class _Limit(Exception):
    """``max_entries`` entries are read: stop parsing."""


@dataclass(slots=True)
class StreamedFeed:
    """What :func:`stream_feed` read: entries (url, published wall seconds, title) in
    feed order, the channel's hints as written, whether it stopped at the entry limit,
    and how many bytes expat was given (the work done)."""

    entries: list[tuple[str, float | None, str | None]] = field(default_factory=list)
    ttl: str | None = None
    skip_hours: set[int] = field(default_factory=set)
    skip_days: set[int] = field(default_factory=set)
    truncated: bool = False
    bytes_parsed: int = 0


def wall_of(parsed: Any) -> float | None:
    """A feedparser time tuple (UTC) as wall seconds."""
    if parsed is None:
        return None
    try:
        return float(calendar.timegm(parsed))
    except (TypeError, ValueError, OverflowError):
        return None


def _date(text: str) -> Any:
    """feedparser's reading of a date (a UTC time tuple), None when it reads none."""
    if not text:
        return None
    try:
        return feed_date(text)
    except (ValueError, OverflowError, KeyError, AttributeError, TypeError, IndexError):
        return None


def _clean(text: str) -> str:
    """What feedparser does to every text it keeps: stripped, windows-1252 controls mapped."""
    return text.strip().translate(_CP1252)


class _Entry:
    __slots__ = ("link", "has_link", "published", "updated", "title", "title_at", "title_stop")

    def __init__(self) -> None:
        self.link: str | None = None
        self.has_link = False
        self.published: Any = None
        self.updated: Any = None
        self.title: str | None = None
        self.title_at = -1  # depth the kept title came from (feedparser keeps the shallowest)
        self.title_stop = -1  # depth of the first non-empty title: deeper ones are ignored


class _Reader:
    """expat handlers keeping feedparser's context: in the channel, in an entry, in its
    ``<source>``, ``<image>`` or ``<textinput>``, inside a text element."""

    def __init__(self, url: str, max_entries: int, out: StreamedFeed) -> None:
        self.max_entries = max_entries
        self.out = out
        self.bases = [url]  # xml:base in force, per open element
        self.names: list[str] = []  # open elements, as feedparser names them
        self.texts: list[list[str] | None] = []  # text collected per open element (None: not kept)
        self.prefixed: set[str] = set()  # unknown namespaces declared with a prefix
        self.depth = 0
        self.markup = 0  # > 0: inside a text element, whose children are markup
        self.infeed = self.insource = self.inimage = self.intextinput = False
        self.entry: _Entry | None = None
        self.guid_is_link = False
        self.rdf = self.rss1 = False  # an rdf:RDF root; RSS 1.0 or 0.90 declared (feedparser's version)

    # -- names -----------------------------------------------------------------------------

    def _name(self, raw: str) -> str:
        ns, sep, local = raw.rpartition(_SEP)
        local = local.lower()
        if not sep:
            return local
        low = ns.lower()
        if low in _BASE_NS or "backend.userland.com/rss" in low:
            return local
        prefix = _KNOWN_NS.get(low)
        if prefix is not None:
            return prefix + ":" + local
        return "x:" + local if ns in self.prefixed else local

    def namespace(self, prefix: str | None, uri: str | None) -> None:
        self.rss1 = self.rss1 or uri in _RSS1_NS
        if prefix and uri and uri.lower() not in _BASE_NS and uri.lower() not in _KNOWN_NS:
            self.prefixed.add(uri)

    # -- elements --------------------------------------------------------------------------

    def start(self, raw: str, attrs: dict[str, str]) -> None:
        self.depth += 1
        base = self.bases[-1]
        given = attrs.get(_XML_BASE) or attrs.get("base")
        if given:
            joined = join_url(base, given)
            if joined is not None and joined.startswith(("http://", "https://")):
                base = joined
        self.bases.append(base)
        if self.markup:
            self.markup += 1
            self.names.append("")
            self.texts.append(None)
            return
        name = self._name(raw)
        if self.depth == 1:
            self._root(raw, name)
        self.names.append(name)
        self.texts.append(None)
        if ":" not in name:  # feedparser's hack for empty <image>/<textinput> in broken feeds
            self.intextinput = self.intextinput and name in _KEEP_TEXTINPUT
            self.inimage = self.inimage and name in _KEEP_IMAGE
        if name in ("item", "entry", "link", "guid", "id"):
            attrs = {key.lower(): value for key, value in attrs.items()}  # as feedparser reads them
        if name in ("item", "entry"):
            self.entry, self.guid_is_link = _Entry(), False
            href = attrs.get("href")
            if href:  # CDF: <item href=...>
                self.entry.link, self.entry.has_link = join_url(base, href.strip()), True
        elif name in ("channel", "feed"):
            self.infeed = True
        elif name in ("source", "image", "textinput"):
            if name == "source":
                self.insource = True
            elif name == "image":
                self.inimage = True
            else:
                self.intextinput = True
            if self.entry is not None:
                self.entry.title_stop = -1  # feedparser forgets where the kept title came from
        elif name == "link":
            # feedparser's _enforce_href: url, else uri, else href; an empty href still counts.
            href = attrs.get("url") or attrs.get("uri") or attrs.get("href")
            if href is None or not href and "href" not in attrs:
                self.texts[-1] = []
            elif self._in_entry():
                rel = (attrs.get("rel") or "alternate").lower()
                kind = (attrs.get("type") or ("application/atom+xml" if rel == "self" else "text/html")).lower()
                if rel == "alternate" and kind in _HTML_TYPES:
                    self.entry.link, self.entry.has_link = join_url(base, href.strip()), True  # type: ignore[union-attr]  # _in_entry(): an entry is open
        elif name in ("guid", "id"):
            self.guid_is_link = attrs.get("ispermalink", "true") == "true"
            self.texts[-1] = []
        elif name in _PUBLISHED or name in _UPDATED or name in ("ttl", "hour", "day"):
            self.texts[-1] = []
        elif name.rpartition(":")[2] in ("hour", "day"):
            self.texts[-1] = []
        if name in _TEXTS:
            self.markup = 1
            if name in _TITLES:
                self.texts[-1] = []

    def _root(self, raw: str, name: str) -> None:
        ns = raw.rpartition(_SEP)[0]
        if name in ("rss", "feed"):
            return
        if raw.rpartition(_SEP)[2] == "RDF" and ns == _RDF_NS:
            self.rdf = True
            return
        raise NotStreamable(f"root element {raw.rpartition(_SEP)[2]!r}")

    def _in_entry(self) -> bool:
        return self.entry is not None and not (self.insource or self.inimage or self.intextinput)

    def end(self, raw: str) -> None:
        self.depth -= 1
        base = self.bases.pop()  # the base in force inside the element (feedparser resolves with it)
        name = self.names.pop()
        text = self.texts.pop()
        if self.markup > 1:
            self.markup -= 1
            return
        self.markup = 0
        entry = self.entry
        if name in ("item", "entry"):
            self.entry = None
            if entry is not None:
                self._finish(entry)
            return
        if name in ("channel", "feed"):
            self.infeed = False
        elif name == "source":
            self.insource = False
        elif name == "image":
            self.inimage = False
        elif name == "textinput":
            self.intextinput = False
        if text is None:
            return
        value = _clean("".join(text))
        if name == "link":
            if entry is not None and not (self.insource or self.inimage or self.intextinput):
                # feedparser's repair of "&amp;" and "&name;" left in link text
                value = _ENTITY_REF.sub(r"&\1", value.replace("&amp;", "&"))
                entry.link, entry.has_link = (join_url(base, value) if value else ""), True
        elif name in ("guid", "id"):
            if entry is not None and self._in_entry() and self.guid_is_link and not entry.has_link:
                entry.link, entry.has_link = (join_url(base, value) if value else ""), True
        elif name in _PUBLISHED or name in _UPDATED:
            if entry is not None and self._in_entry():
                parsed = _date(value)
                if name in _PUBLISHED:
                    entry.published = parsed
                else:
                    entry.updated = parsed
        elif name in _TITLES:
            if entry is not None and self._in_entry():
                self._title(entry, name, value)
        elif name == "ttl":
            if self.infeed and entry is None and not (self.insource or self.inimage or self.intextinput):
                self.out.ttl = value
        elif name.endswith("hour"):
            if value.isdigit() and 0 <= int(value) <= 24:
                self.out.skip_hours.add(int(value) % 24)  # some feeds write 1-24
        elif name.endswith("day"):
            if value.lower() in _DAYS:
                self.out.skip_days.add(_DAYS.index(value.lower()))

    def _title(self, entry: _Entry, name: str, value: str) -> None:
        depth = self.depth + 1
        if -1 < entry.title_stop <= depth:
            return
        if entry.title_at < 0 or depth <= entry.title_at:
            entry.title_at, entry.title = depth, value
        if value and name != "media:title":
            entry.title_stop = depth

    def _finish(self, entry: _Entry) -> None:
        target = entry.link if entry.has_link and entry.link else None
        if target is None:
            return
        published = wall_of(entry.published) or wall_of(entry.updated)
        self.out.entries.append((target, published, entry.title))
        if len(self.out.entries) >= self.max_entries:
            self.out.truncated = True
            raise _Limit

    def data(self, text: str) -> None:
        if self.markup:
            # Inside a text element: only a title's text is kept (children included).
            for i in range(len(self.texts) - 1, -1, -1):
                kept = self.texts[i]
                if self.names[i]:
                    if kept is not None:
                        kept.append(text)
                    return
            return
        kept = self.texts[-1] if self.texts else None
        if kept is not None:
            kept.append(text)

    def entity(self, name: str, is_parameter: int) -> None:
        # Undeclared entities (UseForeignDTD): HTML's named characters, as feedparser's
        # lenient parser reads them; anything else is dropped.
        code = html.entities.name2codepoint.get(name)
        if code is not None and not is_parameter:
            self.data(chr(code))


def _refuse(*_args: object) -> None:
    raise Refused


def stream_feed(body: bytes, url: str, *, max_entries: int, chunk: int = CHUNK_BYTES) -> StreamedFeed:
    """Read the feed ``body`` fetched from ``url`` up to ``max_entries`` entries (module
    docstring). Raises :class:`Refused` for a DTD, :class:`NotStreamable` for anything
    expat cannot read as a feed (the caller reads it leniently instead)."""
    out = StreamedFeed()
    reader = _Reader(url, max_entries, out)
    parser = pyexpat.ParserCreate(namespace_separator=_SEP)
    parser.UseForeignDTD(True)  # undeclared entities are skipped, not fatal; nothing is loaded
    parser.buffer_text = True
    parser.StartDoctypeDeclHandler = _refuse
    parser.EntityDeclHandler = _refuse
    parser.StartNamespaceDeclHandler = reader.namespace
    parser.StartElementHandler = reader.start
    parser.EndElementHandler = reader.end
    parser.CharacterDataHandler = reader.data
    parser.SkippedEntityHandler = reader.entity
    fed = 0
    try:
        for start in range(0, len(body), chunk):
            piece = body[start : start + chunk]
            fed += len(piece)
            parser.Parse(piece, False)
        parser.Parse(b"", True)
    except _Limit:
        pass
    except pyexpat.ExpatError as exc:
        raise NotStreamable(f"{pyexpat.ErrorString(exc.code)} at byte {parser.CurrentByteIndex}") from exc
    out.bytes_parsed = fed
    if reader.rdf and not reader.rss1 and not out.entries:
        raise NotStreamable("rdf:RDF without RSS 1.0 elements")
    return out
