"""Main-content text of a parsed page: what near-duplicate fingerprints are taken over.

A page's visible text includes its chrome: site header, navigation, sidebars, "related"
and "trending" link lists, cookie notices, and a footer that may carry a render time or
a request id. SimHash over all of it (``crawler/content/fingerprints.py``) lets chrome that changes on
every request push two copies of one article more than 3 bits apart. This module gives
the text of the page's main content instead, by rules that are cheap (a few C-side
selector walks and a Python pass over the block containers) and that hold on real pages
(measured on the shared corpus of 273 saved pages: ``benchmarks/neardup.py``):

1. Chrome is left out of the body: the landmark elements ``nav``, ``aside``, ``footer``
   and ``header`` (but not a header inside an ``article`` or ``main``: HTML-AAM maps
   ``header`` to the banner landmark only when it is not scoped to one), the ARIA roles
   of landmarks and widgets (banner, navigation, contentinfo, complementary, search,
   menu, dialog, ...), form controls, and containers whose class or id names chrome
   (``site-footer``, ``main-nav``, ``related-posts``, ``cookie-banner``; see
   :func:`is_chrome_name`).
2. Weak evidence (a class or id, ``<form>``, ``<header>``, ``hidden``/``aria-hidden``)
   never removes an element holding more than half of the body's text unless that text
   is nearly all link text (a mega-menu): ASP.NET pages wrap the whole body in a
   ``<form>``, some sites set ``aria-hidden`` on the page while a dialog is open, and
   class names are only names.
3. Of what is left, the root is the page's dominant ``<article>`` (the top-level one
   holding most of the article text, so a listing of teasers has none), else its largest
   ``<main>`` / ``role=main``, when it holds a fair share of the remaining text; else the
   body. Taking the root after step 1 lets a short article on a page heavy with chrome
   still be found.
4. When the result is small (under 30 words, or under 5% of the body text), the whole
   body text is returned instead: a fingerprint over a few words would make unrelated
   pages of one site look alike.

The caller's tree is left as it was: removed elements are detached, not destroyed, and
put back before returning. docs/invariants.md #7: web input never raises out of here.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from selectolax.lexbor import LexborHTMLParser, LexborNode

log = logging.getLogger(__name__)

__all__ = ["MIN_MAIN_SHARE", "MIN_MAIN_WORDS", "MainText", "extract_main", "is_chrome_name", "main_text"]

#: Below this many words the main text is not trusted and the whole body text is used.
MIN_MAIN_WORDS = 30
#: Nor below this share of the body text (in characters). Low on
#: purpose: on pages heavy with chrome a real article can be a tenth of the text.
MIN_MAIN_SHARE = 0.05
#: Weak evidence never removes an element holding more than this share of the body
#: text, unless that element is mostly link text (a mega-menu).
_GUARD_SHARE = 0.5
_MENU_LINK_SHARE = 0.7
#: An article or main is the root only when it holds this share of the text left after
#: chrome removal (below it, the page's content is mostly elsewhere).
_ROOT_SHARE = 0.25
#: An article is dominant when it holds this share of the text of all top-level
#: articles (a listing of teasers, or a CMS that wraps each block in <article>, has none).
_DOMINANT_SHARE = 0.6

# Never text (parse.py strips the same set before taking the page text).
_NEVER_TEXT_TAGS = frozenset({"script", "style", "noscript", "template", "svg"})
_NEVER_TEXT = ", ".join(sorted(_NEVER_TEXT_TAGS))
# Elements whose class/id/role is judged: block containers. Inline elements (a, span,
# li, img: 60% of the classed elements on the corpus pages) are left to the container
# around them.
_CONTAINER_TAGS = ("div", "section", "ul", "ol", "dl", "p", "table", "header", "form")
# Landmarks and form controls that are chrome wherever they stand.
_CHROME_TAGS = frozenset({"footer", "nav", "aside", "select", "button", "dialog"})
_JUDGED_TAGS = frozenset(_CONTAINER_TAGS) | _CHROME_TAGS
# With the never-text elements too, for a tree whose body text was given (one walk).
_JUDGED_ALL = _JUDGED_TAGS | _NEVER_TEXT_TAGS


def _tag_ids(names: frozenset[str]) -> dict[int, str]:
    """lexbor's tag id of each name (HTML's names have fixed ids, the same in every
    document; only unknown names get ids per document, and none is asked for here)."""
    ids: dict[int, str] = {}
    for name in names:
        body = LexborHTMLParser(f"<body><{name}></{name}>").body
        node = body.css_first(name) if body is not None else None
        if node is None or node.tag != name:
            raise RuntimeError(f"selectolax does not parse <{name}> as {name}")
        ids[node.tag_id] = name
    return ids


# Reading ``node.tag`` builds a str (~500 instructions); ``node.tag_id`` is an int. The
# chrome walk reads the id of every element and the name only of judged ones.
_JUDGED_TAG_IDS = _tag_ids(_JUDGED_TAGS)
_JUDGED_ALL_IDS = _tag_ids(_JUDGED_ALL)
_ARTICLE_ID = next(iter(_tag_ids(frozenset({"article"}))))
# ARIA roles of page chrome (WAI-ARIA 1.2 landmark and widget roles).
_CHROME_ROLES = frozenset(
    {
        "banner",
        "navigation",
        "contentinfo",
        "complementary",
        "search",
        "menu",
        "menubar",
        "toolbar",
        "dialog",
        "alertdialog",
    }
)

# Words that name chrome when they head a class/id name or start it.
_CHROME_WORDS = frozenset(
    """
    nav navbar navi navigation menu menus submenu megamenu menubar topbar toolbar
    masthead header footer sidebar breadcrumb breadcrumbs crumbs
    cookie cookies consent gdpr cmp banner
    share shares sharing sharebar social socials
    related recommended recommendations trending popular outbrain taboola
    comment comments disqus newsletter subscribe subscription signup signin login
    promo sponsor sponsored ad ads advert adverts advertisement
    pagination pager copyright skip skiplink skiplinks popup modal overlay search
    """.split()
)
# A part that says the element belongs to the content ("article-header", "post-header",
# "sidebar-content"): then a chrome word that does not head the name does not count.
_CONTENT_WORDS = frozenset({"article", "post", "entry", "content", "main", "story", "text", "body"})
# State prefixes describe the page, not the element: "has-header", "no-sidebar".
_STATE_WORDS = frozenset({"has", "with", "without", "no", "not", "is", "show"})
# Chrome words that an adjacent content word turns into part of the content.
_HEADINGS = frozenset({"header", "masthead"})
# Layout words say where a box sits, not what it holds: "footer-wrap", "sidebar-right",
# "all-screen-footer-wrap" are named by the word before them.
_LAYOUT_WORDS = frozenset(
    """
    wrap wrapper container inner outer holder box area section block top bottom left right
    list links items item bar row col column columns region zone module widget widgets panel
    group part el element fluid grid wide full fixed sticky desktop mobile primary secondary global
    """.split()
)
# Chrome words that sites glue to another word: "topnav", "quicknavi", "mainmenu",
# "pagefooter" (suffix), "navtop", "menuwrap" (prefix, followed by a layout word).
_SUFFIX_STEMS = ("navigation", "navbar", "navi", "nav", "menu", "footer", "header", "sidebar", "breadcrumbs",
                 "breadcrumb", "masthead")
_PREFIX_STEMS = ("navi", "nav", "menu", "footer", "header", "sidebar", "cookie", "social")

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_NON_ALNUM = re.compile(r"[^a-z0-9]+")
_CHROME, _CONTENT = 2, 1  # token verdicts (chrome wins over content inside one token)
_name_cache: dict[str, bool] = {}
_NAME_CACHE_MAX = 100_000  # distinct class/id strings; cleared when full (bounded memory)


def _stem(word: str) -> str:
    """A glued chrome word ("topnav", "navtop", "footer2") -> its chrome word."""
    word = word.rstrip("0123456789") or word
    if word in _CHROME_WORDS or len(word) <= 3:
        return word
    for stem in _SUFFIX_STEMS:
        if word.endswith(stem):
            return stem
    for stem in _PREFIX_STEMS:
        if word.startswith(stem) and word[len(stem) :] in _LAYOUT_WORDS:
            return stem
    return word


def _words(name: str) -> list[str]:
    """"mainNav" / "main-nav" / "main_nav2" -> ["main", "nav"] (numbers dropped)."""
    return [_stem(p) for p in _NON_ALNUM.split(_CAMEL.sub("-", name).lower()) if p and not p.isdigit()]


def _judge_parts(parts: list[str]) -> int:
    """One name's words (``["site", "footer"]``) -> _CHROME, _CONTENT or 0 (neither)."""
    if not parts or not _STATE_WORDS.isdisjoint(parts):
        return 0
    end = len(parts)
    while end > 1 and parts[end - 1] in _LAYOUT_WORDS:
        end -= 1
    start = 0  # skip namespace prefixes ("c-header", "js-nav", "l-footer")
    while start < end - 1 and len(parts[start]) <= 2 and parts[start] not in _CHROME_WORDS:
        start += 1
    head, first = parts[end - 1], parts[start]
    has_content = not _CONTENT_WORDS.isdisjoint(parts)
    if head in _CHROME_WORDS:
        # "article-header" is the article's heading block; "article-footer", "main-nav"
        # and "content-sidebar" are still chrome.
        return _CONTENT if head in _HEADINGS and has_content else _CHROME
    if first in _CHROME_WORDS and not has_content:
        return _CHROME
    return _CONTENT if has_content else 0


def _judge_token(token: str) -> int:
    # BEM: "block__element--modifier". The modifier says nothing about the role. The
    # block is judged as a name; an element only by its head word: "article__footer"
    # and "page__footer" are chrome, "documentContent__sharingContainer" is not.
    block, _, element = token.split("--", 1)[0].partition("__")
    verdict = _judge_parts(_words(block))
    if element and verdict != _CHROME:
        # Literally its last word (no layout stripping): an element of a block is part
        # of that block unless it says otherwise ("documentContent__sharingContainer").
        words = _words(element.rpartition("__")[2])
        if words and words[-1] in _CHROME_WORDS:
            # "article__header" is the article's heading, as "article-header" is.
            return _CONTENT if words[-1] in _HEADINGS and verdict == _CONTENT else _CHROME
    return verdict


def is_chrome_name(value: str) -> bool:
    """True when a class attribute or an id names page chrome.

    A token is chrome when its last word is a chrome word (``site-footer``, ``mainNav``,
    ``content-sidebar``) or its first word is one and no word says it belongs to the
    content (``footer-links`` but not ``sidebar-content``). A token naming the content
    (``article-body``, ``entry-content``, ``article-header``) outweighs chrome tokens:
    ``class="article-body pagination-first"`` holds an article. ``post-header-wrapper``
    is not chrome; state classes (``has-header``, ``no-sidebar``) never count. Verdicts
    are cached: sites repeat their class names on every page.
    """
    verdict = _name_cache.get(value)
    if verdict is None:
        seen = {_judge_token(token) for token in value.split()}
        verdict = _CHROME in seen and _CONTENT not in seen
        if len(_name_cache) >= _NAME_CACHE_MAX:
            _name_cache.clear()
        _name_cache[value] = verdict
    return verdict


@dataclass(frozen=True, slots=True)
class MainText:
    """The main-content text of a page and how it was found (for stats and benchmarks)."""

    #: The text nodes of the main content, stripped and joined by one space; whitespace
    #: inside a text node is as on the page (``" ".join(text.split())`` to collapse it).
    text: str
    #: Where the text came from: the dominant article, the main element, the body less
    #: its chrome, "fallback" (the whole body text, rule 4) or "none" (no body).
    root: Literal["article", "main", "body", "fallback", "none"]
    #: Elements left out as chrome (outermost ones; scripts and styles not counted).
    dropped: int
    #: What extraction raised when odd markup broke it (the whole text stands in, root
    #: "fallback"); None when it ran through. The pipeline counts these.
    error: str | None = None


_Detached = list[tuple[LexborNode, LexborNode | None, LexborNode | None]]
_SCOPES = frozenset({"article", "main"})

# NOTE: nodes are compared by ``mem_id``: LexborNode.__eq__ compares serialized HTML
# (two serializations per comparison, and equal markup in two places compares equal).


def _text(node: LexborNode) -> str:
    """The node's text nodes, stripped, joined by one space (whitespace inside a text node
    is kept: the SimHash tokenizer ignores it, and collapsing it in Python would cost
    more than the rest of this module on a text-heavy page: ~70 us per 14 KB of text)."""
    return node.text(separator=" ", strip=True, skip_empty=True)


def _size(node: LexborNode) -> int:
    """Cheap text size for shares: characters of the non-blank text nodes (indentation
    would count the deeply nested markup of menus several times over)."""
    return len(node.text(skip_empty=True))


def _scoped(node: LexborNode) -> bool:
    """True when ``node`` sits inside an ``article`` or ``main`` element."""
    parent = node.parent
    while parent is not None:
        tag = parent.tag
        if tag in _SCOPES:
            return True
        if tag == "body":
            return False
        parent = parent.parent
    return False


def _verdict(node: LexborNode, tag: str) -> int:
    """0: keep; 1: chrome on weak evidence (guarded by size); 2: chrome on strong evidence."""
    if tag in _CHROME_TAGS:
        return 2
    attrs = node.attributes
    if not attrs:  # the common case: no class, id or role to judge
        if tag == "header":
            return 0 if _scoped(node) else 1
        return 1 if tag == "form" else 0
    role = attrs.get("role")
    if role:
        # role is a token list; the first token is the one a browser uses when it knows
        # it (WAI-ARIA 1.2, 5.4), and every role named here is known.
        first = role.split(None, 1)[0].lower() if not role.isspace() else ""
        if first in _CHROME_ROLES:
            return 2
        if first == "main":
            return 0
    if tag == "header":
        # HTML-AAM: a header scoped to an article or main is that section's heading
        # (title, byline), not the page banner.
        return 0 if _scoped(node) else 1
    if tag == "form" or "hidden" in attrs or attrs.get("aria-hidden") == "true":
        return 1
    # Class and id are judged together: id="main" outweighs class="sidebar-right".
    klass = attrs.get("class")
    ident = attrs.get("id")
    if klass is None:
        return 1 if ident and is_chrome_name(ident) else 0
    return 1 if is_chrome_name(f"{klass} {ident}" if ident else klass) else 0


def _drop_chrome(
    body: LexborNode, detach: Callable[[LexborNode], None], judged: dict[int, str]
) -> tuple[int, list[LexborNode]]:
    """Detach the chrome elements under ``body`` (rules 1 and 2), and the never-text ones
    when ``judged`` (tag id -> tag name) lists them; returns how many chrome elements went, and the
    ``article`` elements left in the body, in document order (for :func:`_choose_root`,
    which then needs no walk of its own to find them).

    One ``css("*")`` walk lists the elements in document order (cheaper in lexbor than a
    selector list of tag names, which costs a test per tag per element); the tag is
    checked in Python. Only outermost chrome is detached: the elements inside it, which
    follow it in the list, are skipped unjudged, so nested menus cost no text walks and
    fewer nodes have to be put back.
    """
    body_size = -1  # measured when a guard first needs it
    dropped = 0
    articles: list[LexborNode] = []
    nodes = body.css("*")
    count = len(nodes)
    i = 0
    while i < count:
        node = nodes[i]
        i += 1
        tag_id = node.tag_id
        tag = judged.get(tag_id)
        if tag is None:
            if tag_id == _ARTICLE_ID:  # not inside detached chrome: those are skipped below
                articles.append(node)
            continue
        never_text = tag in _NEVER_TEXT_TAGS
        verdict = 2 if never_text else _verdict(node, tag)
        if verdict == 0:
            continue
        if verdict == 1:
            if body_size < 0:
                body_size = _size(body)
            size = _size(node)
            # A mega-menu is not a wrapper: it is nearly all link text (measured on the
            # corpus: 0.74-1.0 for menus, at most 0.51 for wrappers holding content).
            if size > _GUARD_SHARE * body_size and sum(_size(a) for a in node.css("a")) < _MENU_LINK_SHARE * size:
                continue
        after = _following(node, body)
        detach(node)
        dropped += not never_text
        if after is None:
            break
        stop = after.mem_id
        while i < count and nodes[i].mem_id != stop:
            i += 1
    return dropped, articles


def _following(node: LexborNode, body: LexborNode) -> LexborNode | None:
    """The first element after ``node``'s subtree in document order (None: none in body)."""
    body_id = body.mem_id
    current: LexborNode | None = node
    while current is not None and current.mem_id != body_id:
        sibling = current.next
        while sibling is not None:
            if sibling.is_element_node:
                return sibling
            sibling = sibling.next
        current = current.parent
    return None


def _choose_root(body: LexborNode, articles: list[LexborNode]) -> tuple[LexborNode, Literal["article", "main", "body"]]:
    """Rule 3: the dominant article, else the largest main, else the body (``articles``:
    the body's article elements in document order)."""
    floor = -1.0
    if articles:
        nested = {n.mem_id for n in body.css("article article")}
        sizes = [(_size(n), n) for n in articles if n.mem_id not in nested]
        size, best = max(sizes, key=lambda item: item[0])
        floor = _ROOT_SHARE * _size(body)
        if size >= floor and size >= _DOMINANT_SHARE * sum(s for s, _ in sizes):
            return best, "article"
    mains = [n for n in body.css("main, [role]") if n.tag == "main" or _role(n) == "main"]
    if mains:
        size, best = max(((_size(n), n) for n in mains), key=lambda item: item[0])
        if floor < 0:
            floor = _ROOT_SHARE * _size(body)
        if size >= floor:
            return best, "main"
    return body, "body"


def _role(node: LexborNode) -> str:
    role = node.attributes.get("role") or ""
    return role.split()[0].lower() if role.strip() else ""


def extract_main(tree: LexborHTMLParser, body_text: str | None = None, body_nodes_text: str | None = None) -> MainText:
    """Find the main-content text of a parsed page (see the module docstring for the rules).

    ``body_text``, when the caller already has it, is the page's whole visible text with
    ``script/style/noscript/template/svg`` left out and whitespace collapsed (what
    ``crawler.parse.parse_page`` stores as ``ParsedPage.text``); it saves one text pass.
    ``body_nodes_text``, given with it, is the body's text as this module takes a
    node's text (text nodes stripped and joined by one space) on the tree as passed;
    when the whole body is the main content and nothing was detached, it is the
    result, and a second walk over the body is saved. The tree is unchanged afterwards. Never raises on web input: on an
    unexpected error the whole body text is returned.
    """
    body = tree.body
    if body is None:
        return MainText("", "none", 0)
    detached: _Detached = []

    def detach(node: LexborNode) -> None:
        detached.append((node, node.parent, node.next))
        node.decompose(recursive=False)  # unlinks the subtree; nothing is freed

    full = body_text or ""
    try:
        if body_text is None:
            for node in body.css(_NEVER_TEXT):
                detach(node)
            full = _text(body)
            dropped, articles = _drop_chrome(body, detach, _JUDGED_TAG_IDS)
        else:
            dropped, articles = _drop_chrome(body, detach, _JUDGED_ALL_IDS)
        root, kind = _choose_root(body, articles)
        if body_nodes_text is not None and body_text is not None and kind == "body" and not detached:
            text = body_nodes_text  # the body as given: the text the caller already took
        else:
            text = _text(root)
    except Exception as exc:  # noqa: BLE001 - docs/invariants.md #7: odd markup costs this step, not the page
        log.debug("main-content extraction failed (%r): the whole text stands in", exc)
        # The whole text when it was reached, else nothing (no fingerprint beats a wrong one).
        return MainText(full, "fallback", 0, error=f"{type(exc).__name__}: {exc}"[:500])
    finally:
        _restore(detached)
    # split(None, n) stops after n words: a cheap "fewer than MIN_MAIN_WORDS words".
    if len(text.split(None, MIN_MAIN_WORDS)) < MIN_MAIN_WORDS or len(text) < MIN_MAIN_SHARE * len(full):
        return MainText(full, "fallback", dropped)
    return MainText(text, kind, dropped)


def _restore(detached: _Detached) -> None:
    """Undo the detachments, last first, so each goes back exactly where it was."""
    while detached:
        node, parent, nxt = detached.pop()
        if nxt is not None:
            nxt.insert_before(node, move=True)
        elif parent is not None:
            parent.insert_child(node, move=True)


def main_text(tree: LexborHTMLParser, body_text: str | None = None, body_nodes_text: str | None = None) -> str:
    """The main-content text of a parsed page (text nodes joined by one space).

    Give it the selectolax lexbor tree the crawler already parsed (no second parse);
    pass ``body_text`` (and ``body_nodes_text``) when the page's whole text is at hand
    (see :func:`extract_main`).
    Feed the result to :func:`crawler.content.fingerprints.text_fingerprint`, so that chrome which
    changes per request (render times, request ids, rotating link lists) does not move
    the near-duplicate fingerprint.
    """
    return extract_main(tree, body_text, body_nodes_text).text
