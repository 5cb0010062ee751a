"""Profile a full crawl of the bench web with py-spy and print the top functions.

Runs the same child as the throughput benchmark (``benchmarks.crawlrun``) under
``py-spy record --subprocesses --format raw`` (collapsed stacks; with Ray that covers
the driver and every Python worker process), then folds the samples into

* self time per function (the frame on top of the stack), and
* inclusive time per function (any frame of the stack; each function counted once per
  sample), in percent of the busy samples: py-spy drops idle samples unless ``--idle``,
  and samples whose leaf is a known blocking wait it cannot recognise (Ray's worker
  main loop, thread-pool and condition waits, epoll; :data:`IDLE_LEAVES`) are dropped too.

    python -m benchmarks.profile_crawl --mode local --pages 20000
    python -m benchmarks.profile_crawl --mode ray --pages 20000 --svg /tmp/profile.svg
    python -m benchmarks.profile_crawl --mode ray --attach --pages 30000   # HostShard actors only

``--attach`` runs the Ray crawl unprofiled and attaches py-spy to each HostShard actor
process for ``--duration`` seconds once the crawl is running: the shards' mix of work at
full speed (wrapping every Ray process in py-spy slows a crawl ~10x and starves it).

``--svg`` additionally writes a flame graph (a second py-spy format needs a second
run, so the SVG is rendered from the collapsed file by py-spy's format only when asked).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from typing import Any

from benchmarks import common
from benchmarks.crawlrun import crawl_config
from benchmarks.nginx import Nginx
from benchmarks.staticweb import DEFAULT_HOSTS, DEFAULT_PORT, default_dir, generate

# Leaf frames that are a thread blocked in C (py-spy cannot always tell): Ray's worker
# main loop waiting for tasks, thread-pool workers waiting for work, the event loop's
# epoll, condition waits. Samples ending in them are dropped as idle.
IDLE_LEAVES = frozenset({
    "Worker.main_loop (ray/_private/worker.py)",
    "Condition.wait (threading.py)",
    "Event.wait (threading.py)",
    "EpollSelector.select (selectors.py)",
    "_worker (concurrent/futures/thread.py)",
    "LogMonitor.run (ray/_private/log_monitor.py)",
    "Thread.join (threading.py)",
    "Thread._wait_for_tstate_lock (threading.py)",
})


# Which part of the pipeline a sample belongs to: the first frame, walking from the leaf
# towards the root, whose file matches one of these (generic frames -- asyncio,
# threading, json, socket... -- are skipped so their time goes to whoever called them).
COMPONENTS = (
    ("checkpoint (JSON state)", ("ShardEngine.checkpoint",)),
    ("output: blobs (gzip, fsync, files)", ("BlobStore.", "gzip.py")),
    ("output: Parquet rows", ("crawler/output/", "pyarrow/")),
    ("parse (lexbor, links, text)", ("crawler/parse/", "selectolax/")),
    ("fingerprints (SHA-256, SimHash, content index)", ("crawler/content/fingerprints.py",)),
    ("frontier store (SQLite journal)", ("crawler/frontier/store.py",)),
    ("seen set (Bloom + store)", ("crawler/seen/", "pybloom_live/")),
    ("link policy (normalize, scope, traps)", ("crawler/urls/", "crawler/policy/links.py", "crawler/policy/hostbudget.py")),
    ("robots", ("crawler/robots/", "protego")),
    ("fetch (aiohttp, DNS)", ("crawler/fetch/fetcher.py", "crawler/fetch/transport.py", "crawler/fetch/aiohttp_transport.py",
                              "crawler/fetch/decoding.py", "crawler/fetch/dns.py", "aiohttp/", "aiohappyeyeballs/", "yarl/",
                              "multidict/")),
    ("frontier + politeness", ("crawler/frontier/frontier.py", "crawler/policy/politeness.py")),
    ("routing + batching", ("crawler/engine/linkrouter.py", "crawler/engine/batching.py")),
    ("Ray actor calls + runtime", ("ray/", "actors/")),
    ("engine bookkeeping", ("crawler/engine/dispatcher.py", "crawler/engine/handler.py", "crawler/engine/gates.py",
                            "crawler/engine/recorder.py", "crawler/engine/shard.py", "crawler/engine/pipeline.py",
                            "crawler/engine/outbox.py", "crawler/engine/checkpoint.py", "crawler/engine/assembly.py",
                            "crawler/session/crawlsession.py", "crawler/session/inprocess.py",
                            "crawler/session/termination.py", "jobs/")),
)
_GENERIC = ("asyncio/", "threading.py", "json/", "socket.py", "selectors.py", "concurrent/", "contextlib.py",
            "<frozen", "functools.py", "typing.py", "<string>", "enum.py", "queue.py", "logging/", "weakref.py",
            "numpy/", "uuid.py", "idna/", "ipaddress.py", "dataclasses.py", "_weakrefset.py", "collections/")
_GENERIC_FUNCS = ("_fsync_path (",)  # shared by blobs and Parquet parts: charge the caller


def component(funcs: list[str]) -> str:
    """The pipeline component of one sample (see :data:`COMPONENTS`)."""
    fsync = False
    for fr in reversed(funcs):
        short = _short(fr)
        path = short.partition(" (")[2]
        if short.startswith(_GENERIC_FUNCS):
            fsync = True
            continue
        if path.startswith(_GENERIC):
            continue
        for name, keys in COMPONENTS:
            if any(k in short for k in keys):
                return name
        return "other (start-up, imports, libraries)"
    if fsync:  # a pool thread's stack does not show who submitted the fsync
        return "output: fsync in worker threads"
    return "event loop / threads (generic)"


def fold(raw_path: str) -> tuple[int, Counter, Counter, Counter, Counter]:
    """(samples, self-time per function, inclusive per function, self per file, per component).

    Samples whose leaf frame is in :data:`IDLE_LEAVES` are not counted.
    """
    total = 0
    self_t: Counter = Counter()
    incl: Counter = Counter()
    files: Counter = Counter()
    comps: Counter = Counter()
    with open(raw_path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            stack, _, n = line.rpartition(" ")
            if not stack or not n.isdigit():
                continue
            count = int(n)
            frames = stack.split(";")
            # First frame is "process ..." / thread name with --subprocesses; keep function frames.
            funcs = [fr for fr in frames if "(" in fr and fr.endswith(")")]
            if not funcs:
                continue
            top = _short(funcs[-1])
            if top in IDLE_LEAVES:
                continue
            total += count
            self_t[top] += count
            files[_file(funcs[-1])] += count
            comps[component(funcs)] += count
            for fn in {_short(fr) for fr in funcs}:
                incl[fn] += count
    return total, self_t, incl, files, comps


_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _short(frame: str) -> str:
    # "parse_page (crawler/parse/html.py:640)" -> "parse_page (crawler/parse/html.py)"; line numbers
    # split one function into many rows.
    name, _, loc = frame.partition(" (")
    path = loc.rstrip(")").rsplit(":", 1)[0]
    for marker in ("/site-packages/", "/lib/python3.11/", _REPO + "/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{name} ({path})"


def _file(frame: str) -> str:
    return _short(frame).partition(" (")[2].rstrip(")")


def profile(mode: str, pages: int, *, hosts: int, port: int, interval: float, rate: int, timeout_s: float,
            svg: str | None, raw_out: str | None) -> dict[str, Any]:
    web = generate(default_dir(hosts, port), hosts=hosts, port=port)["dir"]
    work = tempfile.mkdtemp(prefix="rcb-prof-")
    cfg = crawl_config(hosts=hosts, port=port, pages=pages, interval=interval, out=os.path.join(work, "out"))
    cfg_path = os.path.join(work, "cfg.json")
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    raw = raw_out or os.path.join(work, "profile.txt")
    child = [sys.executable, "-m", "benchmarks.crawlrun", "--mode", mode, "--cfg", cfg_path,
             "--timeout", str(timeout_s), "--ray-tmp", os.path.join(work, "ray")]
    cmd = ["py-spy", "record", "--format", "raw", "--rate", str(rate), "--output", raw, "--nonblocking"]
    if mode == "ray":
        cmd.append("--subprocesses")
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    try:
        with Nginx(web, port, access_log=False):
            # stdin answers the child's synchronous end mark (nobody samples CPU here).
            proc = subprocess.run([*cmd, "--", *child], input="ok\n" * 4, text=True, capture_output=True, check=False,
                                  env=env, timeout=timeout_s + 180, cwd=os.path.dirname(os.path.dirname(__file__)))
        result = None
        for line in proc.stdout.splitlines():
            if line.startswith(common.RESULT):
                result = json.loads(line[len(common.RESULT):])
        total, self_t, incl, files, comps = fold(raw)
        if svg:
            _raw_to_svg(raw, svg)
        pct = lambda c: round(100.0 * c / total, 2) if total else 0.0
        stats = (result or {}).get("stats", {})
        return {
            "benchmark": "profile",
            "mode": mode,
            "pages": stats.get("outcomes", {}).get("fetched"),
            "pages_per_s": stats.get("pages_per_s"),
            "samples": total,
            "rate_hz": rate,
            "top_self": [(fn, pct(c)) for fn, c in self_t.most_common(30)],
            "top_inclusive": [(fn, pct(c)) for fn, c in incl.most_common(45)],
            "self_by_file": [(fn, pct(c)) for fn, c in files.most_common(25)],
            "by_component": [(fn, pct(c)) for fn, c in comps.most_common()],
            "raw": raw if raw_out else None,
            "py_spy_rc": proc.returncode,
            "py_spy_stderr": proc.stderr[-1500:] if proc.returncode else "",
        }
    finally:
        if not raw_out:
            shutil.rmtree(work, ignore_errors=True)


def profile_attached(pages: int, *, hosts: int, port: int, interval: float, rate: int, timeout_s: float,
                     duration: float, warmup: float) -> dict[str, Any]:
    """Profile the HostShard actors of an unprofiled Ray crawl (see the module docstring)."""
    import time

    import psutil

    web = generate(default_dir(hosts, port), hosts=hosts, port=port)["dir"]
    work = tempfile.mkdtemp(prefix="rcb-prof-")
    cfg = crawl_config(hosts=hosts, port=port, pages=pages, interval=interval, out=os.path.join(work, "out"))
    cfg_path = os.path.join(work, "cfg.json")
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    child = [sys.executable, "-m", "benchmarks.crawlrun", "--mode", "ray", "--cfg", cfg_path,
             "--timeout", str(timeout_s), "--ray-tmp", os.path.join(work, "ray")]
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    raws: list[str] = []
    try:
        with Nginx(web, port, access_log=False, workers=2):
            proc = subprocess.Popen(child, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                    text=True, env=env, cwd=_REPO, start_new_session=True)
            assert proc.stdout is not None and proc.stdin is not None
            for line in proc.stdout:  # wait for the crawl to start
                if line.startswith(common.MARK + " start"):
                    break
            time.sleep(warmup)
            shards = [p for p in psutil.Process(proc.pid).children(recursive=True) if "HostShard" in " ".join(p.cmdline()[:1])]
            spies = []
            for sp in shards:
                raw = os.path.join(work, f"shard-{sp.pid}.txt")
                raws.append(raw)
                spies.append(subprocess.Popen(["py-spy", "record", "--format", "raw", "--rate", str(rate), "--nonblocking",
                                               "--duration", str(int(duration)), "--output", raw, "--pid", str(sp.pid)],
                                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            for spy in spies:
                spy.wait()
            result = None
            for line in proc.stdout:
                if line.startswith(common.MARK) and line.rstrip().endswith("sync"):
                    proc.stdin.write("ok\n")
                    proc.stdin.flush()
                elif line.startswith(common.RESULT):
                    result = json.loads(line[len(common.RESULT):])
            proc.wait()
        merged = os.path.join(work, "merged.txt")
        with open(merged, "w") as out:
            for raw in raws:
                if os.path.exists(raw):
                    with open(raw) as f:
                        out.write(f.read())
        total, self_t, incl, files, comps = fold(merged)
        pct = lambda c: round(100.0 * c / total, 2) if total else 0.0
        stats = (result or {}).get("stats", {})
        return {
            "benchmark": "profile",
            "mode": "ray-attach",
            "processes": "HostShard actors only",
            "shards_profiled": len(raws),
            "duration_s": duration,
            "pages": stats.get("outcomes", {}).get("fetched"),
            "pages_per_s": stats.get("pages_per_s"),
            "samples": total,
            "rate_hz": rate,
            "top_self": [(fn, pct(c)) for fn, c in self_t.most_common(30)],
            "top_inclusive": [(fn, pct(c)) for fn, c in incl.most_common(45)],
            "self_by_file": [(fn, pct(c)) for fn, c in files.most_common(25)],
            "by_component": [(fn, pct(c)) for fn, c in comps.most_common()],
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _raw_to_svg(raw: str, svg: str) -> None:
    """Render collapsed stacks as a flame graph if ``flamegraph.pl`` or ``inferno`` is around."""
    for tool in ("inferno-flamegraph", "flamegraph.pl"):
        exe = shutil.which(tool)
        if exe:
            with open(raw) as src, open(svg, "w") as dst:
                subprocess.run([exe], stdin=src, stdout=dst, check=False)
            return
    print(f"(no flame graph tool found; collapsed stacks are in {raw})", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="py-spy profile of a full crawl")
    p.add_argument("--mode", choices=("local", "ray"), default="local")
    p.add_argument("--pages", type=int, default=20000)
    p.add_argument("--hosts", type=int, default=DEFAULT_HOSTS)
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.add_argument("--interval", type=float, default=0.05)
    p.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--svg", default=None, help="also write a flame graph here (needs inferno or flamegraph.pl)")
    p.add_argument("--raw", default=None, help="keep py-spy's collapsed stacks here")
    p.add_argument("--json", default=None, help="also save the result here")
    p.add_argument("--attach", action="store_true", help="ray only: profile the HostShard actors of an unprofiled crawl")
    p.add_argument("--duration", type=float, default=30.0, help="--attach: seconds of sampling")
    p.add_argument("--warmup", type=float, default=10.0, help="--attach: seconds after the start before sampling")
    a = p.parse_args(argv)
    common.exit_on_sigterm()
    if a.attach:
        r = profile_attached(a.pages, hosts=a.hosts, port=a.port, interval=a.interval, rate=a.rate,
                             timeout_s=a.timeout, duration=a.duration, warmup=a.warmup)
    else:
            r = profile(a.mode, a.pages, hosts=a.hosts, port=a.port, interval=a.interval, rate=a.rate,
                    timeout_s=a.timeout, svg=a.svg, raw_out=a.raw)
    common.write_json(a.json, r)
    print("\ntop self time (% of samples):", file=sys.stderr)
    for fn, v in r["top_self"][:25]:
        print(f"  {v:6.2f}  {fn}", file=sys.stderr)
    print("\ntop inclusive:", file=sys.stderr)
    for fn, v in r["top_inclusive"][:40]:
        print(f"  {v:6.2f}  {fn}", file=sys.stderr)
    print("\nbusy samples by pipeline component:", file=sys.stderr)
    for fn, v in r["by_component"]:
        print(f"  {v:6.2f}  {fn}", file=sys.stderr)
    print("\nself time by file:", file=sys.stderr)
    for fn, v in r["self_by_file"][:20]:
        print(f"  {v:6.2f}  {fn}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
