"""Shared benchmark plumbing: process-tree CPU/RSS sampling, marked subprocesses, machine info.

CPU is the sum of user+system time over every process of a tree (the measured process
and all its descendants: for an embedded Ray crawl that is the driver, gcs_server,
raylet, the workers hosting the actors, and Ray's helper processes). A process that
exits keeps the CPU it had at its last sample; the sampler runs in the *parent*
benchmark process so its own cost is not charged to what it measures.

A measured child marks the phase boundaries by printing ``@@MARK <name>`` lines; the
parent samples the tree at once when it reads one, so "CPU between start and end" is
the crawl alone, without interpreter start-up, imports or Ray start-up (reported too).
The child's last line starting with ``@@RESULT `` is its JSON result.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psutil

MARK = "@@MARK"
RESULT = "@@RESULT"


def mark(name: str, *, sync: bool = False) -> None:
    """Called by a measured child: tell the parent a phase boundary was reached.

    ``sync=True`` waits until the parent has sampled (it answers on our stdin): use it
    before the child stops processes whose CPU must still be counted.
    """
    print(f"{MARK} {name} {time.time():.6f}{' sync' if sync else ''}", flush=True)
    if sync:
        sys.stdin.readline()


def emit_result(obj: dict[str, Any]) -> None:
    """Called by a measured child: hand the parent its JSON result."""
    print(f"{RESULT} {json.dumps(obj, default=str)}", flush=True)


def _category(name: str, cmdline: list[str]) -> str:
    """A short label for a process in the per-process CPU breakdown."""
    if name.startswith("ray::") or (cmdline and cmdline[0].startswith("ray::")):
        return (cmdline[0] if cmdline else name).split(" ")[0]
    joined = " ".join(cmdline[:3])
    for key in ("gcs_server", "raylet", "dashboard", "log_monitor", "runtime_env", "monitor.py", "default_worker"):
        if key in joined or key in name:
            return key
    if "scrapy" in joined:
        return "scrapy"
    return name or "?"


@dataclass
class _Proc:
    proc: psutil.Process
    category: str
    cpu: float = 0.0
    rss: int = 0
    alive: bool = True


@dataclass
class TreeSampler:
    """Samples CPU (user+system) and RSS of ``root_pid`` and its descendants in a thread."""

    root_pid: int
    interval_s: float = 0.5
    procs: dict[tuple[int, float], _Proc] = field(default_factory=dict)
    marks: dict[str, dict[str, Any]] = field(default_factory=dict)
    peak_rss: int = 0
    peak_rss_at: float = 0.0
    peak_procs: int = 0
    samples: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> TreeSampler:
        self.sample()
        self._thread = threading.Thread(target=self._run, name="tree-sampler", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _tree(self) -> list[psutil.Process]:
        try:
            root = psutil.Process(self.root_pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def sample(self) -> float:
        """Take one sample now; returns the tree's cumulative CPU seconds so far."""
        with self._lock:
            seen: set[tuple[int, float]] = set()
            rss_total = 0
            for p in self._tree():
                try:
                    with p.oneshot():
                        key = (p.pid, p.create_time())
                        t = p.cpu_times()
                        rss = p.memory_info().rss
                        entry = self.procs.get(key)
                        if entry is None:
                            try:
                                cmd = p.cmdline()
                            except (psutil.AccessDenied, psutil.ZombieProcess):
                                cmd = []
                            entry = self.procs[key] = _Proc(p, _category(p.name(), cmd))
                        entry.cpu = t.user + t.system
                        entry.rss = rss
                        entry.alive = True
                        rss_total += rss
                        seen.add(key)
                except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
                    continue
            for key, e in self.procs.items():
                if key not in seen:
                    e.alive = False
                    e.rss = 0
            if rss_total > self.peak_rss:
                self.peak_rss = rss_total
                self.peak_rss_at = time.time()
            self.peak_procs = max(self.peak_procs, len(seen))
            self.samples += 1
            return sum(e.cpu for e in self.procs.values())

    def mark(self, name: str) -> dict[str, Any]:
        """Sample now and remember the cumulative CPU (total and per category) under ``name``."""
        total = self.sample()
        with self._lock:
            by_cat: dict[str, float] = {}
            for e in self.procs.values():
                if e.alive:  # Ray workers start as ray::IDLE and take their actor's name later
                    try:
                        e.category = _category(e.proc.name(), e.proc.cmdline())
                    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
                        pass
                by_cat[e.category] = by_cat.get(e.category, 0.0) + e.cpu
        m = {"t": time.time(), "mono": time.monotonic(), "cpu": total, "by_category": by_cat}
        self.marks[name] = m
        return m

    def cpu_between(self, a: str, b: str) -> tuple[float, dict[str, float]]:
        """CPU seconds spent by the tree between two marks, in total and per category."""
        ma, mb = self.marks[a], self.marks[b]
        cats = set(ma["by_category"]) | set(mb["by_category"])
        per = {c: mb["by_category"].get(c, 0.0) - ma["by_category"].get(c, 0.0) for c in cats}
        return mb["cpu"] - ma["cpu"], {c: round(v, 3) for c, v in sorted(per.items(), key=lambda kv: -kv[1]) if abs(v) >= 0.005}


@dataclass
class ChildRun:
    """What :func:`run_measured` returns."""

    result: dict[str, Any] | None
    returncode: int
    sampler: TreeSampler
    wall_s: float
    stderr_tail: str


def run_measured(argv: Sequence[str], *, timeout_s: float, interval_s: float = 0.5,
                 env: dict[str, str] | None = None, cwd: str | None = None,
                 echo: bool = False) -> ChildRun:
    """Run ``argv`` as a child, sampling its process tree; marks and result read from stdout.

    Marks are taken at ``@@MARK`` lines. The child is killed (with its process group)
    if it outlives ``timeout_s``.
    """
    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    full_env["PYTHONUNBUFFERED"] = "1"
    t0 = time.monotonic()
    with tempfile.TemporaryFile(prefix="rcb-child-", suffix=".err") as err:
        proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                env=full_env, cwd=cwd, text=True, start_new_session=True)
        sampler = TreeSampler(proc.pid, interval_s).start()
        sampler.mark("spawned")
        result: dict[str, Any] | None = None
        timer = threading.Timer(timeout_s, _kill_group, args=(proc,))
        timer.start()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                if line.startswith(MARK):
                    parts = line.split()
                    sampler.mark(parts[1])
                    if parts[-1] == "sync":
                        assert proc.stdin is not None
                        proc.stdin.write("ok\n")
                        proc.stdin.flush()
                elif line.startswith(RESULT):
                    result = json.loads(line[len(RESULT):])
                elif echo:
                    sys.stderr.write(line)
            proc.wait()
        finally:
            timer.cancel()
            sampler.stop()
            if proc.poll() is None:
                _kill_group(proc)
        err.seek(0)
        tail = err.read()[-4000:].decode(errors="replace")
    return ChildRun(result, proc.returncode, sampler, time.monotonic() - t0, tail)


def _kill_group(proc: subprocess.Popen) -> None:
    # The child was started in its own session, so its pgid is its pid: this reaches the
    # Ray processes it spawned and nothing else on the machine.
    try:
        os.killpg(proc.pid, 9)
    except ProcessLookupError:
        pass


def summarize(run: ChildRun, pages: int, start: str = "start", end: str = "end") -> dict[str, Any]:
    """pages/s, CPU-ms per page (crawl window and whole run) and peak RSS of a measured child."""
    s = run.sampler
    if start not in s.marks or end not in s.marks:
        raise RuntimeError(f"child did not mark {start!r}/{end!r}; marks={list(s.marks)}; stderr:\n{run.stderr_tail}")
    wall = s.marks[end]["mono"] - s.marks[start]["mono"]
    cpu, per = s.cpu_between(start, end)
    total_cpu = sum(e.cpu for e in s.procs.values())
    return {
        "pages": pages,
        "wall_s": round(wall, 2),
        "pages_per_s": round(pages / wall, 1) if wall > 0 else None,
        "cpu_s": round(cpu, 2),
        "cpu_ms_per_page": round(1000 * cpu / pages, 3) if pages else None,
        "cpu_cores_busy": round(cpu / wall, 2) if wall > 0 else None,
        "cpu_by_process": per,
        "total_run_wall_s": round(run.wall_s, 2),
        "total_run_cpu_s": round(total_cpu, 2),
        "total_run_cpu_ms_per_page": round(1000 * total_cpu / pages, 3) if pages else None,
        "peak_rss_mb": round(s.peak_rss / 2**20, 1),
        "peak_processes": s.peak_procs,
    }


def machine_info() -> dict[str, Any]:
    """nproc, CPU model, RAM, Python and library versions (for RESULTS.md)."""
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info: dict[str, Any] = {
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
    for mod in ("ray", "aiohttp", "selectolax", "pyarrow", "scrapy"):
        try:
            m = __import__(mod)
            info[mod] = getattr(m, "__version__", "?")
        except ImportError:
            info[mod] = None
    return info


def git_state() -> dict[str, Any]:
    """The commit measured and how many engine files had local changes (the tree is shared)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=root,
                              check=False).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "crawler", "actors", "jobs"],
                               capture_output=True, text=True, cwd=root, check=False).stdout.strip()
        return {"commit": head, "engine_files_modified": len(dirty.splitlines())}
    except OSError:
        return {}


def write_json(path: str | None, obj: dict[str, Any]) -> None:
    """Print ``obj`` as one JSON line and, with ``path``, also save it (pretty) there."""
    obj.setdefault("git", git_state())
    line = json.dumps(obj, default=str)
    print(line)
    if path:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as f:
            json.dump(obj, f, indent=2, default=str)


def exit_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit so ``finally`` blocks (stopping nginx, Ray) run."""
    import signal

    def handler(signum: int, frame: Any) -> None:
        raise SystemExit(143)

    signal.signal(signal.SIGTERM, handler)
