"""The ``crawl`` command line.

    crawl run CONFIG [--out DIR] [--set k=v ...] [--address ADDR] [--local] [--no-progress]
    crawl demo [--out DIR] [--no-progress]
    crawl stats OUT [--json]
    crawl report OUT [--to report.html]
    crawl export-warc OUT [--to FILE.warc.gz | DIR] [--max-file-mb N] [--json]
    crawl links FILE_OR_URL [--url BASE_URL] [--content-type T] [--config CONFIG]
    crawl serve-web [--profile demo] [--port 8080]
    crawl ctl [--api URL] [--token T] seeds add URL... | url URL | host pause|resume|show|set HOST | stats | stop

Bad config or seeds, and a path that cannot serve (a folder holding no crawl output, a file
where a folder is needed, a page file that cannot be read, an output that cannot be
written), exit with status 2 and a one-line message saying what to fix; nothing is created
on disk first. ``crawl run`` refuses a crawl it cannot resume (a damaged record or store)
the same way; its other statuses follow the run (jobs.crawl.exit_status): 0 finished with a
balanced ledger, already finished, ran its duration or stopped through the control API; 1
ended with a problem (the ledger does not balance, or unfinished without anyone asking);
130 / 143 stopped by SIGINT / SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import logging
import os
import sys
import zlib
from pathlib import Path
from typing import Sequence

from crawler.errors import REFUSALS, ConfigError, CrawlError, PathError, StorageError

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"


def _find_config(name: str) -> Path:
    """A bundled config by name (``demo`` -> configs/demo.yaml)."""
    for base in (CONFIG_DIR, Path(__file__).resolve().parent / "configs"):
        p = base / f"{name}.yaml"
        if p.exists():
            return p
    raise ConfigError(f"bundled config {name!r} not found under {CONFIG_DIR}")


def cmd_run(args: argparse.Namespace) -> int:
    from jobs.crawl import load_config, print_summary, run_crawl

    cfg = load_config(args.config, args.out, args.overrides)
    stats, code = run_crawl(cfg, local=args.local, address=args.address, progress=not args.no_progress, force=args.force)
    if not stats.get("already_finished"):
        print_summary(stats, cfg.output.path)
    return code


def cmd_demo(args: argparse.Namespace) -> int:
    """Serve the bundled synthetic web on loopback and crawl it on embedded Ray."""
    from crawler import configcheck as config_mod
    from crawler.output.fs import check_output_folder
    from crawler.testing.fixtures import running_web
    from jobs.crawl import print_summary, run_crawl

    out = os.path.abspath(args.out)
    check_output_folder(out)  # before the web starts
    with running_web(seed=args.seed, profile="demo") as server:
        web = server.web
        overrides = [
            f"output.path={out}",
            "seeds=" + json.dumps(web.seeds()),
            'fetch.resolve={"*.test": "127.0.0.1"}',
            *args.overrides,
        ]
        cfg = config_mod.load(_find_config("demo"), overrides)
        print(f"demo: synthetic web of {len(web.hosts())} hosts on 127.0.0.1:{server.port}; crawling with embedded Ray...", file=sys.stderr)
        # The demo's web gets a new port each time, so it is a new config: start over.
        stats, code = run_crawl(cfg, local=args.local, progress=not args.no_progress, force=True)
        print_summary(stats, out)
        requests = len(server.requests())
    print(f"the synthetic web answered {requests} requests; summarize the output with `crawl stats {out}`,", file=sys.stderr)
    print(f"  or read the pages: python -c \"from crawler.output import read_pages; print(read_pages('{out}'))\"", file=sys.stderr)
    return code


def cmd_stats(args: argparse.Namespace) -> int:
    """Summarize OUT from its rows, and check the run's URL ledger against them.

    Prints a summary for people (jobs.summary), or with ``--json`` every number as JSON
    for scripts. Exit 1 when the ledger in ``stats.json`` does not balance against the
    rows in OUT (a lost or invented URL); works for local and fsspec (s3://) outputs.
    """
    from crawler.session import ledger
    from crawler.output import summarize
    from crawler.output.fs import require_crawl_output

    fs, root = require_crawl_output(args.out)  # a typo is not an empty crawl
    summary = summarize(args.out)
    stats_path = f"{root.rstrip('/')}/stats.json"
    ok = True
    if fs.exists(stats_path):
        try:
            with fs.open(stats_path, "r") as f:
                run = json.load(f)
        except (OSError, ValueError) as exc:
            raise StorageError(f"{stats_path} cannot be read as JSON: {exc}") from exc
        summary["run"] = {k: run.get(k) for k in (
            "finished", "ended", "elapsed_s", "pages_per_s", "requests", "robots_requests", "retries",
            "queued_unfetched", "shards", "dropped", "events", "refresh", "news", "regions",
        )}
        led = run.get("ledger")
        if led:
            # Recheck against the rows as they are now, not as the run counted them.
            led = ledger.recheck(led, ledger.output_url_count(args.out), finished=bool(run.get("finished")))
            summary["ledger"] = led
            ok = led["balanced"]
    else:
        summary["run"] = {"finished": False, "note": "no stats.json: the crawl is running or was interrupted"}
    if not args.json:
        from jobs.summary import render

        print(render(summary, args.out))
        return 0 if ok else 1
    print(json.dumps(summary, indent=2, default=str))
    if summary.get("ledger"):
        print(ledger.describe(summary["ledger"]), file=sys.stderr)
    return 0 if ok else 1


def cmd_report(args: argparse.Namespace) -> int:
    """Write one self-contained HTML page of charts about OUT (jobs.report)."""
    from jobs.report import write_report

    dest = args.to or "crawl-report.html"
    write_report(args.out, dest)
    print(f"report: {dest} (open it in a browser)", file=sys.stderr)
    return 0


def cmd_export_warc(args: argparse.Namespace) -> int:
    """Write OUT's fetched pages as WARC 1.1 (crawler.output.warc); exit 1 if a blob was missing."""
    from crawler.output.warc import export_warc

    result = export_warc(args.out, args.to, max_file_bytes=int(args.max_file_mb * 1_000_000))
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        recs = ", ".join(f"{k} {v}" for k, v in sorted(result.records.items()))
        print(f"wrote {len(result.files)} WARC file(s): {recs}")
        for f in result.files:
            print(f"  {f}")
        if result.skipped:
            print("skipped: " + ", ".join(f"{k} {v}" for k, v in sorted(result.skipped.items())))
    if result.skipped.get("missing_or_corrupt_blob"):
        print(f"error: {result.skipped['missing_or_corrupt_blob']} pages have a missing or corrupt blob in {args.out}", file=sys.stderr)
        return 1
    return 0


def _read_page_file(path: str) -> bytes:
    """A saved page's bytes, gunzipped if it is gzip; PathError if it cannot be read."""
    if os.path.isdir(path):
        raise PathError(f"{path} is a folder; give a page file or a URL")
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise PathError(f"cannot read {path}: {exc.strerror}") from exc
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
            raise PathError(f"{path} starts like gzip but is not a valid gzip file ({exc})") from exc
    return data


def cmd_links(args: argparse.Namespace) -> int:
    """Print, one JSON object a line, each link the crawler would extract from a page."""
    from crawler import configcheck as config_mod
    from crawler.engine.partbuilders import build_link_policy
    from crawler.parse import parse_page

    target = args.target
    if os.path.exists(target):
        data = _read_page_file(target)
        base = args.url or Path(target).resolve().as_uri()
        ctype = args.content_type
        headers: dict[str, str] = {}
    elif not target.lower().startswith(("http://", "https://")):
        raise PathError(f"{target}: no such file, and not an http(s) URL")
    else:
        from crawler.engine.partbuilders import build_fetcher

        cfg0 = config_mod.load(args.config, args.overrides)

        async def fetch():
            f = build_fetcher(cfg0)
            try:
                return await f.fetch(target)
            finally:
                await f.close()

        res = asyncio.run(fetch())
        if res.status is None:
            raise CrawlError(f"fetch of {target} failed: {res.error}")
        data, base, ctype, headers = res.body, args.url or target, args.content_type or res.content_type, res.headers
    cfg = config_mod.load(args.config, args.overrides)
    seeds = [base] if base.startswith(("http://", "https://")) else []
    policy = build_link_policy(cfg, seeds)
    page = parse_page(data, base, ctype or "text/html", headers, user_agent_token=cfg.product_token())
    for d in policy.decide(page, depth=1):
        print(json.dumps(d.to_json(), ensure_ascii=False))
    return 0


def cmd_serve_web(args: argparse.Namespace) -> int:
    from crawler.testing.server import serve_forever

    serve_forever(profile=args.profile, port=args.port, seed=args.seed)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="crawl", description="A polite, crash-safe, distributed web crawler on Ray.")
    sub = p.add_subparsers(dest="command", required=True)

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a setting (YAML value), e.g. --set limits.max_pages=100")

    r = sub.add_parser("run", help="run a crawl from a YAML config")
    r.add_argument("config")
    r.add_argument("--out", help="output folder or fsspec URL (overrides output.path)")
    r.add_argument("--address", help="Ray cluster address (default: RAY_ADDRESS, else embedded Ray)")
    r.add_argument("--local", action="store_true", help="single process, no Ray")
    r.add_argument("--no-progress", action="store_true")
    r.add_argument("--force", action="store_true", help="start over in an output folder that holds a crawl of another config")
    common(r)
    r.set_defaults(func=cmd_run)

    d = sub.add_parser("demo", help="crawl the bundled synthetic web on loopback (no network needed)")
    d.add_argument("--out", default="./crawl-demo-out")
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--local", action="store_true", help="single process, no Ray")
    d.add_argument("--no-progress", action="store_true")
    common(d)
    d.set_defaults(func=cmd_demo)

    s = sub.add_parser("stats", help="summarize an output folder (exit 1 if its URL ledger does not balance)")
    s.add_argument("out")
    s.add_argument("--json", action="store_true", help="every number as JSON, for scripts")
    s.set_defaults(func=cmd_stats)

    rp = sub.add_parser("report", help="write one self-contained HTML page of charts about an output folder")
    rp.add_argument("out")
    rp.add_argument("--to", metavar="FILE", help="where to write it (default: ./crawl-report.html)")
    rp.set_defaults(func=cmd_report)

    wx = sub.add_parser("export-warc", help="write the fetched pages as WARC 1.1 (response, revisit and metadata records)")
    wx.add_argument("out")
    wx.add_argument("--to", metavar="FILE_OR_DIR", help="a .warc.gz/.warc file, or a directory for size-rotated files (default: OUT/warc/)")
    wx.add_argument("--max-file-mb", type=float, default=1000.0,
                    help="size at which a directory destination starts a new file (default 1000)")
    wx.add_argument("--json", action="store_true", help="files and record counts as JSON")
    wx.set_defaults(func=cmd_export_warc)

    lk = sub.add_parser("links", help="print the links the crawler would extract from a page")
    lk.add_argument("target", metavar="FILE_OR_URL")
    lk.add_argument("--url", help="the URL the file was fetched from (base for relative links)")
    lk.add_argument("--content-type", help="Content-Type to assume for a file")
    lk.add_argument("--config", help="crawl config whose scope/trap rules apply")
    common(lk)
    lk.set_defaults(func=cmd_links)

    w = sub.add_parser("serve-web", help="serve the synthetic web on loopback for trying the crawler")
    w.add_argument("--profile", default="demo", choices=["test", "demo", "bench"])
    w.add_argument("--port", type=int, default=8080)
    w.add_argument("--seed", type=int, default=0)
    w.set_defaults(func=cmd_serve_web)

    from jobs.ctl import add_parser as add_ctl

    add_ctl(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except REFUSALS as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except CrawlError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
