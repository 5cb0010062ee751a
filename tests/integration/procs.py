"""Processes and request logs shared by the crash and lease tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter

# A page fetched again after a crash must have been "in flight": requested, or answered
# but not yet acked. Its links wait up to runtime.link_flush_interval_s (0.25 s by
# default) in the router and are delivered before its row counts; rows are flushed every
# output.row_flush_interval_s (0.2 s here) by an output loop that ticks every 0.25 s;
# allow all that plus scheduling slack.
UNACKED_WINDOW_S = 0.25 + 0.2 + 0.25 + 0.5
# With a remote output a delivery is acknowledged once its state-log segment is in OUT:
# it waits for the log's timed write (runtime.state_log_interval_s, 0.5 s by default),
# its PUT and the fence check after it (crawler.recovery.statelog).
REMOTE_UNACKED_WINDOW_S = UNACKED_WINDOW_S + 0.5


def _refetched_outside_window(server, kill_times, after_s=0.5, window_s=UNACKED_WINDOW_S):
    """Pages requested twice whose first answer was durable long before every crash.

    ``after_s``: how long after a kill a request of the killed run may still start (the
    server thread logs a request sent just before the kill a moment later; orphaned
    shards run until their watchdog stops them). ``window_s``: how long before a kill a
    page may have been answered and still not be durable (longer with a remote output:
    see :data:`REMOTE_UNACKED_WINDOW_S`)."""
    web = server.web
    failing = set(web.failure_urls())
    first: dict[str, tuple[float, float]] = {}
    counts: Counter = Counter()
    for r in sorted(server.requests(), key=lambda r: r.start):
        u = web.url(r.host, r.path_qs)
        counts[u] += 1
        first.setdefault(u, (r.start, r.end))
    bad = []
    for u, n in counts.items():
        if n < 2 or u in failing or u not in web.must_fetch():
            continue
        start, end = first[u]
        if not any(start <= k + after_s and end >= k - window_s for k in kill_times):
            bad.append((u, [round(start - k, 2) for k in kill_times], [round(end - k, 2) for k in kill_times]))
    return sorted(bad)


def check_nothing_lost(server, kill_times, after_s=0.5, window_s=UNACKED_WINDOW_S):
    """After crashes at ``kill_times``: every reachable page requested, none twice unless it
    was in flight at a kill (see :func:`_refetched_outside_window`), nothing requested
    that must never be."""
    from tests.integration import checks

    counts = Counter(server.request_counts())
    missing = [u for u in server.web.must_fetch() if counts[u] == 0]
    assert not missing, missing[:5]
    again = _refetched_outside_window(server, kill_times, after_s, window_s)
    twice = sum(1 for n in counts.values() if n > 1)
    assert not again, f"{len(again)} pages fetched twice outside a kill's window ({twice} twice in all): {again[:5]}"
    checks.check_never_requested(server)


def _wait_requests(server, n, timeout=120):
    deadline = time.monotonic() + timeout
    while len(server.requests()) < n:
        assert time.monotonic() < deadline, "crawl made no progress"
        time.sleep(0.05)


def _spawn(cfgfile, ray_tmp):
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", RAY_TMPDIR=ray_tmp, PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, "-m", "jobs.cli", "run", str(cfgfile), "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True,
    )


def processes():
    """(pid, cmdline bytes, environ bytes) of every process we may read."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read()
        except OSError:
            continue
        yield int(pid), cmd, env


def _kill_leftovers(marker):
    """SIGKILL whatever of that Ray is still alive (we started it; nothing else is touched)."""
    for pid, cmd, env in processes():
        if marker.encode() in cmd or marker.encode() in env:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def free_ports(n):
    """``n`` distinct free TCP ports on 127.0.0.1 (bound together, then released)."""
    import socket

    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _proc_table():
    """pid -> (ppid, pgid, cmdline) of every process we can read."""
    table = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
        table[int(pid)] = (int(fields[1]), int(fields[2]), cmd)
    return table


def ray_node_pids(temp_dir):
    """PIDs of the Ray node(s) started with ``--temp-dir temp_dir``: the processes naming
    it, everything in their process groups, and all their descendants (workers)."""
    table = _proc_table()
    me, my_group = os.getpid(), os.getpgid(0)
    roots = {pid for pid, (_, _, cmd) in table.items() if temp_dir in cmd and pid != me}
    # Start the node in a session of its own (start_new_session=True): its processes then
    # share a process group that is not the caller's, and the whole group is the node.
    groups = {table[p][1] for p in roots} - {my_group}
    pids = roots | {pid for pid, (_, pgid, _) in table.items() if pgid in groups}
    grew = True
    while grew:
        kids = {pid for pid, (ppid, _, _) in table.items() if ppid in pids} - pids
        grew = bool(kids)
        pids |= kids
    pids.discard(os.getpid())
    return pids


def _gone(pid):
    """True once ``pid`` has exited (a zombie waiting to be reaped counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] in "ZX"


def stop_pids(pids, grace_s=5.0):
    """SIGTERM these processes, SIGKILL what is left after ``grace_s``; ``pids`` keeps the
    ones still running. Each is signalled by PID (never `ray stop`, which stops every Ray
    on the machine)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in list(pids):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pids.discard(pid)
        deadline = time.monotonic() + (grace_s if sig == signal.SIGTERM else 5.0)
        while pids and time.monotonic() < deadline:
            pids.difference_update([pid for pid in pids if _gone(pid)])
            time.sleep(0.1)
        if not pids:
            return
