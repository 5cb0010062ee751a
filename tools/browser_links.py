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

    python tools/browser_links.py [--corpus /work/shared/corpus] [--out FIXTURE] [--jobs 4]
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
DEFAULT_CORPUS = Path(os.environ.get("CRAWLER_CORPUS", "/work/shared/corpus"))
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
        except RuntimeError:
            pass  # the request was cancelled meanwhile (page torn down): nothing was sent

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


async def _collect(chromium: str, manifest: list[dict[str, str]], corpus: Path, jobs: int) -> tuple[str, list[dict[str, Any]]]:
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

                results: list[dict[str, Any] | None] = [None] * len(manifest)
                queue: asyncio.Queue[int] = asyncio.Queue()
                for i in range(len(manifest)):
                    queue.put_nowait(i)

                async def worker(tab: Tab) -> None:
                    while not queue.empty():
                        i = queue.get_nowait()
                        entry = manifest[i]
                        got = await tab.load(entry["url"], _page_bytes(corpus / entry["file"]))
                        if got["url"] != got["expected_url"] or got["served"] != [_strip_fragment(got["url"])]:
                            raise RuntimeError(f"{entry['file']}: document URL {got['url']!r} / served {got['served']} != {entry['url']!r}")
                        results[i] = {
                            "file": entry["file"],
                            "url": entry["url"],
                            "charset": got["charset"],
                            "hrefs": got["hrefs"],
                        }

                await asyncio.gather(*(worker(tab) for tab in tabs))
                await cdp.send("Browser.close")
        return version, [r for r in results if r is not None]
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
    version, pages = asyncio.run(_collect(chromium, manifest, args.corpus, args.jobs))
    elapsed = time.monotonic() - start
    fixture = {
        "chromium": version,
        "generated": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "pages": pages,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    raw = json.dumps(fixture, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    # mtime=0: regenerating from the same browser gives byte-identical gzip framing.
    args.out.write_bytes(gzip.compress(raw, compresslevel=9, mtime=0))
    n_links = sum(len(p["hrefs"]) for p in pages)
    print(
        f"{len(pages)} pages, {n_links} links in {elapsed:.1f} s -> {args.out} ({args.out.stat().st_size} bytes)",
        file=sys.stderr,
    )
    return 0


# ---------------------------------------------------------------------------------------
# --report: compare the fixture with the crawler (needs no browser)


def report(args: argparse.Namespace) -> int:
    sys.path.insert(0, str(ROOT))
    from crawler.parse import parse_page

    fixture = json.loads(gzip.decompress(args.out.read_bytes()))
    total = agree = 0
    kinds: Counter[str] = Counter()
    shown: Counter[str] = Counter()
    for page in fixture["pages"]:
        body = _page_bytes(args.corpus / page["file"])
        parsed = parse_page(body, page["url"], "text/html")
        if parsed.error:
            print(f"PARSE ERROR {page['file']}: {parsed.error}")
        ours = [link.resolved for link in parsed.links]
        raws = [link.raw for link in parsed.links]
        theirs = page["hrefs"]
        if len(ours) != len(theirs):
            print(f"COUNT {page['file']}: crawler {len(ours)} browser {len(theirs)} (charset {parsed.charset}/{page['charset']})")
        total += max(len(ours), len(theirs))
        for i, (mine, other) in enumerate(zip(ours, theirs)):
            if mine == other:
                agree += 1
                continue
            http = (other or mine or "").startswith(("http:", "https:"))
            kind = "http" if http else "other"
            kinds[kind] += 1
            if shown[page["file"]] < args.show:
                shown[page["file"]] += 1
                print(f"{kind} {page['file']} #{i} charset {parsed.charset}/{page['charset']}\n  raw     {raws[i]!r}\n  crawler {mine!r}\n  browser {other!r}")
    print(f"agreement {agree}/{total} = {agree / max(total, 1):.4%}; disagreements {dict(kinds)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="corpus folder with manifest.jsonl")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="fixture path (gzip JSON)")
    p.add_argument("--chromium", help="Chromium binary (default: chromium on PATH)")
    p.add_argument("--jobs", type=int, default=4, help="pages loaded in parallel (browser tabs)")
    p.add_argument("--limit", type=int, default=0, help="only the first N pages (debugging)")
    p.add_argument("--report", action="store_true", help="compare the fixture with the crawler instead")
    p.add_argument("--show", type=int, default=5, help="with --report: differences shown per page")
    args = p.parse_args(argv)
    return report(args) if args.report else generate(args)


if __name__ == "__main__":
    sys.exit(main())
