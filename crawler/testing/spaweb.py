"""A small web of single-page apps and plain pages, for testing and measuring rendering.

* ``app-0.test`` .. ``app-{apps-1}.test``: single-page apps. Every document is the same
  shell (an empty ``<div id="root">`` and ``/static/app.js``); the script fetches
  ``/api/route/<key>.json`` and draws the route's text and its links. Route ``/r/k``
  links to routes ``k+1`` and ``k+2``, the home page to ``/r/0`` and ``/r/1``: every
  route is reachable only through the script (``ROUTES`` routes per app).
* The last app (``robots_app``) also asks ``/private/track.json``, which its robots.txt
  disallows: a polite renderer never sends it.
* ``plain-0.test``, ``plain-1.test``: server-rendered pages with text, links and a
  harmless script (``/js/site.js`` adds a CSS class): rendering them finds nothing new.
* ``ssr.test``: a server-rendered page with framework markers (``data-reactroot``,
  ``__NEXT_DATA__``) and links in its HTML to ``/a/0..2``, whose script adds links to
  ``/extra/0..2``: those pages are found only by rendering it.

:meth:`SpaWeb.needs_render` is the ground truth the render decision is judged against
(precision and recall: tests/integration/test_render.py, benchmarks/render.py), and
:meth:`SpaWeb.must_not_fetch` what must never reach the server.
"""

from __future__ import annotations

import json

from crawler.testing.webtypes import HTML_TYPE, Reply, SmallWeb

__all__ = ["SpaWeb"]

JS_TYPE = "application/javascript"
_NOT_FOUND = Reply(404, (("Content-Type", "text/plain"),), b"not found")

_APP_JS = """(function () {
  var path = location.pathname, key = path === '/' ? 'home' : path.split('/').pop();
  fetch('/api/route/' + key + '.json').then(function (r) { return r.json(); }).then(function (d) {
    var root = document.getElementById('root');
    var h = document.createElement('h1'); h.textContent = d.title; root.appendChild(h);
    var p = document.createElement('p'); p.textContent = d.text; root.appendChild(p);
    var nav = document.createElement('nav');
    d.links.forEach(function (l) { var a = document.createElement('a'); a.href = l; a.textContent = l; nav.appendChild(a); });
    root.appendChild(nav);
  });
  %s
})();
"""
_TRACK = "fetch('/private/track.json').catch(function () {});"
_SITE_JS = "document.documentElement.className += ' js';"
_EXTRA_JS = (
    "document.addEventListener('DOMContentLoaded', function () {\n"
    "  var nav = document.getElementById('more');\n"
    "  [0, 1, 2].forEach(function (k) { var a = document.createElement('a'); a.href = '/extra/' + k;"
    " a.textContent = 'extra ' + k; nav.appendChild(a); });\n"
    "});"
)


def _words(seed: str, n: int) -> str:
    return " ".join(f"{seed}w{k}" for k in range(n))


class SpaWeb(SmallWeb):
    """See the module docstring. ``apps`` apps of ``routes`` routes, ``plain_pages`` per plain host."""

    def __init__(self, apps: int = 4, routes: int = 12, plain_pages: int = 10, plain_hosts: int = 2,
                 delay_s: float = 0.0) -> None:
        super().__init__()
        self.apps, self.routes, self.plain_pages, self.plain_hosts = apps, routes, plain_pages, plain_hosts
        self.delay_s = delay_s  # added to every reply: a server that takes its time
        self.robots_app = f"app-{apps - 1}.test"

    # -- the ground truth ---------------------------------------------------------------

    def app_hosts(self) -> list[str]:
        return [f"app-{i}.test" for i in range(self.apps)]

    def plain_hosts_list(self) -> list[str]:
        return [f"plain-{i}.test" for i in range(self.plain_hosts)]

    def seeds(self) -> list[str]:
        return [self.url(h) for h in (*self.app_hosts(), *self.plain_hosts_list(), "ssr.test")]

    def documents(self) -> dict[str, bool]:
        """Every page of the web -> whether it needs rendering to find all its links."""
        out: dict[str, bool] = {}
        for h in self.app_hosts():
            out[self.url(h, "/")] = True
            for k in range(self.routes):
                out[self.url(h, f"/r/{k}")] = True
        for h in self.plain_hosts_list():
            for k in range(self.plain_pages):
                out[self.url(h, "/" if k == 0 else f"/p/{k}")] = False
        out[self.url("ssr.test", "/")] = True
        for k in range(3):
            out[self.url("ssr.test", f"/a/{k}")] = False
            out[self.url("ssr.test", f"/extra/{k}")] = False
        return out

    def needs_render(self, url: str) -> bool:
        return self.documents().get(url, False)

    def must_not_fetch(self, host: str, path_qs: str) -> str | None:
        """Why a request must never reach the server, or None."""
        if host == self.robots_app and path_qs.startswith("/private/"):
            return "robots-disallowed"
        return None

    def robots_delay_hosts(self) -> dict[str, float]:
        return {}

    # -- serving ------------------------------------------------------------------------

    def reply(self, host: str, path_qs: str, *, attempt: int = 1, accept_gzip: bool = False) -> Reply:
        r = self._reply(host, path_qs.split("?", 1)[0])
        if self.delay_s:
            r = Reply(r.status, r.headers, r.body, delay=self.delay_s)
        return r

    def _reply(self, host: str, path: str) -> Reply:
        if path == "/robots.txt":
            if host == self.robots_app:
                return Reply(200, (("Content-Type", "text/plain"),), b"User-agent: *\nDisallow: /private/\n")
            return _NOT_FOUND
        if host.startswith("app-") and host in self.app_hosts():
            return self._app(host, path)
        if host.startswith("plain-") and host in self.plain_hosts_list():
            return self._plain(host, path)
        if host == "ssr.test":
            return self._ssr(path)
        return _NOT_FOUND

    def _app(self, host: str, path: str) -> Reply:
        if path == "/static/app.js":
            js = _APP_JS % (_TRACK if host == self.robots_app else "")
            return Reply(200, (("Content-Type", JS_TYPE), ("ETag", '"app-v1"')), js.encode())
        if path.startswith("/api/route/") and path.endswith(".json"):
            key = path[len("/api/route/"):-len(".json")]
            if key == "home":
                k, links = -1, ["/r/0", "/r/1"]
            elif key.isdigit() and int(key) < self.routes:
                k = int(key)
                links = [f"/r/{j}" for j in (k + 1, k + 2) if j < self.routes]
            else:
                return _NOT_FOUND
            data = {"title": f"{host} route {key}", "text": _words(f"{host.split('.')[0]}r{k}", 80), "links": links}
            return Reply(200, (("Content-Type", "application/json"),), json.dumps(data).encode())
        if path == "/" or (path.startswith("/r/") and path[3:].isdigit() and int(path[3:]) < self.routes):
            shell = ('<!doctype html><html><head><title>app</title><script src="/static/app.js" defer></script></head>'
                     '<body><noscript>You need to enable JavaScript to run this app.</noscript><div id="root"></div></body></html>')
            return Reply(200, (("Content-Type", HTML_TYPE),), shell.encode())
        return _NOT_FOUND

    def _plain(self, host: str, path: str) -> Reply:
        if path == "/js/site.js":
            return Reply(200, (("Content-Type", JS_TYPE),), _SITE_JS.encode())
        if path == "/":
            k = 0
        elif path.startswith("/p/") and path[3:].isdigit() and 0 < int(path[3:]) < self.plain_pages:
            k = int(path[3:])
        else:
            return _NOT_FOUND
        links = "".join(f'<a href="/p/{j}">page {j}</a> ' for j in range(1, self.plain_pages) if j != k)
        body = (f'<!doctype html><html><head><title>{host} {k}</title><script src="/js/site.js"></script></head>'
                f'<body><main><h1>{host} page {k}</h1><p>{_words(host.split(".")[0] + str(k), 120)}</p>'
                f'<nav><a href="/">home</a> {links}</nav></main></body></html>')
        return Reply(200, (("Content-Type", HTML_TYPE),), body.encode())

    def _ssr(self, path: str) -> Reply:
        if path == "/static/extra.js":
            return Reply(200, (("Content-Type", JS_TYPE),), _EXTRA_JS.encode())
        if path == "/":
            links = "".join(f'<a href="/a/{k}">article {k}</a> ' for k in range(3))
            body = ('<!doctype html><html><head><title>ssr</title><script src="/static/extra.js"></script></head><body>'
                    f'<div id="__next" data-reactroot=""><main><h1>Server rendered</h1><p>{_words("ssr", 120)}</p>'
                    f'<nav>{links}</nav><nav id="more"></nav></main></div>'
                    '<script id="__NEXT_DATA__" type="application/json">{"page": "/"}</script></body></html>')
            return Reply(200, (("Content-Type", HTML_TYPE),), body.encode())
        for prefix in ("/a/", "/extra/"):
            if path.startswith(prefix) and path[len(prefix):].isdigit() and int(path[len(prefix):]) < 3:
                body = (f'<!doctype html><html><head><title>{path}</title></head><body><main><p>'
                        f'{_words("ssr" + path.replace("/", ""), 120)}</p><a href="/">home</a></main></body></html>')
                return Reply(200, (("Content-Type", HTML_TYPE),), body.encode())
        return _NOT_FOUND
