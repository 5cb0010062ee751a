"""Rendering the synthetic web's pages to bytes: HTML in every link spelling, PNG, 3 MB.

A :class:`~crawler.testing.webtypes.Page` says what a page is (its links, kind, footer);
:class:`PageRenderer` writes it. Rendering is deterministic: the text of a page follows
from the web's seed and the page's ``text_key`` (or its URL), so pages sharing a
``text_key`` share their text and differ only where their ``Page`` values differ. Links
are written in the spelling each :class:`~crawler.testing.webtypes.Link` names, resolved
against the page's ``<base href>`` or its own directory, so a crawler must canonicalize
them to find the page again (RFC 3986 section 5 and the WHATWG URL standard decide).
"""

from __future__ import annotations

import array
import html
import operator
import posixpath
import struct
import zlib
from functools import lru_cache
from random import Random
from typing import Callable
from urllib.parse import unquote

from crawler.testing.webtypes import JUNK_HREFS, UNRESERVED, Link, Page, Profile

__all__ = ["PageRenderer", "draw_words", "vocabulary"]


@lru_cache(maxsize=1)
def vocabulary() -> tuple[str, ...]:
    """4096 pronounceable pseudo-words, fixed for all seeds (the seed picks among them)."""
    onsets = ("b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v",
              "w", "z", "br", "ch", "cl", "dr", "gr", "pl", "st", "tr", "sh")
    vowels = ("a", "e", "i", "o", "u", "ai", "ea", "io", "ou")
    codas = ("", "", "n", "r", "s", "t", "l", "m", "nd", "st")
    rng = Random("raycrawl-vocabulary-1")
    seen: set[str] = set()
    words: list[str] = []
    while len(words) < 4096:
        w = "".join(rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas)
                    for _ in range(rng.randint(1, 3)))
        if w not in seen:
            seen.add(w)
            words.append(w)
    return tuple(words)


@lru_cache(maxsize=1)
def _vocab16() -> tuple[str, ...]:
    """The vocabulary repeated to 65536 entries, indexed by 16-bit random numbers."""
    return vocabulary() * (65536 // len(vocabulary()))


def draw_words(rng: Random, vocab: tuple[str, ...], k: int) -> list[str]:
    """``k`` words drawn uniformly from ``vocab``; for the main vocabulary, at C speed
    (two random bytes per word instead of a Python-level ``choices`` loop)."""
    if k <= 0:
        return []
    if vocab is vocabulary():
        idx = array.array("H", rng.randbytes(2 * k))
        return [_vocab16()[idx[0]]] if k == 1 else list(operator.itemgetter(*idx)(_vocab16()))
    return rng.choices(vocab, k=k)


_RU_WORDS = tuple(
    "город река дом лес поле небо окно книга слово время работа жизнь дорога память "
    "утро вечер зима весна лето осень море гора ветер солнце земля вода огонь письмо "
    "школа друг голос улица сад мост край путь песня свет тень история страница".split()
)


class PageRenderer:
    """Writes the bytes of pages of one web (``seed``, ``profile``).

    ``netloc(host)`` gives ``host[:port]`` for absolute links: the web's, so bodies
    rendered before and after :meth:`SyntheticWeb.bind` differ only in the port.
    """

    def __init__(self, seed: int, profile: Profile, netloc: Callable[[str], str]) -> None:
        self.seed = seed
        self.profile = profile
        self.netloc = netloc

    def href(self, link: Link, serve_host: str, base_dir: str) -> str:
        """The href attribute of ``link`` on a page of ``serve_host`` whose links resolve
        against ``base_dir``, written in the link's spelling."""
        host = link.host or serve_host
        path = link.path_qs
        sp = link.spelling
        net = self.netloc(host)
        if sp == "absolute":
            return f"http://{net}{path}"
        if sp == "scheme-relative":
            return f"//{net}{path}"
        if sp == "upper-case":
            return f"HTTP://{net.upper()}{path}"
        if sp == "relative":
            return _relative(base_dir, path)
        if sp == "dot-relative":
            return "./" + _relative(base_dir, path)
        if sp == "parent-relative":
            return "../" * max(1, base_dir.count("/") - 1) + path[1:]
        if sp == "raw-unicode":
            return unquote(path)
        prefix = f"http://{net}" if link.host else ""
        if sp == "fragment":
            return f"{prefix}{path}#section-{len(path) % 7}"
        if sp == "tracking":
            return f"{prefix}{path}{'&' if '?' in path else '?'}utm_source=x&utm_medium=y"
        if sp == "percent-escape":
            return prefix + _escape_unreserved(path)
        if sp == "whitespace":
            cut = path.find("/", 1) + 1 or len(path)
            return f"\n \t{prefix}{path[:cut]}\n{path[cut:]}  \n"
        return path  # root-relative

    def html(self, page: Page) -> bytes:
        """The HTML bytes of an html-like page (deterministic)."""
        if page.kind == "article":
            return self.article(page)
        key = page.text_key or page.host + page.path_qs
        rng = Random(f"{self.seed}|text|{key}")
        cyr = page.kind == "cp1251"
        vocab = _RU_WORDS if cyr else vocabulary()
        words = draw_words(rng, vocab, rng.randint(*self.profile.words))
        anchor_words = draw_words(rng, vocab, 2 * len(page.links))
        title = " ".join(words[:4]).capitalize()
        if page.trap == "faceted-search":
            words = words + ["showing"] + page.path_qs.partition("?")[2].replace("&", " ").replace("=", " ").split()
        elif page.trap:
            words = words + page.path_qs.strip("/").split("/")
        serve = page.host
        base_dir = "/"
        head = ["<!DOCTYPE html>\n<html lang=\"ru\">" if cyr else "<!DOCTYPE html>\n<html lang=\"en\">", "<head>"]
        if not cyr:
            head.append('<meta charset="utf-8">')
        head.append(f"<title>{title}</title>")
        if page.base:
            base_dir = page.base[: page.base.rfind("/") + 1]
            href = f"http://{self.netloc(serve)}{page.base}" if page.base_absolute else page.base
            head.append(f'<base href="{html.escape(href)}">')
        else:
            base_dir = page.path_qs.partition("?")[0]
            base_dir = base_dir[: base_dir.rfind("/") + 1]
        if page.meta_nofollow:
            head.append('<meta name="robots" content="index, nofollow">')
        head.append("</head>\n<body>\n<h1 id=\"top\">" + title + "</h1>")
        anchors: list[str] = []
        areas: list[str] = []
        rels = ("nofollow", "nofollow noopener", "NoFollow", "ugc nofollow")
        for n, link in enumerate(page.links if page.kind != "malformed" else ()):
            href = html.escape(self.href(link, serve, base_dir), quote=True)
            rel = f' rel="{rels[n % len(rels)]}"' if link.nofollow else ""
            if link.area:
                areas.append(f'<area shape="rect" coords="0,{n * 10},40,{n * 10 + 10}" href="{href}"{rel} alt="{words[n % len(words)]}">')
            else:
                text = f"{anchor_words[2 * n]} {anchor_words[2 * n + 1]}"
                anchors.append(f'<a href="{href}"{rel}>{text}</a>')
        for name in page.junk:
            anchors.append(f'<a href="{html.escape(JUNK_HREFS[name], quote=True)}">{name}</a>')
        if not page.base and page.kind == "html":
            anchors.append('<a href="#top">top</a>')
        paras = max(1, len(words) // 60)
        step = -(-len(words) // paras)
        per = -(-len(anchors) // paras) if anchors else 0
        body = []
        for p in range(paras):
            chunk = " ".join(words[p * step:(p + 1) * step])
            extra = " ".join(anchors[p * per:(p + 1) * per])
            body.append(f"<p>{chunk} {extra}</p>" if extra else f"<p>{chunk}</p>")
        if areas:
            body.append('<map name="nav">' + "".join(areas) + "</map>")
        if page.footer:
            body.append(f"<footer><p>{page.footer}</p></footer>")
        doc = "\n".join(head + body) + "\n</body>\n</html>\n"
        if page.kind == "malformed":
            return _malformed(doc)
        return doc.encode("windows-1251" if cyr else "utf-8")

    def article(self, page: Page) -> bytes:
        """One copy of a chrome-variant article: nav, main article, aside, footer.

        The ``<title>`` and ``<main>`` come from the article's ``text_key`` alone (~10 KB,
        no links), so every copy has them byte for byte; the ``<nav>`` and ``<aside>``
        text is drawn per URL (each copy's chrome differs) and the footer is the page's.
        """
        rng = Random(f"{self.seed}|article|{page.text_key}")
        words = draw_words(rng, vocabulary(), rng.randint(1000, 1150))
        title = " ".join(words[:6]).capitalize()
        paras, at = [], 6
        while at < len(words):
            n = rng.randint(60, 140)
            paras.append(f"<p>{' '.join(words[at:at + n])}</p>")
            at += n
        chrome = Random(f"{self.seed}|chrome|{page.host}{page.path_qs}")
        base_dir = page.path_qs[: page.path_qs.rfind("/") + 1]

        def anchor(link: Link) -> str:
            href = html.escape(self.href(link, page.host, base_dir), quote=True)
            return f'<a href="{href}">{" ".join(draw_words(chrome, vocabulary(), 2))}</a>'

        nav, aside = page.links[:page.nav], page.links[page.nav:]
        head = ['<!DOCTYPE html>\n<html lang="en">', "<head>", '<meta charset="utf-8">',
                f"<title>{title}</title>", "</head>\n<body>"]
        body = []
        if nav:
            sections = " ".join(draw_words(chrome, vocabulary(), chrome.randint(10, 20)))
            body.append("<header><nav>" + " | ".join(anchor(lk) for lk in nav) + f" <span>{sections}</span></nav></header>")
        body.append(f'<main>\n<article>\n<h1>{title}</h1>\n' + "\n".join(paras) + "\n</article>\n</main>")
        promo = " ".join(draw_words(chrome, vocabulary(), chrome.randint(40, 80)))
        body.append(f"<aside><h2>{' '.join(draw_words(chrome, vocabulary(), 2))}</h2><ul>"
                    + "".join(f"<li>{anchor(lk)}</li>" for lk in aside) + f"</ul><p>{promo}</p></aside>")
        body.append(f"<footer><p>{html.escape(page.footer or '')}</p></footer>")
        return ("\n".join(head + body) + "\n</body>\n</html>\n").encode()

    def png(self, page: Page) -> bytes:
        """A 16x16 PNG whose tEXt chunk holds an ``<a href>`` that is not a link."""
        rng = Random(f"{self.seed}|png|{page.host}{page.path_qs}")
        w = h = 16
        raw = b"".join(b"\x00" + bytes(rng.randrange(256) for _ in range(w * 3)) for _ in range(h))

        def chunk(tag: bytes, data: bytes) -> bytes:
            return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                + chunk(b"tEXt", b'Comment\x00<a href="/from-png">not a link</a>')
                + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))

    def oversized(self, page: Page) -> bytes:
        """``profile.oversized_bytes`` of HTML with one link past the end (``/after-big``)."""
        rng = Random(f"{self.seed}|big")
        para = ("<p>" + " ".join(draw_words(rng, vocabulary(), 2000)) + "</p>\n").encode()
        head = b'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>Oversized</title></head><body>\n'
        tail = b'<p><a href="/after-big">after the limit</a></p></body></html>\n'
        reps = -(-(self.profile.oversized_bytes - len(head) - len(tail)) // len(para))
        return head + para * reps + tail


def _relative(base_dir: str, path_qs: str) -> str:
    """A relative reference from directory ``base_dir`` (ends in '/') to ``path_qs``."""
    path, sep, query = path_qs.partition("?")
    rel = posixpath.relpath(path, base_dir)
    if rel == ".":
        rel = "./"
    elif path.endswith("/"):
        rel += "/"
    if ":" in rel.split("/", 1)[0]:  # would read as a scheme (RFC 3986 4.2)
        rel = "./" + rel
    return rel + sep + query


def _escape_unreserved(path: str) -> str:
    """Percent-encode the first unreserved character of each segment (mixed hex case)."""
    out = []
    for n, seg in enumerate(path.split("/")):
        if seg and seg[0] in UNRESERVED and seg[0] != ".":
            code = f"{ord(seg[0]):02X}" if n % 2 else f"{ord(seg[0]):02x}"
            seg = "%" + code + seg[1:]
        out.append(seg)
    return "/".join(out)


def _malformed(doc: str) -> bytes:
    """Broken HTML around one good link: unclosed and mis-nested tags, invalid UTF-8,
    an unquoted attribute, links inside <script> text and a comment (not links), and an
    unterminated comment at the end."""
    start = doc.index("<body>") + len("<body>")
    body = doc[start:doc.rindex("</body>")]
    mid = len(body) // 2
    return (
        doc[:start].replace("</head>", "").encode()
        + b"\n<div><p>unclosed <span><b><i>mis-nested</b></i> \xff\xfe\x80 bad bytes \xc3\x28 \xed\xa0\x80"
        + body[:mid].encode()
        + b"\n<table><tr><td>cell<td>cell<tr><td>row"
        + b"\n<p>go to <a href=/broken-target class=x>the target</a> then <a href='/'>home</a>"
        + b"\n<script>var s = '<a href=\"/in-script\">x</a>'; if (1 < 2) {}</script>"
        + b'\n<!-- <a href="/in-comment">hidden</a> -->'
        + body[mid:].encode()
        + b"\n</span></div></div></div></p></i>\n<!-- unterminated comment <a href=\"/in-comment\">"
    )
