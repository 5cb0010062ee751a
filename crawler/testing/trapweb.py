"""A web where spider traps are the last work: a small normal site and a session-id trap
that serves the same page under endless URLs, each linking to 8 new ones (used by
tests/integration/test_traps_last.py and benchmarks/restart.py)."""

from __future__ import annotations

from crawler.testing.webtypes import Reply, SmallWeb

NORMAL_PAGES = 30
HTML = (("Content-Type", "text/html; charset=utf-8"),)


class TrapWeb(SmallWeb):
    """``normal.test``: a small site (a home page linking distinct pages); ``trap.test``: one page
    under endless session ids, each linking to 8 new ones (the same content every time)."""

    def reply(self, host: str, path_qs: str, *, attempt: int = 1, accept_gzip: bool = False) -> Reply:
        if path_qs in ("/robots.txt", "/sitemap.xml"):
            return Reply(404, (("Content-Type", "text/plain"),), b"")
        if host.startswith("normal."):
            i = int(path_qs[2:]) if path_qs.startswith("/p") else 0
            nxt = "".join(f'<a href="/p{k}">p{k}</a>' for k in range(1, NORMAL_PAGES)) if i == 0 else ""
            words = " ".join(f"page{i}word{k}" for k in range(60))
            return Reply(200, HTML, f"<html><body><p>{words}</p>{nxt}</body></html>".encode())
        if host.startswith("trap."):
            sid = abs(hash(path_qs)) % 10**9
            links = "".join(f'<a href="/list?sid={sid * 10 + k}">more</a>' for k in range(8))
            words = " ".join(f"catalogue{k}" for k in range(60))
            return Reply(200, HTML, f"<html><body><p>{words}</p>{links}</body></html>".encode())
        return Reply(404, HTML, b"")
