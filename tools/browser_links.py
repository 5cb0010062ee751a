#!/usr/bin/env python3
"""Regenerate ``tests/fixtures/browser_links.json.gz``: the links a real browser resolves.

For every page of the corpus (``manifest.jsonl``: ``file``, ``url``) this loads the saved
HTML into headless Chromium *as if* it had been fetched from the page's original URL, and
records, in document order, ``a.href`` of every ``a[href], area[href]`` element: the
browser's fully resolved URL (``<base href>``, whitespace stripping, query encoded in the
document's charset, IDNA, ...). ``tests/unit/test_corpus_links.py`` compares the crawler's
``parse_page(...).links[i].resolved`` against it without a browser.

No packet leaves the machine, although the URLs are real internet URLs:

* every request the page makes is intercepted by the DevTools ``Fetch`` domain *before*
  any network activity: the page's own document is answered from the file
  (``Fetch.fulfillRequest``), a later main-frame navigation (``<meta http-equiv=refresh>``)
  with ``204 No Content`` (so the page stays loaded and nothing is fetched), and every
  other request (images, scripts, iframes...) is failed (``Fetch.failRequest``);
* Chromium's host resolver maps every name to NOTFOUND (second line of defence), and
  background networking, component updates and sync are disabled.

JavaScript is disabled (``--blink-settings=scriptEnabled=false``), as the crawler does not
run scripts; the script checks it on a self-test page before anything else, and aborts if a
script runs. ``<noscript>`` content is then parsed as markup, as the crawler parses it.

The document is served as ``Content-Type: text/html`` with no charset, so the browser
determines the encoding from BOM / ``<meta>`` like the crawler (which is given the same
content type); where neither declares one, Chromium guesses (see docs/browser-agreement.md).

Usage (Debian: ``apt-get install chromium``; not needed to run the tests)::

    python tools/browser_links.py [--corpus DIR] [--out FIXTURE] [--jobs 4]
    python tools/browser_links.py --report    # compare the fixture with the crawler

Fixture format (gzip JSON): ``{"chromium": VERSION, "generated": ISO-8601, "pages":
[{"file", "url", "charset", "hrefs": [str | null, ...]}, ...]}``; ``null`` marks an href
the browser cannot parse (``new URL(href, document.baseURI)`` throws).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime as _dt
import gzip
import itertools
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
# The real-page corpus is not in the repository: $CRAWLER_CORPUS, else the project's shared
# folder beside the checkout (the rule tests/corpus.py follows).
DEFAULT_CORPUS = Path(os.environ.get("CRAWLER_CORPUS") or ROOT.parent / "shared" / "corpus")
DEFAULT_OUT = ROOT / "tests" / "fixtures" / "browser_links.json.gz"

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-domain-reliability",
    "--disable-client-side-phishing-detection",
    "--no-default-browser-check",
    "--no-pings",
    # The http:// pages must stay http:// (the crawler resolves against the URL it fetched).
    "--disable-features=HttpsUpgrades,HttpsFirstBalancedModeAutoEnable,OptimizationHints,"
    "MediaRouter,AutofillServerCommunication",
    "--blink-settings=scriptEnabled=false",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--remote-debugging-port=0",
    "--lang=en-US",
    "about:blank",
]

# Evaluated with DevTools (works while page scripts are disabled). ``a.href`` is the
# resolved URL; for an href that does not parse it returns the attribute, so the failure
# is detected with ``new URL`` (which is UTF-8-only, hence not used for the value). An SVG
# ``<a>`` has an SVGAnimatedString ``href``: its value is resolved with ``new URL``.
EXTRACT_JS = r"""
(() => {
  const base = document.baseURI;
  const hrefs = [];
  for (const a of document.querySelectorAll('a[href], area[href]')) {
    const raw = a.getAttribute('href');
    let parsed = null;
    try { parsed = new URL(raw, base).href; } catch (e) { parsed = null; }
    if (parsed === null) { hrefs.push(null); continue; }
    hrefs.push(typeof a.href === 'string' ? a.href : parsed);
  }
  return {url: document.URL, charset: document.characterSet, base: base, hrefs: hrefs,
          js: document.documentElement ? document.documentElement.getAttribute('data-js') : null};
})()
"""

SELFTEST_URL = "https://selftest.invalid/dir/page.html"
SELFTEST_HTML = b"""<!doctype html><html><head><title>t</title>
<script>document.documentElement.setAttribute('data-js', 'ran');
document.write('<a href="/written-by-script">s</a>');</script>
<meta http-equiv="refresh" content="0; url=/elsewhere"></head>
<body><noscript><a href="ns">n</a></noscript><a href="../x?q=\xc3\xa9#f">x</a>
<img src="/img.png"><iframe src="/frame.html"></iframe></body></html>"""
SELFTEST_EXPECT = ["https://selftest.invalid/dir/ns", "https://selftest.invalid/x?q=%C3%A9#f"]


class DevTools:
    """A minimal Chrome DevTools Protocol client over one browser websocket (flat sessions)."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._handlers: dict[str, Any] = {}  # sessionId -> callable(method, params)
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for msg in self.ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                continue
            data = json.loads(msg.data)
            if "id" in data:
                fut = self._pending.pop(data["id"], None)
                if fut is not None and not fut.done():
                    if "error" in data:
                        fut.set_exception(RuntimeError(f"CDP error: {data['error']}"))
                    else:
                        fut.set_result(data.get("result", {}))
            else:
                handler = self._handlers.get(data.get("sessionId", ""))
                if handler is not None:
                    handler(data["method"], data.get("params", {}))
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(ConnectionError("DevTools websocket closed"))

    async def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        """Send one command and wait for its result."""
        msg_id = next(self._ids)
        msg: dict[str, Any] = {"id": msg_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[msg_id] = fut
        await self.ws.send_str(json.dumps(msg))
        return await fut

    def on(self, session: str, handler: Any) -> None:
        self._handlers[session] = handler


class Tab:
    """One page target that loads corpus pages, every request answered locally."""

    def __init__(self, cdp: DevTools, target_id: str, session: str) -> None:
        self.cdp = cdp
        self.target_id = target_id  # also the main frame's id
        self.session = session
        self.body = b""
        self.expect_document = False
        self.loaded = asyncio.Event()
        self.served: list[str] = []  # URLs answered with the page body
        self.blocked = 0
        cdp.on(session, self._event)

    @classmethod
    async def open(cls, cdp: DevTools) -> "Tab":
        target = await cdp.send("Target.createTarget", {"url": "about:blank"})
        target_id = target["targetId"]
        attached = await cdp.send("Target.attachToTarget", {"targetId": target_id, "flatten": True})
        tab = cls(cdp, target_id, attached["sessionId"])
        await tab.send("Fetch.enable", {"patterns": [{"urlPattern": "*", "requestStage": "Request"}]})
        await tab.send("Page.enable")
        return tab

    async def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return await self.cdp.send(method, params, self.session)

    def _event(self, method: str, params: dict[str, Any]) -> None:
        if method == "Fetch.requestPaused":
            asyncio.get_running_loop().create_task(self._answer(params))
        elif method == "Page.loadEventFired":
            self.loaded.set()

    async def _answer(self, params: dict[str, Any]) -> None:
        request_id = params["requestId"]
        main_document = params.get("resourceType") == "Document" and params.get("frameId") == self.target_id
        try:
            if main_document and self.expect_document:
                self.expect_document = False
                self.served.append(params["request"]["url"])
                await self.send(
                    "Fetch.fulfillRequest",
                    {
                        "requestId": request_id,
                        "responseCode": 200,
                        "responseHeaders": [{"name": "Content-Type", "value": "text/html"}],
                        "body": base64.b64encode(self.body).decode("ascii"),
                    },
                )
            elif main_document:
                # A navigation away (meta refresh, ...): 204 keeps the current document.
                self.blocked += 1
                await self.send("Fetch.fulfillRequest", {"requestId": request_id, "responseCode": 204, "responseHeaders": []})
            else:
                self.blocked += 1
                await self.send("Fetch.failRequest", {"requestId": request_id, "errorReason": "BlockedByClient"})
        except (RuntimeError, ConnectionError):
            pass  # cancelled meanwhile (page torn down, browser closing): nothing was sent

    async def load(self, url: str, body: bytes, timeout: float = 30.0) -> dict[str, Any]:
        """Load ``body`` as the document at ``url`` and return the extracted links."""
        # The browser's spelling of the URL (``https://h`` -> ``https://h/``), to recognize it.
        parsed = await self.send(
            "Runtime.evaluate", {"expression": f"new URL({json.dumps(url)}).href", "returnByValue": True}
        )
        url = parsed["result"]["value"]
        self.body = body
        self.served = []
        self.loaded.clear()
        self.expect_document = True
        await self.send("Page.navigate", {"url": url})
        deadline = time.monotonic() + timeout
        while True:
            try:
                await asyncio.wait_for(self.loaded.wait(), max(0.1, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                pass
            # The load event carries no frame or URL: check that it is this document's.
            state = await self.send(
                "Runtime.evaluate", {"expression": "[document.readyState, document.URL]", "returnByValue": True}
            )
            ready, doc_url = state["result"]["value"]
            if (ready == "complete" and doc_url == url) or time.monotonic() > deadline:
                break
            self.loaded.clear()
        result = await self.send("Runtime.evaluate", {"expression": EXTRACT_JS, "returnByValue": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"extraction failed on {url}: {result['exceptionDetails']}")
        value = result["result"]["value"]
        value["served"] = list(self.served)
        value["expected_url"] = url
        return value


def _read_devtools_port(user_data: Path, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> tuple[int, str]:
    path = user_data / "DevToolsActivePort"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"chromium exited with status {proc.returncode}")
        if path.exists():
            lines = path.read_text().split()
            if len(lines) >= 2:
                return int(lines[0]), lines[1]
        time.sleep(0.05)  # a tool, not a test: polling the file Chromium writes at startup
    raise RuntimeError("chromium did not write DevToolsActivePort")


def _page_bytes(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def _strip_fragment(url: str) -> str:
    return url.split("#", 1)[0]


# ---------------------------------------------------------------------------------------
# Synthetic pages: what the corpus does not exercise (odd hrefs, markup, encodings). Each
# is stored in the fixture with its bytes, so the test needs neither this module nor a
# browser.

SYNTH_URL = "http://ex.com/dir/page.html?p=1"

URL_FORMS = [
    " \t\n/a b\x0c", "/a\x00b", "&#0;x", "&#x80;", "/a\x0bb", "\x0b/vt", "\x1f/us",
    "http://ex.com:80/", "HTTP://EX.com", "http:/\\ex.com/a", "\\\\ex.com\\a", "/a/./b/../c",
    "/%2e%2E/x", "/a/%2e", "?q=ü", "/ü?ü#ü", "#", "//", "///x", "http:", "http:x", "https:x",
    "ftp://x/y", "file:///x", "data:,x", "//user:pass@ex.com/", "//ex.com:0080/", "//[::1]/",
    "//[0:0::1]:8080/", "//0x7f.1/", "//ex%2ecom/", "//ex.com./", "//EX.COM/", "//ex.com:/",
    "//ex.com:99999/", "//ex com/", "//ex<com/", "//ex.com/a%zz", "/a`b{c}d", "?a`b{}|^'\"<>",
    "#a`b{}'\"<>", "/\u00a0x", "\u00a0/x", "/\u3000", "x\u2028y", "&#xD800;", "//xn--garbage/",
    "//bücher.de/", "//Bücher.DE/", "//faß.de/", "//a_b.com/", "//münchen.de:8080/ä", ".", "..",
    "./", "a?b#c?d", "?#", "#?", "http://", "http://:80/", "http://[::1/", "http://ex.com:abc/",
    "http://a%00b/", "http://exa mple.com/", "//ex.com/%", "//ex.com/%%41", "javascript:x",
    " JavaScript:x", "mailto:a b", "//ex.com/\ud7ff", "//☃.net/", "//xn--n3h.net/", "//ex.com?x",
    "//ex.com#x", "?", "//@ex.com/", "//a@b@ex.com/", "http://1.2.3.4.5/", "http://1.2.3.256/",
    "http://999999999999/", "http://0/", "http://ex.com:65535/", "//ex.com:0/",
    "http:\\\\ex.com\\x?a\\b#c\\d", "/?a=1&amp;b=2", "/&amp", "/&notin;", "/&notit;",
    "/x&copy=1", "?x&copy=1", "/%E4%zz", "//%65x.com/", "//ex.com%2F.org/",
    "//ex.com\\@evil.com/", "//ex.com;x/", "http://ex.com/../../a", "//Ｅｘ．ｃｏｍ/",
    "//ex.com。org/", "//ex.com/#%20%", "//ex.com/?%zz&%41", "/a?b'c", "//exa\u00admple.com/",
    "//ex.com\u200b/", "/a|b^c", "mailto:x@ex.com?subject=Grüße aus 'Köln'&body=a b",
    "javascript:f('a b')", "whatsapp://send?text=a b",
]

MARKUP = {
    "template": '<template><a href="/in-template">t</a></template><a href="/after">a</a>',
    "noscript": '<noscript><a href="/ns">n</a></noscript>',
    "noscript-head": '<html><head><noscript><a href="/nsh">n</a></noscript></head><body><a href="/b">b</a>',
    "svg-links": '<svg><a href="/svg-href">s</a><a xlink:href="/svg-xlink">x</a></svg>',
    "math-link": '<math><a href="/math">m</a></math>',
    "table-foster": '<table><tr><td>1</td></tr><a href="/foster">f</a></table><a href="/after">a</a>',
    "adoption": '<a href="/1"><p><a href="/2">x</a></p>',
    "nested-a": '<a href="/outer"><div><a href="/inner">i</a></div></a>',
    "select": '<select><option><a href="/in-select">s</a></option></select>',
    "raw-text": '<textarea><a href="/ta"></textarea><title><a href="/t"></title><xmp><a href="/x"></xmp>'
    '<iframe><a href="/if"></iframe><noembed><a href="/ne"></noembed><noframes><a href="/nf"></noframes>'
    '<style><a href="/st"></style><script><a href="/sc"></script><a href="/after">a</a>',
    "comments": '<!-- <a href="/comment"> --><!--[if IE]><a href="/ie"><![endif]--><a href="/real">r</a>',
    "plaintext": '<a href="/before">b</a><plaintext><a href="/pt">p</a>',
    "attributes": '<a href="/first" href="/second">d</a><A HREF="/upper">u</A><AREA HREF="/area-upper">'
    '<area href="/area"><a href>e</a><a href="">e2</a><a href=/a?b=1&c=2>u</a>'
    '<a xlink:href="/xl" href="/h">x</a><link href="/link"><img href="/img"><div href="/div"></div>',
    "unterminated": '<a href="/ok">x</a><a href=/unq',
    "entities": '<a href="/a?x=1&copy=2&amp;y=3&lt;&notit;&notin;">e</a><a href="/a?x&ampy&lt">e</a>'
    '<a href="&nbsp;/nb&nbsp;">x</a><a href="/&#x0B;x&#x0C;&#x7F;">x</a><a href="/&#128;&#150;&#x9F;">x</a>'
    '<a href="/&#xD800;&#x110000;&#0;">x</a><a href="/&#99999999999;">x</a><a href="/a\x00b\r\nc">x</a>',
    "frameset": '<frameset><frame src="x"></frameset><a href="/after-frameset">x</a>',
    "containers": '<button><a href="/btn">b</a></button><form><a href="/form">f</a></form>'
    '<my-el><a href="/custom">c</a></my-el><object><a href="/obj">o</a></object>',
    "foreign-html": '<svg><foreignObject><a href="/fo">f</a></foreignObject></svg>'
    '<svg><![CDATA[<a href="/cdata">]]></svg><a href="/after-cdata">x</a>'
    '<math><annotation-xml encoding="text/html"><a href="/annot">a</a></annotation-xml></math>',
    "script-escape": '<script><!--<script></script><a href="/esc"></script>--></script><a href="/after-esc">x</a>',
    "head-and-tail": '<html><head><a href="/head-a">x</a><title>t</title></head><body></body></html>'
    '<a href="/after-html">x</a>',
    "base-multi": '<base href="/b1/"><base href="/b2/"><a href="x">x</a>',
    "base-javascript": '<base href="javascript:alert(1)"><a href="x">x</a>',
    "base-data": '<base href="data:text/html,x"><a href="x">x</a>',
    "base-mailto": '<base href="mailto:a@b"><a href="x">x</a><a href="http://ex.org/abs">a</a>',
    "base-empty": '<base href=""><a href="x">x</a>',
    "base-fragment": '<base href="/b/#frag"><a href="">x</a><a href="#y">y</a>',
    "base-other-host": '<base href="//other.org"><a href="x">x</a><base href="/ignored/">',
    "base-https": '<base href="https://s.ex.com/d/e"><a href="?q">x</a><a href="http:rel">y</a>',
    "base-in-body": '<a href="x1">x</a><base href="/late/"><a href="x2">x</a>',
    "base-in-svg": '<svg><base href="/svgbase/"></svg><a href="x">x</a>',
    "base-in-template": '<template><base href="/tplbase/"></template><a href="x">x</a>',
    "base-whitespace": '<base href="  /ws/ \n"><a href="x">x</a>',
}

# Labels whose query encoding (and decoding) differs between Python codecs and browsers,
# plus a few that do not, to keep them honest.
ENCODING_LABELS = [
    "windows-1250", "windows-1251", "windows-1252", "windows-1253", "windows-1254",
    "windows-1255", "windows-1256", "windows-1257", "windows-1258", "windows-874",
    "iso-8859-2", "iso-8859-5", "iso-8859-7", "iso-8859-8", "koi8-r", "koi8-u", "macintosh",
    "x-mac-cyrillic", "ibm866", "gbk", "gb18030", "big5", "euc-jp", "shift_jis", "euc-kr",
]
_QUERY_SPECIALS = [
    0x05BA, 0x040E, 0x045E, 0x255D, 0x256C, 0x20AC, 0x0152, 0x0178, 0x02C6,
    0x81, 0x8D, 0x8F, 0x90, 0x9D,  # C1 controls (NCRs the HTML parser does not remap)
    # Japanese: JIS-Roman, Microsoft variants, NEC and IBM extensions, PUA, katakana
    0x00A5, 0x203E, 0x2212, 0xFF0D, 0x301C, 0xFF5E, 0x2016, 0x2225, 0xFFE0, 0xFFE1, 0xFFE2,
    *range(0x2460, 0x2474), *range(0x2160, 0x216A), *range(0x2170, 0x217A), 0x4E28, 0x4EE1,
    0x52AF, 0xFA11, 0xE000, 0xE757, *range(0xF8F0, 0xF8F4), *range(0xFF61, 0xFFA0, 3), 0xFF9E,
    0xFF9F, 0x309B, 0x309C, 0x3042, 0x30A2, 0x65E5, 0x672C,
    # Big5
    0x2022, 0x2027, 0x223C, 0x2593, 0x2609, 0x2641, 0xFF64, *range(0x2400, 0x2422),
    *range(0x256D, 0x2571), 0x2550, 0x255E, 0x2561, 0x256A, 0x5341, 0x5345, 0x4EDD, 0x5605,
    0x5ED0, 0x5EF4, 0x60A4, 0x65E0, 0x732A, 0x7676, 0x96B6, 0xFF0F, 0xFF3C, 0xFE51, 0x00AF,
    0x2295, 0x2299, 0x2215, 0xFE68, 0xFFE5,
    # GBK / gb18030 (2022 edition)
    0x01F9, 0x1E3F, *range(0x9FB4, 0x9FBC), 0xE5E5, 0xE7C7, *range(0xE78D, 0xE797),
    *range(0xFE10, 0xFE1A), 0x3000, 0x2E81, 0x2FF0, 0x303E, 0x3447, 0x4E2D, 0x6587,
    # Korean, astral
    0xD55C, 0xAD6D, 0xB620, 0x1F600, 0x20000, 0x21D53, 0x2A6D6,
]


def _query_chars() -> list[int]:
    """Code points tried in the queries of every encoding's page (deterministic)."""
    rng = random.Random(20240613)

    def sample(lo: int, hi: int, k: int) -> list[int]:
        return rng.sample([c for c in range(lo, hi) if not 0xD800 <= c <= 0xDFFF and c & 0xFFFE != 0xFFFE], k)

    chars = set(range(0xA0, 0x100)) | set(_QUERY_SPECIALS)
    chars |= set(sample(0x100, 0x4E00, 150)) | set(sample(0x4E00, 0x9FA6, 100))
    chars |= set(sample(0xAC00, 0xD7A4, 30)) | set(sample(0xE000, 0x10000, 40))
    return sorted(chars)


def _query_page(label: str, chars: list[int], per_href: int = 32) -> bytes:
    head = f'<!doctype html><html><head><meta charset="{label}"><title>q</title></head><body>\n'
    links = [
        '<a href="?' + "&amp;".join(f"&#{c};" for c in chars[i : i + per_href]) + '">x</a>\n'
        for i in range(0, len(chars), per_href)
    ]
    return (head + "".join(links)).encode("ascii")


def _iso2022jp_page(chars: list[int]) -> bytes:
    # A stateful encoding: one character a link (plus sequences that switch states).
    combos = ["&#165;a\\b~&#165;", "&#26085;a&#165;&#26412;", "&#161;&#26085;&#161;", "x&#65438;&#65407;"]
    links = [f'<a href="?&#{c};">x</a>\n' for c in chars] + [f'<a href="?{c}">x</a>\n' for c in combos]
    head = '<!doctype html><html><head><meta charset="iso-2022-jp"><title>q</title></head><body>\n'
    return (head + "".join(links)).encode("ascii")


# Byte sequences decoded differently by Python and browsers that the crawler leaves as
# they are (docs/browser-agreement.md, "residual decoding differences").
_BIG5_RESIDUAL_LEADS = range(0x87, 0xA1)  # HKSCS-2008 additions Python's HKSCS-2004 lacks
_BIG5_RESIDUAL_PAIRS = {bytes.fromhex("a241"), bytes.fromhex("a242")}  # Python: same as a1fe, a240
_DECODE_RESIDUAL = {"big5": lambda seq: seq[0] in _BIG5_RESIDUAL_LEADS or seq in _BIG5_RESIDUAL_PAIRS,
                    "euc-jp": lambda seq: seq == b"\x8f\xa2\xb7"}
_MULTI_BYTE_ROWS = {
    "gbk": [0x81, 0xA1, 0xA3, 0xA6, 0xA8, 0xA9, 0xD6, 0xFE],
    "gb18030": [0x81, 0xA1, 0xA3, 0xA6, 0xA8, 0xA9, 0xD6, 0xFE],
    "big5": [0xA1, 0xA2, 0xA3, 0xA4, 0xC6, 0xC7, 0xF9, 0xFA, 0xFE],
    "euc-jp": [0xA1, 0xA2, 0xA4, 0xAD, 0xB0, 0xF9, 0xFA, 0xFB, 0xFC],
    "shift_jis": [0x81, 0x82, 0x87, 0x88, 0xED, 0xEE, 0xFA, 0xFB, 0xFC],
    "euc-kr": [0x81, 0x8F, 0xA1, 0xB0, 0xC7, 0xC9, 0xFE],
}


def _byte_candidates(label: str) -> list[bytes]:
    """Byte sequences tried in link paths of a page in ``label`` (deterministic)."""
    rows = _MULTI_BYTE_ROWS.get(label)
    if rows is None:
        return [bytes((b,)) for b in range(0x80, 0x100)]
    seqs = [bytes((lead, trail)) for lead in rows for trail in range(0x40, 0xFF) if trail != 0x7F]
    if label == "euc-jp":
        seqs = [s for s in seqs if s[1] >= 0xA1] + [bytes((0x8E, t)) for t in range(0xA1, 0xE0)]
        seqs += [bytes((0x8F, 0xA2, t)) for t in range(0xA1, 0xFF)] + [bytes((0x8F, 0xB0, t)) for t in range(0xA1, 0xFF, 7)]
    if label == "gb18030":
        seqs += [bytes((0x81, 0x30 + a, 0x81 + b, 0x30 + c)) for a in range(0, 10, 3) for b in range(0, 126, 25) for c in range(10)]
        seqs += [bytes.fromhex(h) for h in "8135f437 84318236 84318730 95328236 e3329a35".split()]
    residual = _DECODE_RESIDUAL.get(label)
    return [s for s in seqs if residual is None or not residual(s)]


def _bytes_page(label: str, seqs: list[bytes], per_href: int = 16) -> bytes:
    head = f'<!doctype html><html><head><meta charset="{label}"><title>b</title></head><body>\n'.encode("ascii")
    links = [
        b'<a href="/x/' + b"/".join(seqs[i : i + per_href]) + b'">x</a>\n' for i in range(0, len(seqs), per_href)
    ]
    return head + b"".join(links)


def synthetic_pages(valid_sequences: dict[str, list[bytes]]) -> list[tuple[str, str, bytes]]:
    """(name, url, body) of every synthetic page; ``valid_sequences`` are the byte
    sequences per label that the browser decodes without U+FFFD."""
    pages: list[tuple[str, str, bytes]] = []
    forms = "".join(f'<a href="{h.replace(chr(34), "&quot;")}">{i}</a>\n' for i, h in enumerate(URL_FORMS))
    pages.append(("url-forms", SYNTH_URL, ("<!doctype html><meta charset=utf-8><body>" + forms).encode("utf-8", "surrogatepass")))
    for name, html in MARKUP.items():
        pages.append((f"markup-{name}", SYNTH_URL + "&m=" + name, ("<!doctype html><meta charset=utf-8>" + html).encode("utf-8")))
    chars = _query_chars()
    for label in ENCODING_LABELS:
        pages.append((f"query-{label}", SYNTH_URL + "&q=" + label, _query_page(label, chars)))
        pages.append((f"bytes-{label}", SYNTH_URL + "&b=" + label, _bytes_page(label, valid_sequences[label])))
    pages.append(("query-iso-2022-jp", SYNTH_URL + "&q=iso-2022-jp", _iso2022jp_page(chars)))
    utf16 = "<!doctype html><meta charset=utf-8><body><a href='/ü?q=ü#ü'>x</a>"
    pages.append(("utf-16le-bom", SYNTH_URL + "&u=16", b"\xff\xfe" + utf16.encode("utf-16-le")))
    link = b'<a href="/\xe0?q=\xe0">x</a><a href="/plain">p</a>'
    pages.append(("late-meta-in-head", SYNTH_URL + "&l=1",
                  b"<html><head><script>" + b"x" * 2000 + b'</script><meta charset="windows-1251"></head><body>' + link))
    pages.append(("late-meta-after-body", SYNTH_URL + "&l=2",
                  b"<html><head></head><body><p>" + b"x" * 1100 + b'</p><meta charset="windows-1251">' + link))
    pages.append(("late-meta-beyond-window", SYNTH_URL + "&l=3",
                  b"<html><head><!--" + b"x" * 40000 + b'--><meta charset="windows-1251"></head><body>' + link))
    pages.append(("undeclared-utf8", SYNTH_URL + "&l=4",
                  "<html><body><p>Grüße</p><a href='/ä?q=ü'>x</a><a href='/plain'>p</a>".encode("utf-8")))
    deep = b"<div>" * 8000 + b"<script>document.write('<a href=\"/written-by-script\">')</script><a href=\"/real\">r</a>"
    pages.append(("deep-nesting", SYNTH_URL + "&d=1", b"<!doctype html><meta charset=utf-8><body>" + deep))
    return pages


_DECODE_JS = "(() => { const d = new TextDecoder(%s); return %s.map(s => d.decode(new Uint8Array(s))); })()"


async def _valid_sequences(tab: Tab) -> dict[str, list[bytes]]:
    """Per label, the candidate byte sequences the browser decodes without U+FFFD."""
    valid: dict[str, list[bytes]] = {}
    for label in ENCODING_LABELS:
        seqs = _byte_candidates(label)
        expr = _DECODE_JS % (json.dumps(label), json.dumps([list(s) for s in seqs]))
        result = await tab.send("Runtime.evaluate", {"expression": expr, "returnByValue": True})
        decoded = result["result"]["value"]
        valid[label] = [s for s, text in zip(seqs, decoded) if "\ufffd" not in text]
    return valid


async def _collect(
    chromium: str, manifest: list[dict[str, str]], corpus: Path, jobs: int,
) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
    user_data = Path(tempfile.mkdtemp(prefix="browser-links-"))
    proc = subprocess.Popen(
        [chromium, *CHROMIUM_FLAGS[:-1], f"--user-data-dir={user_data}", CHROMIUM_FLAGS[-1]],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        port, ws_path = _read_devtools_port(user_data, proc)
        async with aiohttp.ClientSession() as http:
            async with http.ws_connect(f"ws://127.0.0.1:{port}{ws_path}", max_msg_size=0) as ws:
                cdp = DevTools(ws)
                version = (await cdp.send("Browser.getVersion"))["product"]
                tabs = [await Tab.open(cdp) for _ in range(max(1, jobs))]

                got = await tabs[0].load(SELFTEST_URL, SELFTEST_HTML)
                if got["js"] is not None or got["hrefs"] != SELFTEST_EXPECT or got["url"] != SELFTEST_URL:
                    raise RuntimeError(f"self-test failed (scripts ran or a request escaped?): {got}")
                print(f"{version}: self-test passed (no script ran, noscript parsed, refresh and subresources blocked)", file=sys.stderr)
                synthetic = synthetic_pages(await _valid_sequences(tabs[0]))

                # One job list: corpus pages (read from disk when loaded), then synthetic ones.
                jobs_list: list[tuple[dict[str, Any], Any]] = [
                    ({"file": e["file"], "url": e["url"]}, lambda e=e: _page_bytes(corpus / e["file"])) for e in manifest
                ]
                jobs_list += [
                    ({"name": name, "url": url, "body": body.decode("latin-1")}, lambda body=body: body)
                    for name, url, body in synthetic
                ]
                results: list[dict[str, Any] | None] = [None] * len(jobs_list)
                queue: asyncio.Queue[int] = asyncio.Queue()
                for i in range(len(jobs_list)):
                    queue.put_nowait(i)

                async def worker(tab: Tab) -> None:
                    while not queue.empty():
                        i = queue.get_nowait()
                        entry, body = jobs_list[i]
                        got = await tab.load(entry["url"], body())
                        if got["url"] != got["expected_url"] or got["served"] != [_strip_fragment(got["url"])]:
                            raise RuntimeError(f"{entry.get('file') or entry['name']}: document URL {got['url']!r} "
                                               f"/ served {got['served']} != {entry['url']!r}")
                        results[i] = {**entry, "charset": got["charset"], "hrefs": got["hrefs"]}

                await asyncio.gather(*(worker(tab) for tab in tabs))
                await cdp.send("Browser.close")
        done = [r for r in results if r is not None]
        return version, [r for r in done if "file" in r], [r for r in done if "name" in r]
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(user_data, ignore_errors=True)


def load_manifest(corpus: Path) -> list[dict[str, str]]:
    """The corpus manifest: one ``{"file", "url", ...}`` object per line."""
    with open(corpus / "manifest.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def generate(args: argparse.Namespace) -> int:
    chromium = args.chromium or shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if not chromium:
        print("error: chromium not found (apt-get install chromium, or pass --chromium PATH)", file=sys.stderr)
        return 2
    manifest = load_manifest(args.corpus)
    if args.limit:
        manifest = manifest[: args.limit]
    start = time.monotonic()
    version, pages, synthetic = asyncio.run(_collect(chromium, manifest, args.corpus, args.jobs))
    elapsed = time.monotonic() - start
    fixture = {
        "chromium": version,
        "generated": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "corpus_pages": len(pages),
        "pages": pages,
        "synthetic": synthetic,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    raw = json.dumps(fixture, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")
    # mtime=0: regenerating from the same browser gives byte-identical gzip framing.
    args.out.write_bytes(gzip.compress(raw, compresslevel=9, mtime=0))
    n_links = sum(len(p["hrefs"]) for p in pages)
    n_synth = sum(len(p["hrefs"]) for p in synthetic)
    print(
        f"{len(pages)} corpus pages ({n_links} links), {len(synthetic)} synthetic pages ({n_synth} links) "
        f"in {elapsed:.1f} s -> {args.out} ({args.out.stat().st_size} bytes)",
        file=sys.stderr,
    )
    return 0


# ---------------------------------------------------------------------------------------
# --report: list where the crawler differs from the fixture (needs no browser)


def report(args: argparse.Namespace) -> int:
    """Print every link the crawler resolves differently from the browser (raw diff; the
    test classifies them)."""
    sys.path.insert(0, str(ROOT))
    from crawler.parse import parse_page

    fixture = json.loads(gzip.decompress(args.out.read_bytes()).decode("utf-8", "surrogatepass"))
    total = agree = 0
    kinds: Counter[str] = Counter()
    shown: Counter[str] = Counter()
    entries = [(p["file"], _page_bytes(args.corpus / p["file"]), p) for p in fixture["pages"]]
    entries += [("synthetic:" + p["name"], p["body"].encode("latin-1"), p) for p in fixture.get("synthetic", [])]
    for name, body, page in entries:
        parsed = parse_page(body, page["url"], "text/html")
        if parsed.error:
            print(f"PARSE ERROR {name}: {parsed.error}")
        ours = [link.resolved for link in parsed.links]
        raws = [link.raw for link in parsed.links]
        theirs = page["hrefs"]
        if len(ours) != len(theirs):
            print(f"COUNT {name}: crawler {len(ours)} (+{parsed.links_dropped} dropped) browser {len(theirs)}")
        total += max(len(ours), len(theirs))
        for i, (mine, other) in enumerate(zip(ours, theirs)):
            if mine == other:
                agree += 1
                continue
            kind = "http" if (other or mine or "").startswith(("http:", "https:")) else "other"
            kinds[kind] += 1
            if shown[name] < args.show:
                shown[name] += 1
                print(f"{kind} {name} #{i} charset {parsed.charset}/{page['charset']}\n  raw     {raws[i]!r}\n"
                      f"  crawler {mine!r}\n  browser {other!r}")
    print(f"exact agreement {agree}/{total} = {agree / max(total, 1):.4%}; differences {dict(kinds)}")
    return 0


# ---------------------------------------------------------------------------------------
# --encodings: exhaustive comparison of the crawler's legacy encoders/decoders with Chromium


_ALL_LABELS = [*ENCODING_LABELS, "iso-8859-3", "iso-8859-4", "iso-8859-6", "iso-8859-10",
               "iso-8859-13", "iso-8859-14", "iso-8859-15", "iso-8859-16", "x-user-defined"]


async def _encoding_tables(chromium: str) -> dict[str, Any]:
    """Chromium's answers: per label, the query encoding of every BMP code point (and the
    astral ones its decoders produce) and the decoding of every 1- and 2-byte sequence."""
    user_data = Path(tempfile.mkdtemp(prefix="browser-links-"))
    proc = subprocess.Popen(
        [chromium, *CHROMIUM_FLAGS[:-1], f"--user-data-dir={user_data}", CHROMIUM_FLAGS[-1]],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        port, ws_path = _read_devtools_port(user_data, proc)
        async with aiohttp.ClientSession() as http:
            async with http.ws_connect(f"ws://127.0.0.1:{port}{ws_path}", max_msg_size=0) as ws:
                cdp = DevTools(ws)
                tab = await Tab.open(cdp)
                await tab.load(SELFTEST_URL, b"<p>decoders</p>")
                decoded: dict[str, tuple[list[bytes], list[str]]] = {}
                for label in _ALL_LABELS:
                    multi = label in _MULTI_BYTE_ROWS
                    seqs = (
                        [bytes((lead, trail)) for lead in range(0x81, 0xFF) for trail in range(0x30, 0xFF)]
                        if multi
                        else [bytes((b,)) for b in range(256)]
                    )
                    expr = _DECODE_JS % (json.dumps(label), json.dumps([list(x) for x in seqs]))
                    result = await tab.send("Runtime.evaluate", {"expression": expr, "returnByValue": True})
                    decoded[label] = (seqs, result["result"]["value"])
                extra = {ord(c) for _, texts in decoded.values() for t in texts for c in t if ord(c) > 0xFFFF}
                cps = [c for c in range(0xA0, 0x10000) if not 0xD800 <= c <= 0xDFFF] + sorted(extra)
                encoded: dict[str, list[str]] = {}
                for label in [*_ALL_LABELS, "iso-2022-jp"]:
                    body = _iso2022jp_page(cps) if label == "iso-2022-jp" else _query_page(label, cps, per_href=512)
                    got = await tab.load(SYNTH_URL + "&e=" + label, body, timeout=180)
                    encoded[label] = got["hrefs"]
                await cdp.send("Browser.close")
        return {"cps": cps, "decoded": decoded, "encoded": encoded}
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(user_data, ignore_errors=True)


def encodings(args: argparse.Namespace) -> int:
    """Print, per encoding, how many code points the crawler encodes differently from
    Chromium in a link query, and how many byte sequences it decodes differently."""
    sys.path.insert(0, str(ROOT))
    from crawler.parse import lookup_charset, parse_page
    from crawler.parse.charset import decode

    chromium = args.chromium or shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        print("error: chromium not found", file=sys.stderr)
        return 2
    tables = asyncio.run(_encoding_tables(chromium))
    cps = tables["cps"]
    print(f"{'label':15} {'query: code points differing':>30} {'decode: valid seqs differing':>30} {'malformed seqs differing':>25}")
    for label in [*_ALL_LABELS, "iso-2022-jp"]:
        if label == "iso-2022-jp":
            body = _iso2022jp_page(cps)
            ours = [link.resolved for link in parse_page(body, SYNTH_URL + "&e=" + label, "text/html").links]
            enc_diff = sum(a != b for a, b in zip(ours, tables["encoded"][label]))
        else:
            body = _query_page(label, cps, per_href=512)
            ours = [link.resolved for link in parse_page(body, SYNTH_URL + "&e=" + label, "text/html").links]
            enc_diff = 0
            for mine, theirs in zip(ours, tables["encoded"][label]):
                enc_diff += sum(a != b for a, b in zip(mine.split("?", 1)[1].split("&"), theirs.split("?", 1)[1].split("&")))
        valid = malformed = 0
        if label in tables["decoded"]:
            codec = lookup_charset(label) or "utf-8"
            for seq, text in zip(*tables["decoded"][label]):
                if decode(seq, codec) != text:
                    if "\ufffd" in text:
                        malformed += 1
                    else:
                        valid += 1
        print(f"{label:15} {enc_diff:>30} {valid:>30} {malformed:>25}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--corpus",
        type=Path,
        default=DEFAULT_CORPUS,
        help="corpus folder with manifest.jsonl (default: $CRAWLER_CORPUS, else ../shared/corpus beside the checkout)",
    )
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="fixture path (gzip JSON)")
    p.add_argument("--chromium", help="Chromium binary (default: chromium on PATH)")
    p.add_argument("--jobs", type=int, default=4, help="pages loaded in parallel (browser tabs)")
    p.add_argument("--limit", type=int, default=0, help="only the first N corpus pages (debugging)")
    p.add_argument("--report", action="store_true", help="compare the fixture with the crawler instead")
    p.add_argument("--show", type=int, default=5, help="with --report: differences shown per page")
    p.add_argument(
        "--encodings", action="store_true", help="exhaustive encoder/decoder comparison with Chromium (no fixture)"
    )
    args = p.parse_args(argv)
    if args.encodings:
        return encodings(args)
    if not (args.corpus / "manifest.jsonl").is_file():
        print(
            f"error: no manifest.jsonl in {args.corpus}; set CRAWLER_CORPUS or --corpus to the corpus "
            "folder, or place the shared folder beside the checkout (../shared/corpus)",
            file=sys.stderr,
        )
        return 2
    return report(args) if args.report else generate(args)


if __name__ == "__main__":
    sys.exit(main())
