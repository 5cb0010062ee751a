"""The link graph of the synthetic web: which page is at each URL and what it links to.

Normal hosts ``h0000.web.test`` ... hold pages ``/`` and ``/p/<n>`` laid out per host
(:class:`Layout`): hubs reachable from the root, a chain of up to 6 pages each linked
only from the previous one, and an "orphan" linked only from the parent host's root.
Host roots form a tree (root *i* links the roots of its ``fanout`` children), so every
host is a few hops from the seeds. Each special host's root is linked from a normal
root. Trap hosts (:mod:`crawler.testing.sites`) generate their endless pages here, on
demand. Everything follows from the seed: a page is computed when asked for, so a
bench-sized web costs nothing up front.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from random import Random
from typing import Callable

from crawler.testing.sites import Site, build_sites
from crawler.testing.webtypes import (
    CROSS_SPELLINGS,
    DOMAIN,
    JUNK_HREFS,
    MIRROR_ORIGIN,
    RELATIVE_SPELLINGS,
    SELF_SPELLINGS,
    SPELLINGS,
    Link,
    Page,
    Profile,
    digest,
)

__all__ = ["Layout", "WebGraph"]


@dataclass(frozen=True, slots=True)
class Layout:
    """How the pages of one normal host are numbered: ``/``, then hubs, chain, orphan."""

    pages: int   # including the root
    hubs: int    # /p/1 .. /p/hubs
    chain: int   # the next `chain` numbers
    orphan: bool  # one more number, linked only from the parent host's root


_TRAP_PATTERNS = {
    "calendar": re.compile(r"/cal/(\d{4})/(0[1-9]|1[0-2])"),
    "path-repetition": re.compile(r"(?:/loop)+/"),
    "session-id": re.compile(r"/s/([0-9a-f]{12})/(page|other)"),
    "deep": re.compile(r"/deep/([1-9]\d{0,17})"),
}
_FACETS = {
    "brand": ("acme", "globex", "initech", "umbrella"),
    "color": ("red", "green", "blue", "black", "white", "grey"),
    "material": ("wood", "steel", "cotton", "glass"),
    "size": ("xs", "s", "m", "l", "xl"),
    "sort": ("price", "name", "new", "rating"),
}


class WebGraph:
    """The pages of a web with ``seed`` and ``profile``: :meth:`page` answers for any URL.

    ``render`` writes a page's HTML; the special hosts use it once, to pick
    near-duplicates by their rendered text.
    """

    def __init__(self, seed: int, profile: Profile, render: Callable[[Page], bytes]) -> None:
        self.seed = seed
        self.profile = profile
        self._layouts: dict[int, Layout] = {}
        #: Special host name -> its :class:`~crawler.testing.sites.Site` (none in "bench").
        self.sites: dict[str, Site] = build_sites(seed, profile, render) if profile.specials else {}
        self._special_links = self._assign_special_links()

    def normal_host(self, i: int) -> str:
        """Name of normal host number ``i``."""
        return f"h{i:04d}.{DOMAIN}"

    def seed_hosts(self) -> list[str]:
        """The hosts whose roots are the crawl's seeds (the top of the host tree)."""
        return [self.normal_host(i) for i in range(min(3, self.profile.hosts))]

    def normal_index(self, host: str) -> int | None:
        """``i`` if ``host`` is normal host number ``i`` of this web, else None."""
        if not (host.startswith("h") and host.endswith("." + DOMAIN)):
            return None
        digits = host[1:-len(DOMAIN) - 1]
        if not digits.isdigit():
            return None
        i = int(digits)
        return i if i < self.profile.hosts and self.normal_host(i) == host else None

    def layout(self, i: int) -> Layout:
        """The page layout of normal host ``i`` (memoized; it follows from the seed)."""
        lay = self._layouts.get(i)
        if lay is None:
            rng = Random(f"{self.seed}|layout|{i}")
            n = rng.randint(*self.profile.pages_per_host)
            orphan = i != 0 and i != MIRROR_ORIGIN  # host 0 has no parent; the mirror origin
            # must stay byte-identical, so no page of it is linked only from elsewhere
            # Host 0 carries the longest chain (6) so every profile has a deep page.
            chain = min(6, n - 2) if i == 0 else rng.randint(1, min(6, n - 3))
            lay = Layout(n, n - 1 - chain - orphan, chain, orphan)
            self._layouts[i] = lay
        return lay

    def _children(self, i: int) -> range:
        f = self.profile.fanout
        return range(min(f * i + 1, self.profile.hosts), min(f * i + f + 1, self.profile.hosts))

    def _assign_special_links(self) -> dict[int, list[str]]:
        out: dict[int, list[str]] = {}
        linked = [h for h, s in self.sites.items() if s.behaviour != "redirect-dest"]
        for j, host in enumerate(linked):
            out.setdefault(j % self.profile.hosts, []).append(host)
        return out

    def page(self, host: str, path_qs: str) -> Page | None:
        """What is served at ``host`` + canonical ``path_qs`` (None: 404)."""
        i = self.normal_index(host)
        if i is not None:
            return self.normal_page(i, path_qs)
        site = self.sites.get(host)
        if site is None:
            return None
        if site.behaviour == "mirror":
            return self.normal_page(MIRROR_ORIGIN, path_qs)
        page = site.pages.get(path_qs)
        if page is None and site.trap:
            page = self._trap_page(site, path_qs)
        return page

    def normal_page(self, i: int, path_qs: str) -> Page | None:
        """Page ``path_qs`` of normal host ``i`` (None: no such page)."""
        lay = self.layout(i)
        if path_qs == "/":
            k = 0
        elif path_qs.startswith("/p/") and path_qs[3:].isdigit() and str(int(path_qs[3:])) == path_qs[3:]:
            k = int(path_qs[3:])
            if not 1 <= k < lay.pages:
                return None
        else:
            return None
        host = self.normal_host(i)
        prof = self.profile
        rng = Random(f"{self.seed}|links|{i}|{k}")
        rel_only = i == MIRROR_ORIGIN
        self_sp = RELATIVE_SPELLINGS if rel_only else SELF_SPELLINGS
        first_chain = lay.hubs + 1
        targets: list[tuple[str | None, str]] = []
        if k == 0:
            targets += [(None, f"/p/{h}") for h in range(1, min(lay.hubs, 16) + 1)]
            targets.append((None, f"/p/{first_chain}"))
            for c in self._children(i):
                targets.append((self.normal_host(c), "/"))
                cl = self.layout(c)
                if cl.orphan:
                    targets.append((self.normal_host(c), f"/p/{cl.hubs + cl.chain + 1}"))
            targets += [(h, "/") for h in self._special_links.get(i, ())]
        elif k <= lay.hubs:
            targets += [(None, f"/p/{c}") for c in (2 * k, 2 * k + 1) if c <= lay.hubs]
            targets.append((None, "/"))
        elif k < first_chain + lay.chain:
            if k + 1 < first_chain + lay.chain:
                targets.append((None, f"/p/{k + 1}"))
            targets.append((None, "/"))
        else:  # the orphan
            targets.append((None, "/"))
        # Fill to the profile's link count with hubs of this host and roots/hubs of others:
        # never chain or orphan pages, which must stay reachable only their one way.
        want = rng.randint(*prof.links)
        while len(targets) < want:
            if rng.random() < 0.5 or prof.hosts == 1:
                h = rng.randint(0, lay.hubs)
                targets.append((None, f"/p/{h}" if h else "/"))
            else:
                j = rng.randrange(prof.hosts - 1)
                j += j >= i
                h = rng.randint(0, self.layout(j).hubs)
                targets.append((self.normal_host(j), f"/p/{h}" if h else "/"))
        off = rng.randrange(len(SPELLINGS))
        links = []
        for n, (th, tp) in enumerate(targets):
            choices = self_sp if th is None else CROSS_SPELLINGS
            links.append(Link(th, tp, choices[(off + n) % len(choices)]))
        if rng.random() < 0.4:  # one link as <area href> in an image map
            links[-1] = Link(links[-1].host, links[-1].path_qs, links[-1].spelling, area=True)
        base = None
        base_abs = False
        if k and rng.random() < 0.25:
            base = rng.choice(("/b/{0}/", "/b/{0}/x/index.html", "/p/")).format(rng.randint(1, 9))
            base_abs = not rel_only and rng.random() < 0.5
        junk = tuple(JUNK_HREFS) if k == 0 else (rng.choice(tuple(JUNK_HREFS)),)
        return Page(host, path_qs, links=tuple(links), base=base, base_absolute=base_abs, junk=junk)

    def _trap_page(self, site: Site, path_qs: str) -> Page | None:
        kind = site.trap
        path, _, query = path_qs.partition("?")
        if kind is None:  # not a trap site (the caller asks only for a trap site's pages)
            return None

        def mk(*links: Link) -> Page:
            return Page(site.host, path_qs, links=tuple(links), trap=kind)

        home = Link(None, "/", "root-relative")
        if kind == "faceted-search":
            if path != "/shop":
                return None
            params: dict[str, str] = {}
            for kv in query.split("&") if query else ():
                key, _, val = kv.partition("=")
                ok = (key in _FACETS and val in _FACETS[key]) or (key == "page" and val.isdigit() and val[0] != "0")
                if not ok or key in params:
                    return None
                params[key] = val
            rng = Random(f"{self.seed}|facets|{path_qs}")
            out = []
            for key, values in _FACETS.items():
                nxt = dict(params, **{key: rng.choice([v for v in values if v != params.get(key)])})
                out.append(Link(None, "/shop?" + _query(nxt), "root-relative"))
            out.append(Link(None, "/shop?" + _query(dict(params, page=str(int(params.get("page", "1")) + 1))), "root-relative"))
            return Page(site.host, path_qs, links=tuple(out) + (home,), trap=kind, text_key=f"{site.host}/shop")
        if query:
            return None
        m = _TRAP_PATTERNS[kind].fullmatch(path)
        if m is None:
            return None
        if kind == "calendar":
            y, mo = int(m.group(1)), int(m.group(2))
            after = (y + (mo == 12), mo % 12 + 1)
            before = (y - (mo == 1), (mo - 2) % 12 + 1)
            return mk(*(Link(None, f"/cal/{a:04d}/{b:02d}") for a, b in (after, before) if 1 <= a <= 9999), home)
        if kind == "path-repetition":
            return mk(Link(None, path + "loop/", "relative"), home)
        if kind == "session-id":
            return mk(Link(None, f"/s/{digest(self.seed, path, 'a')}/page"),
                      Link(None, f"/s/{digest(self.seed, path, 'b')}/other"), home)
        n = int(m.group(1))  # deep
        return mk(Link(None, f"/deep/{n + 1}"), Link(None, f"/deep/{2 * n + 1}"), home)


def _query(params: dict[str, str]) -> str:
    # Sorted keys: a crawler that sorts query parameters sends the same bytes.
    return "&".join(f"{k}={params[k]}" for k in sorted(params))

