"""Export the synthetic "bench" web to static files that nginx serves by Host header.

The aiohttp test server renders pages in Python, which makes it slower than the
crawler it would be measuring; nginx serving pre-rendered files costs a few
microseconds per request, so the crawler (or Scrapy, or the bare loop) is the only
thing being measured.

Layout (one directory per host, ``h0042.bench.test`` -> ``DIR/h0042``)::

    DIR/h0042/index.html     the host root "/"
    DIR/h0042/p/7            page "/p/7" (served as text/html by default_type)
    DIR/h0042/robots.txt     allow-all except /private/ (no page lives there)
    DIR/manifest.json        parameters + page counts; a matching manifest = reuse

Pages are :class:`crawler.testing.web.SyntheticWeb` (profile "bench": 20-30 KB, 20-60
links in every spelling a crawler must canonicalize) rendered with the port bound, with
the domain rewritten from ``web.test`` to ``bench.test`` so the bench web never
collides with the test web's ``*.test`` resolve rules. Generation is deterministic
(same seed, hosts and port -> same bytes) and split over processes.

    python -m benchmarks.staticweb --hosts 4000 --port 18080 --dir /tmp/raycrawl-bench/web
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

DOMAIN = "bench.test"
DEFAULT_PORT = 18080
DEFAULT_HOSTS = 4000
DEFAULT_ROOT = os.path.join(tempfile.gettempdir(), "raycrawl-bench")
ROBOTS_TXT = b"User-agent: *\nDisallow: /private/\n"
_FORMAT = 2  # bump when the layout or rewriting changes (invalidates old exports)


def default_dir(hosts: int, port: int, seed: int = 0, pages_per_host: int | None = None) -> str:
    """Where an export with these parameters lives unless ``--dir`` says otherwise."""
    pph = f"-n{pages_per_host}" if pages_per_host else ""
    return os.path.join(DEFAULT_ROOT, f"web-h{hosts}{pph}-p{port}-s{seed}")


def host_name(i: int) -> str:
    """The bench host name of normal host ``i`` (``h0042.bench.test``)."""
    return f"h{i:04d}.{DOMAIN}"


def seeds(hosts: int, port: int, n: int = 3) -> list[str]:
    """Seed URLs of the bench web (the first roots of the host tree reach everything)."""
    return [f"http://{host_name(i)}:{port}/" for i in range(min(n, hosts))]


def _rewrite(body: bytes) -> bytes:
    # Every absolute link carries the host; upper-case spellings carry it upper-cased.
    return body.replace(b".web.test", b"." + DOMAIN.encode()).replace(b".WEB.TEST", b"." + DOMAIN.upper().encode())


def _render_range(args: tuple[int, int, int | None, int, int, int, str]) -> tuple[int, int]:
    """Render hosts [lo, hi) into ``out``; returns (pages, bytes). Runs in a worker process."""
    seed, hosts, pages_per_host, port, lo, hi, out = args
    from crawler.testing.web import SyntheticWeb

    web = SyntheticWeb(seed=seed, profile="bench", hosts=hosts, pages_per_host=pages_per_host)
    web.bind(port)
    pages = size = 0
    for i in range(lo, hi):
        src_host = web.normal_host(i)
        d = Path(out) / f"h{i:04d}"
        (d / "p").mkdir(parents=True, exist_ok=True)
        (d / "robots.txt").write_bytes(ROBOTS_TXT)
        for k in range(web.graph.layout(i).pages):
            body = web.body(src_host, "/" if k == 0 else f"/p/{k}")
            if body is None:
                continue
            body = _rewrite(body)
            (d / ("index.html" if k == 0 else f"p/{k}")).write_bytes(body)
            pages += 1
            size += len(body)
    return pages, size


def generate(directory: str | None = None, *, hosts: int = DEFAULT_HOSTS, port: int = DEFAULT_PORT,
             seed: int = 0, pages_per_host: int | None = None, workers: int | None = None,
             force: bool = False) -> dict[str, Any]:
    """Write the static web (or reuse a complete one with the same parameters); returns the manifest.

    ``pages_per_host`` fixes every host's page count (default: the profile's 20-60).
    """
    directory = directory or default_dir(hosts, port, seed, pages_per_host)
    root = Path(directory)
    manifest_path = root / "manifest.json"
    want = {"format": _FORMAT, "seed": seed, "hosts": hosts, "port": port, "domain": DOMAIN,
            "pages_per_host": pages_per_host}
    if manifest_path.exists() and not force:
        m = json.loads(manifest_path.read_text())
        if all(m.get(k) == v for k, v in want.items()):
            m["reused"] = True
            m["dir"] = str(root)
            return m
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    t0 = time.monotonic()
    workers = workers or os.cpu_count() or 1
    step = max(1, hosts // (workers * 8))
    jobs = [(seed, hosts, pages_per_host, port, lo, min(hosts, lo + step), str(root)) for lo in range(0, hosts, step)]
    pages = size = 0
    with ProcessPoolExecutor(workers) as pool:
        for p, s in pool.map(_render_range, jobs):
            pages += p
            size += s
    m = {**want, "pages": pages, "bytes": size, "mean_page_bytes": round(size / max(1, pages)),
         "generated_s": round(time.monotonic() - t0, 1), "seeds": seeds(hosts, port)}
    manifest_path.write_text(json.dumps(m, indent=2))  # written last: its presence = complete
    m["reused"] = False
    m["dir"] = str(root)
    return m


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hosts", type=int, default=DEFAULT_HOSTS)
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="port written into absolute links")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--pages-per-host", type=int, default=None, help="fixed page count per host (default 20-60)")
    p.add_argument("--dir", default=None, help=f"output directory (default {DEFAULT_ROOT}/web-h<hosts>[-n<pages>]-p<port>-s<seed>)")
    p.add_argument("--force", action="store_true", help="regenerate even if a matching export exists")
    a = p.parse_args(argv)
    m = generate(a.dir, hosts=a.hosts, port=a.port, seed=a.seed, pages_per_host=a.pages_per_host, force=a.force)
    print(json.dumps(m))
    return 0


if __name__ == "__main__":
    sys.exit(main())
