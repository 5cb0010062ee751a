"""A rendered page that tries to navigate stays the fetched page; where it wanted to go is a link.

A page's script (``location.href = ...``, ``form.submit()``), a ``<meta http-equiv=refresh>``
or ``window.open`` may ask the browser for another document. The crawler renders the
page it fetched, not the one a script would show next: the top frame's navigation is
refused, and its target becomes a discovered link of the page (a GET; it then goes
through scope, robots and the seen set like any link) or a counted non-GET that is never
followed (a form POST: sending it would be acting, not crawling).

How it is refused matters (checked against Chromium, tests/integration/test_render_navigation.py):
the paused request is failed with ``Aborted`` (``net::ERR_ABORTED``), which commits
nothing, so the fetched document stays in the tab. ``BlockedByClient``, as for any other
refused request, makes Chromium commit its own error page in the top frame, which would
be serialised as the page (250 KB of ``chrome-error://`` markup). A navigation that
starts while the document is still being parsed stops the parser there (Chromium does
that whatever the answer): ``DOMContentLoaded`` never fires, so the main frame's
``Page.frameStoppedLoading`` stands in for it, and the raw page's links are kept beside
the DOM's (crawler.render.renderer).

If the main frame committed another document anyway (its last ``Page.frameNavigated``
is not the fetched document's loader, or is a ``chrome-error://`` page), no DOM is
taken: the render fails as ``navigated`` and the raw page is stored.

:class:`TopFrameNavigations` is the pure bookkeeping of one render (crawler.render.page
feeds it CDP events), tested without a browser (tests/unit/test_render_navigation.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from crawler.parse import ParsedPage
from crawler.parse.links import Link

__all__ = ["MAX_NAVIGATIONS", "NAVIGATION_TAG", "TopFrameNavigations", "with_navigations"]

#: ``Link.tag`` of a link that is a refused navigation's target, not an element of the page.
NAVIGATION_TAG = "navigation"

#: Distinct navigation targets kept per render; a page that navigates in a loop is
#: counted on every attempt but cannot grow its reply past this.
MAX_NAVIGATIONS = 20

_ERROR_PAGE = "chrome-error:"


class TopFrameNavigations:
    """What one render's top frame tried and what it committed.

    Feed it: :meth:`document_served` (the fetched document's request: its frame is the
    top frame), :meth:`committed` (each ``Page.frameNavigated``), :meth:`attempt` (each
    later document request of the top frame, or a ``Page.windowOpen``).
    """

    def __init__(self, limit: int = MAX_NAVIGATIONS) -> None:
        self.limit = limit
        self.main_frame: str | None = None
        self.targets: list[tuple[str, str]] = []  # (url, method), distinct, in order
        self.attempts = 0
        self._commits: list[tuple[str, str]] = []  # (loaderId, url) of the top frame, in order
        self._seen: set[tuple[str, str]] = set()

    def document_served(self, frame_id: str | None) -> None:
        """The fetched document was handed to ``frame_id``: that is the top frame."""
        if self.main_frame is None and frame_id:
            self.main_frame = frame_id

    def is_top(self, frame_id: str | None) -> bool:
        """True for a request of the top frame (not an iframe's own document)."""
        return frame_id is not None and frame_id == self.main_frame

    def attempt(self, url: str, method: str) -> None:
        """The top frame asked for ``url`` by ``method``: remember it (refusing is the caller's)."""
        self.attempts += 1
        key = (url, method.upper() or "GET")
        if key in self._seen or len(self.targets) >= self.limit or not url:
            return
        self._seen.add(key)
        self.targets.append(key)

    def committed(self, frame: dict[str, Any]) -> None:
        """A ``Page.frameNavigated`` event's ``frame``: kept if it is the top frame's."""
        if frame.get("parentId"):
            return
        if self.main_frame is not None and frame.get("id") != self.main_frame:
            return
        self._commits.append((str(frame.get("loaderId", "")), str(frame.get("url", ""))))

    def stopped_loading(self, frame_id: str | None) -> bool:
        """True when ``frame_id`` (of ``Page.frameStoppedLoading``) is the top frame after
        the fetched document committed: it will load no further, DOMContentLoaded or not."""
        return bool(self._commits) and self.is_top(frame_id)

    def replaced(self, loader_id: str | None) -> str | None:
        """Why the top frame no longer holds the fetched document (None: it does).

        ``loader_id`` is what ``Page.navigate`` answered for the fetched document (None
        if it said nothing: then only the first commit is the fetched one).
        """
        if not self._commits:
            return None  # nothing committed that we saw: Page.navigate's own answer decided
        loader, url = self._commits[-1]
        if url.startswith(_ERROR_PAGE):
            return f"the top frame shows a browser error page ({url})"
        if loader_id and loader != loader_id:
            return f"the top frame committed another document ({url})"
        if not loader_id and len(self._commits) > 1:
            return f"the top frame committed {len(self._commits)} documents, the last {url}"
        return None

    def links(self) -> list[str]:
        """The GET targets: links of the page."""
        return [u for u, m in self.targets if m == "GET"]


def with_navigations(page: ParsedPage, targets: tuple[tuple[str, str], ...], raw: ParsedPage | None) -> ParsedPage:
    """``page`` with the GET ``targets`` as links (after its own), and, when the page did
    navigate, the ``raw`` page's links too: the navigation stopped Chromium's parser, so
    the DOM may lack what the raw page had after the navigating script. Duplicates are
    kept (the link policy drops them, counted); the page's robots nofollow applies to
    these links as to its own (crawler.policy.links)."""
    if not targets:
        return page
    gets = [url for url, method in targets if method == "GET"]
    links = list(page.links)
    if raw is not None and raw is not page:
        links.extend(raw.links)
    links.extend(Link(url, url, False, NAVIGATION_TAG) for url in gets)
    return dataclasses.replace(page, links=links)
