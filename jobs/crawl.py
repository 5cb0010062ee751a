"""The crawl driver: ``python -m jobs.crawl CONFIG [--out DIR] [--set k=v] [--address ADDR]``.

This is what ``ray job submit`` runs and what ``crawl run`` calls. It is a thin layer
over :class:`crawler.session.crawlsession.CrawlSession`: it picks the runtime (Ray, or in-process
with ``--local``), shows progress, and turns SIGINT and SIGTERM (Ctrl-C, ``kill``,
``ray job stop``) into a clean stop: rows flushed, ``stats.json`` written, the state
resumable, a non-zero exit (130 for SIGINT, 143 for SIGTERM); a stop asked for through
the control API exits 0. The exit status follows the URL ledger (:func:`exit_status`:
one that does not balance is 1), and whatever is refused before the crawl runs is one
line and exit status 2 (:func:`as_refusal`). With ``api.enabled`` it
serves the HTTP control API (crawler.control.api) in its event loop and prints the API's address
to stderr, which is the job log of a crawl started with ``ray job submit``.

:func:`Crawl` gives notebooks and scripts a blocking handle on a crawl that keeps running
between calls (crawler.session.handle).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
import signal
import sys
from typing import Any, Sequence

from crawler import configcheck as config_mod
from crawler import eventloop
from crawler.session import ledger
from crawler.config.settings import CrawlConfig
from crawler.control.api import ControlApi
from crawler import errors
from crawler.errors import REFUSALS, CrawlError, RefusedError, StorageError
from crawler.session.handle import CrawlHandle
from crawler.output.fs import check_output_folder
from crawler.session.crawlsession import CrawlSession
from crawler.session.crawlstats import CrawlTotals
from crawler.session.ledger import EXIT_BY_SIGNAL, exit_status

log = logging.getLogger("jobs.crawl")


#: An error of this project as Ray reports one raised in an actor's constructor (text).
_RAISED_IN_ACTOR = re.compile(r"^crawler\.errors\.(\w+): (.+)$", re.MULTILINE)


def _actor_error(exc: BaseException) -> CrawlError | None:
    """The project error behind a Ray actor's failure: an error raised in an actor's
    constructor reaches the driver as text only (``ray.exceptions.ActorDiedError``)."""
    if not type(exc).__module__.startswith("ray"):
        return None
    cause = getattr(exc, "cause", None)
    if isinstance(cause, CrawlError):
        return cause
    found = _RAISED_IN_ACTOR.findall(str(exc))
    cls = getattr(errors, found[-1][0], None) if found else None
    if isinstance(cls, type) and issubclass(cls, CrawlError) and cls is not errors.RenderError:
        return cls(found[-1][1])
    return None


def as_refusal(exc: BaseException, out: str, mode: str) -> CrawlError | None:
    """The refusal that ``exc``, raised before the crawl's first poll, stands for: a refusal
    itself, or state that cannot be read or written (the output's disk, a damaged store,
    also inside an actor). None: not a refusal (a failure of a crawl that ran)."""
    inner = _actor_error(exc) or exc
    if isinstance(inner, REFUSALS):
        return inner
    if isinstance(inner, OSError):
        why = f"{inner.strerror}: {inner.filename}" if inner.strerror and inner.filename else (inner.strerror or repr(inner))
        return RefusedError(f"{out}: cannot write the crawl's output or state ({why}); choose another --out")
    if isinstance(inner, StorageError):
        if mode == "resume":
            return RefusedError(
                f"{inner}; the crawl in {out} cannot resume: restore its state folder from a copy, or start over in it with --force"
            )
        return RefusedError(f"{inner}; choose another --out, or start over in it with --force")
    return None


def make_session(
    cfg: CrawlConfig, *, local: bool = False, address: str | None = None, **kw: Any
) -> CrawlSession:
    """A session on Ray (joined at ``address``, ``runtime.address`` or RAY_ADDRESS, else
    embedded) or, with ``local``, in this process."""
    if local:
        from crawler.session.inprocess import local_session

        return local_session(cfg, **kw)
    from actors.rayruntime import RayRuntime

    return CrawlSession(cfg, RayRuntime(address or cfg.runtime.address), **kw)


def Crawl(  # noqa: N802 - a factory that reads like the handle it returns
    cfg: CrawlConfig, *, local: bool = False, address: str | None = None, poll_interval_s: float = 0.2, force: bool = False,
) -> CrawlHandle:
    """A blocking handle on a crawl for notebooks and scripts: ``Crawl(cfg).start()``."""
    session = make_session(cfg, local=local, address=address, poll_interval_s=poll_interval_s, force=force)
    return CrawlHandle(session, on_api_request=None if local else api_metrics())


def api_metrics() -> Any:
    """Counts API requests in Ray's metrics (``crawler_api_requests_total``)."""
    from actors.metrics import ApiMetrics

    return ApiMetrics().record


async def _run(session: CrawlSession, stopped_by: list[int], api: ControlApi | None = None) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()

    def on_signal(signum: int) -> None:
        if stopped_by:  # a second signal: give up at once
            assert main is not None
            main.cancel()
            return
        stopped_by.append(signum)
        if not session.ready:
            # Still starting (Ray, the lease, actors being placed): nothing was fetched, so
            # there is nothing to flush; the start is cancelled where it waits, and the
            # session's cleanup kills what was created and releases the lease.
            print("\nstopping: the crawl was still starting; nothing was fetched", file=sys.stderr)
            assert main is not None
            main.cancel()
            return
        print("\nstopping: flushing what was fetched (Ctrl-C again to abort)...", file=sys.stderr)
        session.request_stop()

    installed: set[int] = set()

    def install(_session: CrawlSession | None = None) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, on_signal, sig)
                installed.add(sig)
            except (ValueError, RuntimeError, NotImplementedError):  # not the main thread
                pass

    # Again once the runtime is up: ray.init installs its own SIGTERM handler, which
    # would end the driver without a clean stop.
    announce = session.on_start

    def on_start(started: CrawlSession) -> None:
        if announce is not None:
            announce(started)
        install()

    session.on_start = on_start
    install()
    try:
        if api is not None:
            # Up before the shards: it answers 503 until the crawl has started.
            print(f"control API: {await api.start()}", file=sys.stderr, flush=True)
        return await session.run()
    finally:
        if api is not None:
            await api.close()
        for sig in installed:
            loop.remove_signal_handler(sig)


def run_crawl(
    cfg: CrawlConfig, *, local: bool = False, address: str | None = None, progress: bool = True, force: bool = False,
) -> tuple[dict[str, Any], int]:
    """Run a crawl to the end with progress output and signal handling.

    Returns (stats, :func:`exit_status`). Raises a refusal (crawler.errors.REFUSALS) for what
    fails before the crawl ran: bad state in the output is one line, not a traceback.
    """
    from jobs.progress import Progress

    def announce(session: CrawlSession) -> None:
        if session.mode == "finished":
            print(f"the crawl in {cfg.output.path} is already finished; nothing to do", file=sys.stderr)
        elif session.mode == "resume":
            print(f"resuming the unfinished crawl in {cfg.output.path} ({session.resumed} URLs queued)", file=sys.stderr)

    prog = Progress(enabled=progress, interval_s=cfg.runtime.progress_interval_s)
    polled: list[bool] = []  # the crawl ran (one poll of its shards): errors from now on are not refusals

    def on_progress(total: CrawlTotals) -> None:
        if not polled:
            polled.append(True)
        prog.update(total)

    session = make_session(cfg, local=local, address=address, force=force, on_progress=on_progress, on_start=announce)
    stopped_by: list[int] = []
    stopped_by_api: list[bool] = []

    def api_stop() -> None:
        stopped_by_api.append(True)
        session.request_stop()

    try:
        # Made before anything starts: a non-loopback API without a token is refused here.
        api = ControlApi(session, cfg.api, on_stop=api_stop, on_request=None if local else api_metrics()) if cfg.api.enabled else None
        stats = eventloop.run(_run(session, stopped_by, api))
    except asyncio.CancelledError:
        if stopped_by and not session.ready:  # stopped while starting: an ordinary stop
            return {"stopped_during_start": True}, EXIT_BY_SIGNAL.get(signal.Signals(stopped_by[0]), 1)
        raise KeyboardInterrupt from None  # a second Ctrl-C: abort without flushing
    except KeyboardInterrupt:
        if session.ready:
            raise
        # Ctrl-C while an embedded Ray was starting (actors.rayruntime: it interrupts at once).
        print("\nstopping: the crawl was still starting; nothing was fetched", file=sys.stderr)
        return {"stopped_during_start": True}, EXIT_BY_SIGNAL[signal.SIGINT]
    except Exception as exc:
        refusal = None if polled else as_refusal(exc, cfg.output.path, session.mode)
        if refusal is None or refusal is exc:
            raise
        raise refusal from exc
    finally:
        prog.close()
    return stats, exit_status(stats, signum=stopped_by[0] if stopped_by else None, api_stop=bool(stopped_by_api))


def load_config(path: str | None, out: str | None, overrides: Sequence[str]) -> CrawlConfig:
    """Load a config and apply ``--out`` / ``--set``; validates the seeds at once."""
    ov = list(overrides)
    if out:
        ov.append(f"output.path={out}")
    cfg = config_mod.load(path, ov)
    config_mod.all_seeds(cfg)  # a malformed seed fails the run now, before any actor starts
    check_output_folder(cfg.output.path, dict(cfg.output.storage_options) or None)  # and a file as --out
    return cfg


#: Why a crawl that ran out of work is not finished (``unfinished_reason`` in stats.json).
UNFINISHED = {
    "lost_urls": "lost URLs were queued again: run it again to fetch them",
    "ledger": "the URL ledger does not balance",
    "events_pending": "page.fetched events are still owed: run it again to send them",
}


def print_summary(stats: dict[str, Any], out: str, stream=None) -> None:
    """The end-of-crawl summary (what the demo prints)."""
    stream = stream or sys.stdout
    if stats.get("stopped_during_start"):
        print(f"crawl stopped while starting: nothing was fetched; `crawl run` on {out} starts it again", file=stream)
        return
    o = stats["outcomes"]
    reason = stats.get("unfinished_reason")
    if stats.get("finished"):
        state = "finished"
    elif stats.get("ended") == "duration":
        state = "ran its duration"
    elif reason:
        state = f"ended unfinished ({UNFINISHED.get(reason, reason)})"
    else:
        state = "stopped"
    print(f"crawl {state} in {stats['elapsed_s']:.1f}s: {o['fetched']} pages fetched ({stats['pages_per_s']} pages/s)", file=stream)
    print("outcomes: " + ", ".join(f"{k} {v}" for k, v in o.items()), file=stream)
    print(
        f"requests {stats['requests']} (robots.txt {stats['robots_requests']}), retries {stats['retries']}, "
        f"duplicates exact {stats['duplicates']['exact']} near {stats['duplicates']['near']}, "
        f"queued unfetched {stats['queued_unfetched']}, shards {stats['shards']}",
        file=stream,
    )
    r = stats.get("refresh") or {}
    if r.get("fetches"):
        print(
            f"refresh: {r['fetches']} refetches, {r['not_modified']} not modified ({100 * (r['not_modified_share'] or 0):.0f}%), "
            f"{r['changes_found']} changes found, {r['due_now']} due now",
            file=stream,
        )
    ev = stats.get("events") or {}
    if ev:
        print(
            f"page.fetched events: {ev.get('emitted', 0)} sent, {ev.get('pending', 0)} pending, "
            f"{ev.get('sink_failures', 0)} failed sends ({ev.get('sink_down_s', 0)}s down)",
            file=stream,
        )
    if stats.get("dropped"):
        print("links not followed: " + ", ".join(f"{k} {v}" for k, v in sorted(stats["dropped"].items())), file=stream)
    render = stats.get("render") or {}
    if render:
        print(render_line(render), file=stream)
    if stats.get("ledger"):
        print(ledger.describe(stats["ledger"]), file=stream)
    print(f"output: {out}/pages (Parquet), {out}/blobs, {out}/stats.json", file=stream)


def render_line(r: dict[str, Any]) -> str:
    """The summary's render line: the pool (or why there was none) and what rendering did."""
    pool = r.get("pool") or {}
    fallbacks = r.get("fallbacks") or {}
    if pool.get("off"):
        return (f"{pool['off']} ({fallbacks.get('unavailable', 0)} pages that wanted rendering were stored raw: "
                "render.fallbacks.unavailable)")
    many = "s" if pool.get("actors", 0) > 1 else ""
    size = f"{pool['actors']} render actor{many} of {pool['cpus_each']:g} CPU; " if pool else ""
    fell = ", ".join(f"{k} {v}" for k, v in sorted(fallbacks.items())) or "none"
    return f"render: {size}rendered {r.get('rendered', 0)} of {r.get('started', 0)} started, fallbacks {fell}"


def build_arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m jobs.crawl", description="Run a crawl on Ray.")
    p.add_argument("config", help="YAML crawl config (see configs/default.yaml)")
    p.add_argument("--out", help="output folder or fsspec URL (overrides output.path)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a setting, e.g. --set limits.max_pages=100")
    p.add_argument("--address", help="Ray cluster address (default: runtime.address, RAY_ADDRESS, else embedded Ray)")
    p.add_argument("--local", action="store_true", help="single process, no Ray")
    p.add_argument("--no-progress", action="store_true", help="plain periodic log lines instead of a live line")
    p.add_argument("--force", action="store_true", help="start over in an output folder that holds a crawl of another config")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_arg_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        cfg = load_config(args.config, args.out, args.overrides)
        stats, code = run_crawl(cfg, local=args.local, address=args.address, progress=not args.no_progress, force=args.force)
    except REFUSALS as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except CrawlError as exc:  # raised on purpose, with a message that says it all (as `crawl run`)
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if not stats.get("already_finished"):
        print_summary(stats, cfg.output.path)
    return code


if __name__ == "__main__":
    sys.exit(main())
