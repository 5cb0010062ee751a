"""Main-content text: chrome left out, content kept, the caller's tree untouched, and
near-duplicate fingerprints that ignore per-request chrome."""

from __future__ import annotations

import itertools
import random

import pytest
from selectolax.lexbor import LexborHTMLParser

from crawler.content.fingerprints import hamming, text_fingerprint
from crawler.content.maincontent import extract_main, is_chrome_name, main_text

# --- helpers ----------------------------------------------------------------------------

_WORDS = (
    "the of and to in a is that for it as was with be by on not this are from at which but "
    "river stone market council harbour winter garden letter bridge station village summer "
    "engine doctor teacher mountain forest meeting budget report season festival museum"
).split()


def prose(seed: int, words: int) -> str:
    """Deterministic sentences of common and topical words (different seeds, different text)."""
    rng = random.Random(seed)
    out, n = [], 0
    while n < words:
        k = rng.randint(8, 18)
        out.append(" ".join(rng.choice(_WORDS) for _ in range(k)).capitalize() + ".")
        n += k
    return " ".join(out)


def tree(html: str) -> LexborHTMLParser:
    return LexborHTMLParser(html)


def whole_text(t: LexborHTMLParser) -> str:
    """The page text as crawler.parse takes it (scripts etc. stripped, whitespace collapsed)."""
    t.strip_tags(["script", "style", "noscript", "template", "svg"])
    assert t.body is not None
    return " ".join(t.body.text(separator=" ").split())


ARTICLE = prose(1, 400)
NAV = " ".join(f'<li><a href="/s/{i}">Section{i}</a></li>' for i in range(20))


# --- chrome removal ---------------------------------------------------------------------


def test_landmarks_and_banner_role_are_left_out_and_the_article_kept() -> None:
    html = f"""<html><head><title>t</title><script>var tracker = 1;</script></head><body>
    <div role="banner">BannerWord site name</div>
    <header><a href="/">HeaderWord</a></header>
    <nav><ul>{NAV}</ul></nav>
    <main><article><h1>Headline</h1><p>{ARTICLE}</p></article>
    <aside>AsideWord related stories</aside></main>
    <footer>FooterWord rendered 2024-01-01T10:00:00Z request id 1234abcd</footer>
    <script>console.log("ScriptWord")</script>
    </body></html>"""
    got = main_text(tree(html))
    assert ARTICLE in got
    assert "Headline" in got
    for chrome in ("BannerWord", "HeaderWord", "Section3", "AsideWord", "FooterWord", "1234abcd", "ScriptWord"):
        assert chrome not in got


def test_a_header_inside_the_article_is_the_article_heading_and_stays() -> None:
    html = f"""<body><header>SiteHeaderWord</header><div class="wrap"><article>
    <header><h1>TitleWord</h1><p>BylineWord</p></header><p>{ARTICLE}</p>
    <footer>ArticleFooterWord share this</footer></article></div></body>"""
    got = main_text(tree(html))
    assert "TitleWord" in got and "BylineWord" in got and ARTICLE in got
    assert "SiteHeaderWord" not in got and "ArticleFooterWord" not in got


def test_chrome_named_by_class_or_id_is_left_out() -> None:
    html = f"""<body><div id="site-header"><div class="mainNav"><ul>{NAV}</ul></div></div>
    <div class="content-area"><p>{ARTICLE}</p>
    <div class="share-buttons">ShareWord</div><div id="comments" class="comments-area">CommentWord</div></div>
    <div class="sidebar-right"><div class="related-posts">RelatedWord</div></div>
    <div class="c-site-footer__inner">FooterWord</div><div id="topnav">TopnavWord</div>
    <div class="cookie-banner">CookieWord</div><form><p>NewsletterWord sign up</p></form>
    <div hidden>HiddenWord</div></body>"""
    got = main_text(tree(html))
    assert ARTICLE in got
    for chrome in ("Section1", "ShareWord", "CommentWord", "RelatedWord", "FooterWord", "TopnavWord", "CookieWord",
                   "NewsletterWord", "HiddenWord"):
        assert chrome not in got


def test_chrome_looking_classes_on_the_body_and_content_wrappers_do_not_eat_the_page() -> None:
    html = f"""<body class="has-header has-sidebar sticky-footer"><div class="page-with-sidebar">
    <article class="post-header-wrapper"><h1>TitleWord</h1><div class="article-body pagination-first">
    <p>{ARTICLE}</p></div></article><div class="sidebar">SidebarWord</div></div></body>"""
    result = extract_main(tree(html))
    assert result.root == "article"
    assert "TitleWord" in result.text and ARTICLE in result.text
    assert "SidebarWord" not in result.text


@pytest.mark.parametrize(
    ("name", "chrome"),
    [
        ("site-footer", True),
        ("footer-links", True),
        ("mainNav", True),
        ("main-nav", True),
        ("topnav", True),
        ("all-screen-footer-wrap", True),
        ("c-site-footer__inner", True),
        ("site-footer--dark", True),
        ("article__footer", True),
        ("related-posts", True),
        ("comments-area", True),
        ("cookie-banner", True),
        ("content-sidebar", True),
        ("footer2", True),
        ("has-header", False),  # a state of the page, not a part of it
        ("no-sidebar", False),
        ("post-header-wrapper", False),
        ("article-header", False),  # the article's own heading block
        ("article__header", False),
        ("entry-content", False),
        ("sidebar-content", False),
        ("article-body pagination-first", False),  # a content token outweighs a chrome one
        ("widget Blog", False),  # Blogger's post container
        ("documentContent__sharingContainer", False),
        ("text-navy", False),
        ("canvas-wrap", False),
        ("row container", False),
    ],
)
def test_class_and_id_names(name: str, chrome: bool) -> None:
    assert is_chrome_name(name) is chrome


def test_a_form_wrapping_the_whole_page_is_not_chrome() -> None:
    # ASP.NET WebForms put the entire body in one <form>: weak evidence, guarded by size.
    html = f"""<body><form id="aspnetForm" action="/x"><nav>{NAV}</nav>
    <div class="content"><p>{ARTICLE}</p></div><footer>FooterWord</footer></form></body>"""
    got = main_text(tree(html))
    assert ARTICLE in got
    assert "FooterWord" not in got and "Section2" not in got


def test_a_mega_menu_bigger_than_the_article_is_still_chrome() -> None:
    # Weak evidence (a class name) over half the page is kept unless it is a link list.
    menu = " ".join(f'<li><a href="/m/{i}">Menu entry number {i} of the site</a></li>' for i in range(150))
    article = prose(2, 150)
    html = f"""<body><div id="header"><ul>{menu}</ul></div>
    <div class="content"><p>{article}</p></div></body>"""
    got = main_text(tree(html))
    assert article in got
    assert "Menu entry" not in got


def test_dominant_article_is_the_root_but_a_listing_of_teasers_is_not() -> None:
    single = f"""<body><div class="intro">IntroWord {prose(3, 40)}</div>
    <article><p>{ARTICLE}</p></article></body>"""
    result = extract_main(tree(single))
    assert result.root == "article" and "IntroWord" not in result.text

    # Three teasers: each holds a third of the text, none dominates.
    teasers = "".join(f"<article><h2>Teaser {i}</h2><p>{prose(10 + i, 40)}</p></article>" for i in range(3))
    listing = f"<body><h1>LatestWord</h1>{teasers}</body>"
    result = extract_main(tree(listing))
    assert result.root == "body"
    assert "LatestWord" in result.text and "Teaser 0" in result.text and "Teaser 2" in result.text


def test_fallback_to_the_whole_text_when_no_main_content_is_left() -> None:
    # Everything is chrome: fingerprinting a handful of leftover words would make
    # unrelated pages of one site look alike, so the whole body text is used.
    html = f"""<body><header>Site</header><nav><ul>{NAV}</ul></nav><p>Loading the page</p>
    <footer>{prose(4, 60)}</footer></body>"""
    result = extract_main(tree(html))
    assert result.root == "fallback"
    assert " ".join(result.text.split()) == whole_text(tree(html))


def test_no_body_and_odd_markup_never_raise() -> None:
    assert extract_main(tree("<frameset><frame src=a></frameset>")).text == ""
    for html in ["", "<", "<body><nav>", "<div class=>" * 50, "<p>" + "<div id='footer'>x" * 300,
                 "<body>\x00\ufffd<article></article><main></main></body>"]:
        assert isinstance(main_text(tree(html)), str)


def test_the_callers_tree_is_left_as_it_was() -> None:
    html = f"""<body><header>H</header><nav>{NAV}</nav><main><p>{ARTICLE}</p>
    <div class="related">R</div><script>s()</script></main><footer>F</footer></body>"""
    t = tree(html)
    before = t.html
    first = main_text(t)
    assert t.html == before
    assert main_text(t) == first  # and so a second call sees the same page


def test_given_body_text_gives_the_same_result() -> None:
    html = f"""<body><nav>{NAV}</nav><main><p>{ARTICLE}</p></main><footer>F</footer>
    <script>ScriptWord()</script></body>"""
    standalone = main_text(tree(html))
    t = tree(html)
    body_text = whole_text(t)  # as parse_page leaves the tree: scripts already stripped
    assert main_text(t, body_text) == standalone


# --- near-duplicate fingerprints ----------------------------------------------------------


def page(article: str, stamp: str, related: list[str]) -> str:
    links = "".join(f'<li><a href="/r/{i}">{r}</a></li>' for i, r in enumerate(related))
    footer_links = " ".join(f'<a href="/i/{i}">Info page {i}</a>' for i in range(30))
    return f"""<!DOCTYPE html><html><head><title>T</title></head><body>
    <header><a href="/">Daily Example</a><nav><ul>{NAV}</ul></nav></header>
    <main><article><h1>Headline of the day</h1><p>{article}</p></article>
    <aside><h3>Related</h3><ul>{links}</ul></aside></main>
    <footer>{footer_links}<p>Page rendered {stamp}</p></footer></body></html>"""


def _stamp(rng: random.Random) -> str:
    rid = "-".join(rng.randbytes(n).hex() for n in (4, 2, 2, 2, 6))
    return (f"2024-11-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:"
            f"{rng.randint(0, 59):02d}Z by web-{rng.randint(1, 40)} request id {rid} trace {rng.randbytes(8).hex()}")


def test_copies_differing_only_in_footer_stamp_are_near_duplicates_by_main_content() -> None:
    rng = random.Random(7)
    article = prose(5, 1500)  # ~10 KB of text
    related = [f"Related story number {i}" for i in range(8)]
    fps = []
    for _ in range(12):
        fp = text_fingerprint(main_text(tree(page(article, _stamp(rng), related))))
        assert fp is not None
        fps.append(fp)
    assert max(hamming(a, b) for a, b in itertools.combinations(fps, 2)) <= 3


def _fingerprint(html: str) -> int:
    """The simhash of a page's main text (long enough to have one)."""
    fp = text_fingerprint(main_text(tree(html)))
    assert fp is not None
    return fp


def test_copies_with_a_rotating_related_box_are_near_duplicates_by_main_content() -> None:
    rng = random.Random(8)
    article = prose(6, 1500)
    pool = [f"Story {w} about the {x}" for w in _WORDS[20:30] for x in _WORDS[30:34]]
    fps = [_fingerprint(page(article, "2024-01-01", rng.sample(pool, 8))) for _ in range(12)]
    assert max(hamming(a, b) for a, b in itertools.combinations(fps, 2)) <= 3


def test_distinct_articles_under_the_same_chrome_stay_apart() -> None:
    # Leaving the shared chrome out must not make different articles of one site collide.
    related = [f"Related story number {i}" for i in range(8)]
    fps = [_fingerprint(page(prose(100 + i, 600), "2024-01-01", related)) for i in range(6)]
    assert min(hamming(a, b) for a, b in itertools.combinations(fps, 2)) > 3
