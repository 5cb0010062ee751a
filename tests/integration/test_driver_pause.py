"""A driver that stops without dying, on real Ray: SIGSTOP past every window its silence opens.

A driver can stop and come back: a debugger, a suspended laptop or VM, a machine that
swaps. While it is stopped its shards hear nothing: after ``runtime.driver_timeout_s``
they stop fetching and flush what they fetched, and each refuses the links its peers
send (its gate is shut); after ``lease_ttl_s - margin`` of its own clock the driver no
longer vouches for its shards until it has renewed its lease (crawler.recovery.lease).
None of this may cost a URL: a refused delivery waits and its page stays unacked, it
never becomes a "failed" row with its links dropped, and the run says "finished" and
exits 0 only when the ledger balances (docs/invariants.md #6, #9, #13).

Two scenarios, each on a cluster of its own that outlives the driver
(tests/integration/local_cluster.py: one raylet on 127.0.0.1 in its own temp dir), the
driver run as ``python -m jobs.crawl CONFIG --address ADDRESS``, the way ``ray job
submit`` runs it, with the default settings:

1. the driver stopped for :func:`_pause_s`, then continued (SIGCONT): it ends the crawl
   itself, exit 0, every page fetched exactly once;
2. the driver killed (SIGKILL) at the end of such a pause, with the output on a loopback
   S3 (moto) so that the resume reads the shards' state log from OUT, and the same
   command run again: it resumes, exits 0, every page is fetched, and none twice unless
   it was in flight at the kill (:func:`_refetched_outside_window`).

Judged from the synthetic web's own request log, the rows in OUT and the ledger in
``OUT/stats.json``. Only the driver's PID is ever signalled; each cluster is stopped by
PID at the end (tests/integration/cluster_client.py), and no process of a test outlives it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import pyarrow.parquet as pq
import yaml

from crawler.config import settings as config
from crawler.config.settings import CrawlConfig
from crawler.output import read_pages
from crawler.output.fs import open_fs
from crawler.output.reader import list_parts
from crawler.testing.fixtures import crawl_config_for
from crawler.testing.webtypes import canonical_path_qs

from tests.integration import checks
from tests.integration.cluster_client import ROOT, LocalCluster, _env
from tests.integration.procs import _gone

#: The driver is stopped once this share of the pages has been requested: mid-crawl, with
#: links in flight between shards and most of the web still to fetch.
PAUSE_AT_SHARE = 0.3
#: While the driver is stopped, no request may start later than driver_timeout_s after the
#: stop plus this: the last heartbeat sent before the stop can reach a shard late (Ray
#: queues the call; the machine is loaded), and a request that passed the gate just before
#: its shard fell silent still has to reach the server.
QUIET_SLACK_S = 1.0
#: Calls and PUTs on a loaded machine, in the time a page answered before the stop may
#: take to become durable (:func:`_undurable_s`).
DURABLE_SLACK_S = 1.0
#: The longest a driver may take to end the crawl (or resume and end it), on a loaded machine.
DRIVER_TIMEOUT_S = 300


def _pause_s(cfg: CrawlConfig) -> float:
    """How long the driver stays stopped: past every window its silence opens, with the
    defaults -- driver_timeout_s (its shards stop fetching: 1 s), driver_timeout_s plus
    the lease margin (6 s), lease_ttl_s - margin (it stops vouching for its shards until
    it renews: 10 s), the ~9 s a link router once retried a refused delivery before it
    gave up (0.05 s doubling to 2 s, 10 attempts), and lease_ttl_s itself (15 s: it wakes
    with a lease any newcomer could have taken) -- and 2 s more: 18 s."""
    rt = cfg.runtime
    return rt.lease_ttl_s + rt.driver_timeout_s + 2.0


def _config(web, tmp_path: Path, out: str, storage_options: dict | None = None) -> tuple[Path, CrawlConfig]:
    # Only what the test web needs (crawl_config_for) and, for S3, where the bucket is:
    # every other setting is its default (docs/invariants.md #17).
    output: dict[str, Any] = {"path": out}
    if storage_options:
        output["storage_options"] = storage_options
    raw = crawl_config_for(web, output=output)
    cfgfile = tmp_path / "crawl.yaml"
    cfgfile.write_text(yaml.safe_dump(raw))
    return cfgfile, config.from_dict(raw)


@contextmanager
def _cluster(env: dict[str, str]) -> Iterator[LocalCluster]:
    cluster = LocalCluster(env=env)
    try:
        yield cluster
    finally:
        cluster.close()  # every process of it, by PID; asserts none is left


class _Driver:
    """``python -m jobs.crawl CONFIG --address ADDRESS`` as a job of its own, its output
    in files (a stopped process must not block on a pipe nobody drains)."""

    def __init__(self, cfgfile: Path, cluster: LocalCluster, env: dict[str, str], logs: Path, name: str) -> None:
        self.out_path, self.err_path = logs / f"{name}.out", logs / f"{name}.err"
        with open(self.out_path, "w") as out_f, open(self.err_path, "w") as err_f:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "jobs.crawl", str(cfgfile), "--address", cluster.address, "--no-progress"],
                stdout=out_f, stderr=err_f, text=True, env=env, cwd=ROOT, start_new_session=True,
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stderr(self, tail: int = 3000) -> str:
        return self.err_path.read_text()[-tail:]

    def wait_requests(self, web, n: int, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while len(web.requests()) < n:
            assert self.proc.poll() is None, f"the driver ended (exit {self.proc.returncode}) early: {self.stderr()}"
            assert time.monotonic() < deadline, f"the crawl made no progress: {self.stderr()}"
            time.sleep(0.02)

    def stop(self) -> float:
        """SIGSTOP the driver (its PID alone); once /proc says it is stopped, returns the
        time it was signalled."""
        at = time.monotonic()
        os.kill(self.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while _state(self.pid) != "T":
            assert time.monotonic() < deadline, f"the driver did not stop (state {_state(self.pid)!r})"
            time.sleep(0.01)
        return at

    def wait(self) -> int:
        return self.proc.wait(timeout=DRIVER_TIMEOUT_S)

    def kill(self) -> None:
        """SIGKILL by PID if it still runs (stopped or not), and reap it."""
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)


def _state(pid: int) -> str:
    """The process's state letter in /proc (R, S, T for stopped, Z...), or "" if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return ""
    return stat[stat.rindex(")") + 2]


def _requests_by_url(web) -> dict[str, list]:
    """Canonical URL -> its requests in the server's log, in start order."""
    out: dict[str, list] = defaultdict(list)
    for r in sorted(web.requests(), key=lambda r: r.start):
        out[web.web.url(r.host, canonical_path_qs(r.path_qs))].append(r)
    return out


def _last_start_s(web, stopped_at: float, until: float) -> float | None:
    """How long after the stop the last request before ``until`` started (for the report)."""
    starts = [r.start - stopped_at for r in web.requests() if r.start < until]
    return round(max(starts), 2) if starts else None


def _started_while_stopped(web, stopped_at: float, until: float, cfg: CrawlConfig) -> list[tuple]:
    """Requests that started while the driver was stopped, later than its shards may run on
    (docs/invariants.md #9: shards share their driver's fate): they stop fetching
    driver_timeout_s after its last heartbeat."""
    quiet_from = stopped_at + cfg.runtime.driver_timeout_s + QUIET_SLACK_S
    return [(r.host, r.path_qs, round(r.start - stopped_at, 2)) for r in web.requests() if quiet_from <= r.start < until]


def _out(cfg: CrawlConfig):
    fs, root = open_fs(cfg.output.path, dict(cfg.output.storage_options) or None)
    fs.invalidate_cache()  # s3fs caches listings: a file written since must be seen
    return fs, root


def _stats(cfg: CrawlConfig) -> dict[str, Any]:
    """``OUT/stats.json`` (local or s3://), {} if the run wrote none."""
    fs, root = _out(cfg)
    try:
        return json.loads(fs.cat_file(f"{root}/stats.json"))
    except FileNotFoundError:
        return {}


def _durable_rows(cfg: CrawlConfig) -> dict[str, float]:
    """URL -> when the part file holding its row was written (on time.monotonic()'s scale),
    for every row in OUT now: what a run killed now has made durable."""
    fs, root = _out(cfg)
    wall_to_mono = time.time() - time.monotonic()
    rows: dict[str, float] = {}
    for path in list_parts(fs, root):
        info = fs.info(path)
        written = info.get("mtime") or info.get("LastModified") or info.get("created")
        written = written.timestamp() if hasattr(written, "timestamp") else float(written or 0.0)
        with fs.open(path, "rb") as f:
            for url in pq.read_table(f, columns=["url"]).column("url").to_pylist():
                rows[url] = min(rows.get(url, float("inf")), written - wall_to_mono)
    return rows


def _summary(web, cfg: CrawlConfig, stats: dict[str, Any], exit_status: int | None) -> dict[str, Any]:
    """What a user sees of the run: pages never fetched or fetched twice, the verdict."""
    must, failing = web.web.must_fetch(), set(web.web.failure_urls())
    counts = Counter(web.request_counts())
    rows = read_pages(cfg.output.path, dict(cfg.output.storage_options) or None, dedupe=False,
                      columns=["url", "outcome", "error"]).to_pylist()
    ledger = stats.get("ledger") or {}
    return {
        "pages": len(must),
        "never_fetched": sum(1 for u in must if counts[u] == 0),
        "fetched_twice": sum(1 for u in must - failing if counts[u] > 1),
        "internal_error_rows": sum(1 for r in rows if (r["error"] or "").startswith("internal error")),
        "exit": exit_status,
        "finished": stats.get("finished"),
        "ledger_balanced": ledger.get("balanced"),
        "ledger_problems": ledger.get("problems"),
        "internal_errors": stats.get("internal_errors"),
    }


def _judge(s: dict[str, Any]) -> None:
    """The verdict follows the ledger (docs/invariants.md #13): exit 0 and "finished" only when
    every page was fetched and every admitted URL is accounted for. Says every fault at once."""
    wrong = []
    if s["never_fetched"]:
        wrong.append(f"{s['never_fetched']} of {s['pages']} pages never fetched")
    if s["internal_error_rows"]:
        wrong.append(f"{s['internal_error_rows']} rows 'internal error' (an internal error is not a web outcome)")
    if s["internal_errors"]:
        wrong.append(f"{s['internal_errors']} URLs hit an internal error")
    if not s["ledger_balanced"]:
        wrong.append(f"the ledger does not balance: {s['ledger_problems']}")
    if not s["finished"]:
        wrong.append("stats.json does not say finished")
    if s["exit"] != 0:
        wrong.append(f"exit {s['exit']}")
    elif wrong:
        wrong.append("yet exit 0")
    assert not wrong, "; ".join(wrong) + f" ({s})"


def test_a_driver_stopped_past_its_lease_then_continued_loses_nothing(web, tmp_path):
    out = tmp_path / "out"
    cfgfile, cfg = _config(web, tmp_path, str(out))
    pause = _pause_s(cfg)
    total = len(web.web.must_fetch())
    disk = {"RAYCRAWL_LOCAL_DIR": str(tmp_path / "disk")}  # the node's cache, not ~/.cache
    with _cluster(disk) as cluster:
        driver = _Driver(cfgfile, cluster, {**_env(), **disk}, tmp_path, "driver")
        try:
            driver.wait_requests(web, int(PAUSE_AT_SHARE * total))
            stopped_at = driver.stop()
            time.sleep(pause)
            os.kill(driver.pid, signal.SIGCONT)
            continued_at = time.monotonic()
            status = driver.wait()
        finally:
            driver.kill()
    requested_before = {u for u, recs in _requests_by_url(web).items() if recs[0].start < stopped_at}
    left = web.web.must_fetch() - requested_before
    stats = _stats(cfg)
    summary = _summary(web, cfg, stats, status)
    during = _started_while_stopped(web, stopped_at, continued_at, cfg)
    print(json.dumps({"driver_pause": {**summary, "pause_s": round(continued_at - stopped_at, 1),
                                       "pages_left_at_pause": len(left), "started_while_stopped": len(during),
                                       "last_start_s_after_stop": _last_start_s(web, stopped_at, continued_at)}}))
    # The stop fell mid-crawl, or this test proves nothing.
    assert len(left) >= 0.2 * total, f"only {len(left)} of {total} pages were left when the driver stopped"
    assert not during, f"{len(during)} requests started while the driver was stopped (host, path, s after the stop): {during[:5]}"
    _judge(summary)
    assert "crawl finished" in driver.out_path.read_text()
    # No page fetched twice (nothing crashed: nothing was in flight at a crash), failing
    # URLs retried as classified; politeness held across the pause; one row per URL, each
    # with the outcome the ground truth says.
    checks.check_exactly_once(web, cfg)
    checks.check_never_requested(web)
    checks.check_politeness(web, cfg)
    checks.check_rows(web, cfg)
    checks.check_ledger(stats)


def _undurable_s(cfg: CrawlConfig) -> float:
    """How long before the driver stopped a page may have been answered and still not be
    durable: its links wait up to runtime.link_flush_interval_s in the router, and are
    taken by their owner once written to its state log in OUT (up to
    runtime.state_log_interval_s, plus a PUT); only then does its row go to the outbox,
    handed to the writer every output.outbox_interval_s and written within
    output.row_flush_interval_s (its ack follows in the same step). Plus
    DURABLE_SLACK_S for the calls and PUTs on a loaded machine. 3 s with the defaults.
    A page answered earlier had its links taken while every shard still heard the driver
    (they go silent driver_timeout_s after the stop), and its row written (at the latest
    by the flush each shard makes when it falls silent)."""
    return (cfg.runtime.link_flush_interval_s + cfg.runtime.state_log_interval_s + cfg.output.outbox_interval_s
            + cfg.output.row_flush_interval_s + DURABLE_SLACK_S)


def _refetched_outside_window(web, cfg: CrawlConfig, stopped_at: float, killed_at: float,
                              durable: dict[str, float]) -> list[tuple]:
    """Pages requested twice whose first fetch was not in flight at the kill.

    The window: a page's first fetch is in flight at the kill when (1) its request started
    before the kill, (2) no row of it was durable in OUT at the kill (``durable``: the rows
    of every part file in OUT just before the SIGKILL, read while the stopped driver's
    shards had been idle for seconds), and (3) it was answered no earlier than
    :func:`_undurable_s` before the driver stopped. Such a page was requested, or answered
    and not yet durable (its links refused by peers whose driver fell silent, so its row
    was never written: a refused delivery waits, docs/invariants.md #13): the resumed run
    fetches it again, once. Nothing else may be fetched twice: not a page whose row was
    durable (acked in the same step), not one answered long before the stop, not one
    requested twice by one run. Pages that fail on purpose (503 once, 429 once, down,
    stall) are retried by design and left out, as in tests/integration/procs.py.
    """
    failing = set(web.web.failure_urls())
    answered_from = stopped_at - _undurable_s(cfg)
    bad = []
    for url, recs in _requests_by_url(web).items():
        if len(recs) < 2 or url in failing or url not in web.web.must_fetch():
            continue
        before = [r for r in recs if r.start < killed_at]
        after = [r for r in recs if r.start >= killed_at]
        first = recs[0]
        if len(before) == 1 and len(after) == 1 and url not in durable and first.end >= answered_from:
            continue
        # (url, requests before the kill, after it, the first one's start and end, and
        # when its row's part was written, in s from the stop)
        bad.append((url, len(before), len(after), round(first.start - stopped_at, 2), round(first.end - stopped_at, 2),
                    round(durable[url] - stopped_at, 2) if url in durable else None))
    return sorted(bad)


def test_a_driver_killed_while_stopped_then_resubmitted_resumes_and_loses_nothing(web, tmp_path, s3_server):
    endpoint, aws_env = s3_server
    out = f"s3://crawl-test/{uuid.uuid4().hex}"
    opts = {"key": "testing", "secret": "testing", "client_kwargs": {"endpoint_url": endpoint}}
    cfgfile, cfg = _config(web, tmp_path, out, opts)
    pause = _pause_s(cfg)
    total = len(web.web.must_fetch())
    env = {**aws_env, "RAYCRAWL_LOCAL_DIR": str(tmp_path / "disk")}  # the node's cache, not ~/.cache
    with _cluster(env) as cluster:
        first = _Driver(cfgfile, cluster, {**_env(), **env}, tmp_path, "first")
        second = None
        try:
            first.wait_requests(web, int(PAUSE_AT_SHARE * total))
            stopped_at = first.stop()
            old_shards = {a["pid"] for a in _shard_actors(cluster).values()}
            time.sleep(pause)
            # What the killed run made durable, read while it is stopped and its shards
            # have been idle for seconds: nothing is written between this and the kill.
            durable = _durable_rows(cfg)
            os.kill(first.pid, signal.SIGKILL)  # by PID, while stopped
            killed_at = time.monotonic()
            assert first.proc.wait(timeout=30) == -signal.SIGKILL
            # The same job submitted again: a resume from what is in OUT.
            second = _Driver(cfgfile, cluster, {**_env(), **env}, tmp_path, "second")
            status = second.wait()
            # The killed run's shards share its fate: Ray reaps them with their driver.
            left_over = sorted(pid for pid in old_shards if not _gone(pid))
        finally:
            first.kill()
            if second is not None:
                second.kill()
    during = _started_while_stopped(web, stopped_at, killed_at, cfg)
    stats = _stats(cfg)
    summary = _summary(web, cfg, stats, status)
    outside = _refetched_outside_window(web, cfg, stopped_at, killed_at, durable)
    refetched = [recs[0] for u, recs in _requests_by_url(web).items()
                 if len(recs) > 1 and u in web.web.must_fetch() and u not in web.web.failure_urls()]
    newest_part = max(durable.values(), default=None)
    print(json.dumps({"driver_killed_while_stopped": {
        **summary, "pause_s": round(killed_at - stopped_at, 1), "rows_durable_at_kill": len(durable),
        "newest_part_s_before_kill": None if newest_part is None else round(killed_at - newest_part, 1),
        "started_while_stopped": len(during), "last_start_s_after_stop": _last_start_s(web, stopped_at, killed_at),
        "fetched_twice_outside_window": len(outside), "outside": outside[:8],
        "refetched_first_answered_s_after_stop": sorted(round(r.end - stopped_at, 2) for r in refetched)}}))
    assert old_shards and not left_over, f"shard processes of the killed run still alive: {left_over}"
    assert not during, f"{len(during)} requests started while the driver was stopped (host, path, s after the stop): {during[:5]}"
    _judge(summary)
    assert "resuming the unfinished crawl" in second.err_path.read_text(), second.stderr()
    assert not outside, f"{len(outside)} pages fetched twice outside the in-flight window: {outside[:5]}"
    checks.check_never_requested(web)
    checks.check_politeness(web, cfg)
    # One row per URL with the outcome the ground truth says; not the duplicate flags: the
    # resumed run's content index starts from its last copy in OUT (every
    # runtime.state_ship_interval_s, 60 s: none yet here), so a page indexed before the kill
    # is not known as the original of its copy fetched after it (a documented cost).
    checks.check_rows(web, cfg, duplicates=False)
    checks.check_ledger(stats)


def _shard_actors(cluster: LocalCluster) -> dict[str, dict]:
    """Live HostShard actors of the cluster: name -> actor table entry."""
    return {a["name"]: a for a in cluster.ask("actors")["actors"] if ":shard-" in a["name"] and a["state"] == "ALIVE"}
