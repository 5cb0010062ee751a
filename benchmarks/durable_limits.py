"""What a lost node refunds of the limits on fetching, and what keeping them costs per URL.

Issue 31, item 5: a host's page budget, a trap cut, an operator's ``max_pages`` and the
robots.txt verdicts in force reached OUT only with the shard's 60 s snapshot, while the
URLs they bound were in its log at once. Two measurements, each of one tree or, with
``--against DIR`` (another checkout: the "before"), of both trees side by side in this
process (their ``crawler`` packages loaded one after the other, as benchmarks.hotpaths does):

* ``scenarios``: a whole shard on the mock clock with a remote output in memory
  (``memory://``), the node lost with its disk (no close, no snapshot), the shard opened
  again from OUT alone: the URLs a host holds in all, and the robots.txt requests made
  again after the loss;

  - ``budget``: ``max_pages_per_host: 5``, 8 delivered (5 admitted, 3 dropped), the
    loss, 5 more delivered;
  - ``trap_cut``: ``max_pages_per_host: 40``, 20 admitted, a window of 10 duplicates
    cuts the budget to what is queued (recorded as the scheduler does, then the outbox
    round's checkpointer tick), the loss, 30 more delivered;
  - ``operator_max_pages``: the operator's ``max_pages: 5`` first, 8 delivered, the
    loss, 5 more;
  - ``robots``: robots.txt fetched and two URLs refused, the loss, then a refused URL
    and an allowed one delivered and the shard run until both are settled;

* ``admission``: CPU per admitted URL of crawler.engine.admission.Admission.take on a real,
  journaled FrontierStore (the journal a list, as StateLog.append buffers it), batches of
  100 URLs, best of ``--repeat`` rounds alternating the trees; ``spread``: each batch over
  random hosts of 4,000 (links routed to a shard from many pages: a decision per URL at
  worst), ``site``: each batch over 2 hosts; ``over_budget``: each batch over random hosts
  of 100, with ``max_pages_per_host: 20`` (most URLs dropped). Also the journal's bytes per admitted URL
  (zlib JSON, as crawler.recovery.statelog writes segments).

    python -m benchmarks.durable_limits [--against /tmp/base] [--urls 40000] [--repeat 5] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
import uuid
import zlib
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
HOST = "a.test"
ROBOTS = b"User-agent: *\nDisallow: /private/\n"


def load_tree(tree: Path) -> SimpleNamespace:
    """The modules both measurements use, imported from the checkout ``tree``."""
    for name in [m for m in sys.modules if m == "crawler" or m.startswith("crawler.")]:
        del sys.modules[name]  # each tree's functions keep their own module globals
    sys.path.insert(0, str(tree))
    try:
        from crawler.clock import MockClock
        from crawler.config import settings
        from crawler.policy.hostpolicy import PolicyChange
        from crawler.engine.admission import Admission
        from crawler.engine.assembly import build_shard
        from crawler.fetch.fetcher import FetchResult
        from crawler.frontier.frontier import Frontier
        from crawler.frontier.store import FrontierStore
        from crawler.frontier.urlitem import UrlItem
        from crawler.policy.hostbudget import HostBudget
        from crawler.policy.politeness import Politeness
        from crawler.recovery.statefiles import open_shard_store, state_dir
        from crawler.robots import RobotsCache
    finally:
        sys.path.remove(str(tree))
    # Named one by one (not ``locals()``) so that each import is visibly used: callers
    # read them as ``m.Name``.
    return SimpleNamespace(
        MockClock=MockClock, settings=settings, PolicyChange=PolicyChange, Admission=Admission,
        build_shard=build_shard, FetchResult=FetchResult, Frontier=Frontier, FrontierStore=FrontierStore,
        UrlItem=UrlItem, HostBudget=HostBudget, Politeness=Politeness, open_shard_store=open_shard_store,
        state_dir=state_dir, RobotsCache=RobotsCache,
    )


# -- scenarios ---------------------------------------------------------------------------


class Server:
    """Answers each URL from a table after 0.1 s of the mock clock; counts requests."""

    def __init__(self, m: SimpleNamespace, clock: Any, table: dict[str, tuple[int, bytes]]) -> None:
        self.m, self.clock, self.table = m, clock, table
        self.requests: list[str] = []

    async def fetch(self, url: str, headers: Any = None, **kw: Any) -> Any:
        start = self.clock.now()
        self.requests.append(url)
        status, body = self.table.get(url, (404, b""))
        await self.clock.sleep(0.1)
        return self.m.FetchResult(
            url=url, status=status, headers={"content-type": "text/plain" if url.endswith(".txt") else "text/html"},
            body=body, truncated=False, error=None, error_kind=None, transient=False, started_at=start,
            headers_at=start + 0.1, finished_at=self.clock.now(), ip="127.0.0.1",
        )

    async def close(self) -> None:
        return None


class Node:
    """One machine running shard-000, with its own disk, against the output ``cfg`` names."""

    def __init__(self, m: SimpleNamespace, cfg: Any, folder: str, server: Server | None = None) -> None:
        self.m = m
        self.clock = m.MockClock()
        self.server = server if server is not None else Server(m, self.clock, {})
        self.server.clock = self.clock
        os.environ["RAYCRAWL_LOCAL_DIR"] = folder
        st = m.open_shard_store(cfg, "shard-000", m.state_dir(cfg.output.path, None, cfg.fingerprint()), self.clock)
        self.store = st.store

        class Seen:
            async def check_and_add(self, urls):
                return [True] * len(urls)

        class Unlimited:
            async def acquire(self):
                return True

        async def content(items):
            return [(None, None)] * len(items)

        async def inline(fn, *args):
            return fn(*args)

        self.shard = m.build_shard(
            cfg, "shard-000", seeds=[f"http://{HOST}/"], seen=Seen(), content=content, budget=Unlimited(), deliver=None,
            owner_of=lambda h: "shard-000", store=st.store, clock=self.clock, fetcher=self.server, run_blocking=inline,
            state_log=st.log, restored=st.restored,
        )

    def deliver(self, paths: list[str]) -> int:
        return asyncio.run(self.shard.accept([self.m.UrlItem(f"http://{HOST}{p}", 1) for p in paths]))

    def held(self) -> int:
        c = self.store.counts()
        return c["queued"] + c["claimed"] + c["done"]


def _cfg(m: SimpleNamespace, **limits: Any) -> Any:
    return m.settings.from_dict({
        "seeds": [f"http://{HOST}/"], "scope": "any", "output": {"path": f"memory://durable-limits-{uuid.uuid4().hex}"},
        "politeness": {"interval_s": 1.0}, "sitemaps": {"enabled": False}, "limits": limits,
        "dedup": {"novelty_window": 10},
    })


def _pages(start: int, n: int, prefix: str = "/p/") -> list[str]:
    return [f"{prefix}{i}" for i in range(start, start + n)]


def scenarios(m: SimpleNamespace, tmp: str) -> dict[str, Any]:
    out: dict[str, Any] = {}

    cfg = _cfg(m, max_pages_per_host=5)
    first = Node(m, cfg, f"{tmp}/budget-a")
    before = first.deliver(_pages(0, 8))
    again = Node(m, cfg, f"{tmp}/budget-b")
    after = again.deliver(_pages(8, 5))
    out["budget"] = {"limit": 5, "queued_before_loss": before, "queued_after_loss": after, "host_urls": again.held()}

    cfg = _cfg(m, max_pages_per_host=40)
    first = Node(m, cfg, f"{tmp}/trap-a")
    shard = first.shard
    first.deliver(_pages(0, 20))

    async def cut() -> None:
        for _ in range(10):  # as crawler.engine.handler records each fetched page
            drop = shard.parts.host_budget.record_fetch(HOST, True, shard.parts.frontier.queued_for(HOST))
            if drop:
                shard.parts.admission.trim(HOST, drop)
        await shard.parts.checkpointer.tick()  # the outbox round that acks those pages
        await shard.synced()

    asyncio.run(cut())
    allowed = shard.parts.host_budget.remaining(HOST)
    again = Node(m, cfg, f"{tmp}/trap-b")
    after = again.deliver(_pages(20, 30))
    out["trap_cut"] = {"allowed_after_cut": allowed, "queued_after_loss": after, "host_urls": again.held()}

    cfg = _cfg(m)
    first = Node(m, cfg, f"{tmp}/operator-a")
    first.shard.apply_host_policy(m.PolicyChange(HOST, max_pages=5))
    asyncio.run(first.shard.synced())
    before = first.deliver(_pages(0, 8))
    again = Node(m, cfg, f"{tmp}/operator-b")
    after = again.deliver(_pages(8, 5))
    out["operator_max_pages"] = {"max_pages": 5, "queued_before_loss": before, "queued_after_loss": after,
                                 "host_urls": again.held()}

    cfg = _cfg(m)
    clock = m.MockClock()
    server = Server(m, clock, {f"http://{HOST}/robots.txt": (200, ROBOTS), f"http://{HOST}/p/0": (200, b"<html></html>"),
                               f"http://{HOST}/p/1": (200, b"<html></html>")})
    first = Node(m, cfg, f"{tmp}/robots-a", server)
    shard = first.shard

    async def refuse() -> None:
        await shard.accept([m.UrlItem(f"http://{HOST}{p}", 1) for p in ["/p/0", "/private/0", "/private/1"]])
        runner = asyncio.ensure_future(shard.run())
        await first.parts.clock.run_until(lambda: shard.report().counters.get("robots_blocked", 0) == 2, max_time=30)
        shard.stop()
        await runner
        await shard.synced()

    asyncio.run(refuse())
    made = len(server.requests)
    again = Node(m, cfg, f"{tmp}/robots-b", server)
    shard = again.shard

    async def after_loss() -> None:
        await shard.accept([m.UrlItem(f"http://{HOST}{p}", 1) for p in ["/private/2", "/p/1"]])
        runner = asyncio.ensure_future(shard.run())
        await again.parts.clock.run_until(lambda: f"http://{HOST}/p/1" in server.requests[made:], max_time=30)
        shard.stop()
        await runner

    asyncio.run(after_loss())
    refetched = [u for u in server.requests[made:] if u.endswith("/robots.txt")]
    out["robots"] = {"robots_requests_after_loss": len(refetched),
                     "robots_blocked_rows_after_loss": shard.report().counters.get("robots_blocked", 0)}
    return out


# -- admission cost -------------------------------------------------------------------------


def _batches(kind: str, n: int, seed: int = 3) -> list[list[str]]:
    rng = random.Random(seed)
    urls, batches = 0, []
    universe = 100 if kind == "few_hosts" else 4000
    while urls < n:
        hosts = [f"h{rng.randrange(universe):04d}.bench.test" for _ in range(100 if kind != "site" else 2)]
        batches.append([f"http://{hosts[i % len(hosts)]}/p/{urls + i}" for i in range(100)])
        urls += 100
    return batches


def admission_cost(m: SimpleNamespace, batches: list[list[str]], limit: int | None, tmp: str) -> dict[str, float]:
    records: list[list[Any]] = []
    store = m.FrontierStore(os.path.join(tmp, f"{uuid.uuid4().hex}.sqlite"),
                            journal=lambda kind, payload: records.append([kind, payload]) or len(records))
    clock = m.MockClock()
    robots = m.RobotsCache("bench/1.0", clock=clock)
    admission = m.Admission(store, robots, m.HostBudget(limit), m.Frontier(m.Politeness(1.0, clock=clock), clock),
                            respect_robots=True, dropped=Counter())
    items = [[m.UrlItem(u, 1) for u in batch] for batch in batches]
    kept = 0
    t0 = time.process_time()
    for batch in items:
        keep, _ = admission.take(batch)
        kept += len(keep)
    cpu = time.process_time() - t0
    store.close()
    log_bytes = len(zlib.compress(json.dumps(records, separators=(",", ":")).encode(), 6))
    n = sum(map(len, batches))
    return {"us_per_url": 1e6 * cpu / n, "us_per_admitted_url": 1e6 * cpu / max(1, kept), "admitted": kept,
            "journal_bytes_per_url": log_bytes / n, "records": len(records)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--against", type=Path, help="another checkout to compare with (the 'before')")
    p.add_argument("--urls", type=int, default=40_000)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    if a.urls < 100 or a.repeat < 1:
        p.error("--urls must be >= 100 and --repeat >= 1")
    trees = {"after": ROOT} if a.against is None else {"before": a.against.resolve(), "after": ROOT}
    cases = {"spread": (_batches("spread", a.urls), None), "site": (_batches("site", a.urls), None),
             "over_budget": (_batches("few_hosts", a.urls), 20)}
    result: dict[str, Any] = {"benchmark": "durable_limits", "urls": a.urls, "repeat": a.repeat,
                              "scenarios": {}, "admission": {name: {} for name in trees}}
    with tempfile.TemporaryDirectory(prefix="durable-limits-") as tmp:
        for name, tree in trees.items():
            result["scenarios"][name] = scenarios(load_tree(tree), os.path.join(tmp, name))
            print(f"[durable_limits] {name} scenarios: {result['scenarios'][name]}", file=sys.stderr, flush=True)
        modules = {name: load_tree(tree) for name, tree in trees.items()}
        best: dict[str, dict[str, dict[str, float]]] = {name: {} for name in trees}
        for rnd in range(a.repeat):
            for name in (list(trees) if rnd % 2 == 0 else list(reversed(trees))):
                for case, (batches, limit) in cases.items():
                    got = admission_cost(modules[name], batches, limit, tmp)
                    old = best[name].get(case)
                    if old is None or got["us_per_url"] < old["us_per_url"]:
                        best[name][case] = got
        for name in trees:
            result["admission"][name] = {case: {k: round(v, 2) if isinstance(v, float) else v for k, v in got.items()}
                                         for case, got in best[name].items()}
            print(f"[durable_limits] {name} admission: {result['admission'][name]}", file=sys.stderr, flush=True)
    # Not benchmarks.common.machine_info: that needs psutil, this needs nothing extra.
    result["machine"] = {"nproc": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2)}
    print(json.dumps(result))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
