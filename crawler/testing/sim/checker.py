"""The simulator's checker: judge a simulated crawl from the web's log, OUT and the verdicts.

After a seed's crawl, nothing the crawler says about itself is taken on trust beyond the
verdict it gave. The checks, each a list of violations (empty: the seed passes):

1. **The verdict follows the ledger** (docs/invariants.md #13): a run that exited 0 said
   its ledger balanced; a crawl marked finished in ``OUT/state/crawl.json`` was marked by
   a run whose ledger balanced.
2. **It finished**: once the faults are over, some run ends "finished" with exit 0 (a
   crawl that cannot finish on a healthy cluster has lost or wedged something).
3. **Every URL an outcome**: every page the ground truth says a correct crawler fetches
   has a row in OUT, and every reachable robots-disallowed URL a ``robots_blocked`` row.
4. **Each page once**, outside the in-flight window: a page requested more often than
   the ground truth allows (retries of transient failures are allowed) is excused only
   when the process that fetched it before ended (killed, crashed, or its machine lost or
   declared dead, its successor taking over) before it was fetched again, and no row of
   it was durable in OUT by then -- the page was in flight at a fault.
5. **Politeness at the server**: per host, consecutive requests start at least the
   politeness interval apart (less the drift of the fastest simulated clock), and never
   while another request to the host is open -- across every process and incarnation.
6. **Robots**: no request for a URL the ground truth says must never be fetched.
7. **Limits hold**: no host has more distinct pages fetched than
   ``limits.max_pages_per_host`` (a budget or trap cut refunded by a restart shows here).
8. **State is written for a reason**: no shard writes two snapshots of one unchanged
   state (the same generation and sequence) to OUT.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from crawler.output import read_pages

if TYPE_CHECKING:
    from crawler.testing.sim.world import World

#: Politeness slack: clocks drift up to 1e-4 in the simulation, plus float noise.
INTERVAL_SLACK = 1e-3
#: How many violations of one kind are listed (the count is always given).
SHOW = 5


def _limit(kind: str, found: list[str]) -> list[str]:
    if len(found) <= SHOW:
        return found
    return found[:SHOW] + [f"{kind}: {len(found) - SHOW} more"]


def check(world: "World") -> list[str]:
    """Every violation of the module docstring's checks, as one line each."""
    rows = _rows(world)
    problems: list[str] = []
    problems += _verdicts(world)
    problems += _outcomes(world, rows)
    problems += _once(world, rows)
    problems += _politeness(world)
    problems += _robots(world)
    problems += _host_limits(world)
    problems += _snapshots(world)
    return problems


def _rows(world: "World") -> list[dict[str, Any]]:
    try:
        table = read_pages(world.out, None, dedupe=False, columns=["url", "outcome", "shard"])
    except FileNotFoundError:
        return []
    rows: list[dict[str, Any]] = table.to_pylist()
    return rows


def _verdicts(world: "World") -> list[str]:
    out: list[str] = []
    for r in world.runs:
        if r.error and r.error.startswith("internal error"):
            out.append(f"run {r.number}: {r.error}")
        ledger = r.ledger
        if r.exit == 0 and r.stats is not None and not r.stats.get("already_finished"):
            if ledger is None:
                out.append(f"run {r.number}: exit 0 without a ledger")
            elif not ledger.get("balanced"):
                out.append(f"run {r.number}: exit 0 with an unbalanced ledger: {'; '.join(ledger.get('problems', []))}")
        if r.marked_finished and ledger is not None and not ledger.get("balanced"):
            out.append(f"run {r.number}: marked the crawl finished with an unbalanced ledger")
    finals = [r for r in world.runs if r.exit == 0 and (r.finished or (r.stats or {}).get("already_finished"))]
    if not finals:
        last = world.runs[-1] if world.runs else None
        why = "no run" if last is None else f"last run {last.number}: exit {last.exit}, {last.error or 'unfinished'}"
        out.append(f"the crawl never finished ({len(world.runs)} runs; {why})")
    return out


def _outcomes(world: "World", rows: list[dict[str, Any]]) -> list[str]:
    if not any(r.exit == 0 and r.finished for r in world.runs):
        return []  # reported once, as "never finished"
    truth = world.web.web
    have: dict[str, set[str]] = {}
    for row in rows:
        have.setdefault(row["url"], set()).add(row["outcome"])
    missing = sorted(u for u in truth.must_fetch() if u not in have)
    blocked = sorted(u for u in truth.robots_blocked_urls() if "robots_blocked" not in have.get(u, set()))
    out = _limit("no row", [f"no row for {u}" for u in missing])
    out += _limit("robots", [f"no robots_blocked row for {u}" for u in blocked])
    return out


def _ends(world: "World") -> dict[str, float]:
    """When each process stopped being the one doing its work: killed, crashed, its machine
    lost or declared dead (it may run on as a zombie, but its successor took over), or, for
    a driver, killed. Processes that never ended are absent."""
    started: dict[str, tuple[float, str]] = {}
    ends: dict[str, float] = {}
    for at, kind, subject, detail in world.cluster.events:
        if kind == "started":
            name, _, machine = detail.partition(" on ")
            started[name] = (at, machine)
        elif kind in ("crash", "killed"):
            ends.setdefault(detail, at)
        elif kind == "zombie_killed":
            ends.setdefault(subject, at)
        elif kind == "driver_killed":
            ends.setdefault(subject, at)
        elif kind in ("machine_lost", "declared_dead"):
            for name, (t0, machine) in started.items():
                if machine == subject and t0 <= at:
                    ends[name] = min(ends.get(name, at), at)
    return ends


def _once(world: "World", rows: list[dict[str, Any]]) -> list[str]:
    truth = world.web.web
    attempts = world.cfg.fetch.attempts
    durable = _durable_rows(world)
    ends = _ends(world)
    stops = _stops(world)
    out: list[str] = []
    for url, reqs in world.web.requests_by_url().items():
        expected = truth.expected_requests(url, attempts)
        if expected is None or expected == 0 or len(reqs) <= expected:
            continue
        # Requests in flight at a fault: those of a process that ended (or was replaced)
        # before the next process asked for the page again, with no row of it durable by
        # then. A retry sequence cut off that way starts over in the successor.
        first_durable = durable.get(url)
        groups: list[list[Any]] = []
        for r in reqs:
            if groups and groups[-1][0].process == r.process:
                groups[-1].append(r)
            else:
                groups.append([r])
        excused = 0
        for group, following in zip(groups, groups[1:]):
            end = ends.get(group[0].process)
            again = following[0].start
            if end is not None and end <= again and (first_durable is None or first_durable > again):
                excused += len(group)
        # A process stopped while its request was open (a pause, a blocked loop) finds its
        # deadline passed when it runs again: the request timed out as far as it can
        # tell, and it is retried -- in flight at a fault too (sent before the stop, it
        # may reach the server after it).
        for earlier, later in zip(reqs, reqs[1:]):
            if earlier.process == later.process and any(
                    earlier.sent <= t <= later.start for t in stops.get(earlier.process, ())):
                excused += 1
        if len(reqs) - excused > expected:
            who = ", ".join(f"{r.process}@{r.start:.2f}" for r in reqs)
            out.append(f"{url} requested {len(reqs)} times (expected {expected}; {excused} in flight at a fault): {who}")
    return _limit("requested twice", out)


def _stops(world: "World") -> dict[str, list[float]]:
    """When each process was stopped (SIGSTOP: a pause or a blocked loop)."""
    found: dict[str, list[float]] = {}
    for at, kind, subject, _detail in world.cluster.events:
        if kind == "stopped":
            found.setdefault(subject, []).append(at)
    return found


def _durable_rows(world: "World") -> dict[str, float]:
    """When each URL's first row became durable in OUT (the part file's PUT time)."""
    import pyarrow.parquet as pq
    import io

    first: dict[str, float] = {}
    for key, obj in sorted(world.store.objects.items(), key=lambda kv: kv[1].put_at):
        if not key.startswith("out/pages/") or not key.endswith(".parquet"):
            continue
        try:
            urls = pq.read_table(io.BytesIO(obj.data), columns=["url"]).column("url").to_pylist()
        except Exception:  # noqa: BLE001 - a part that does not parse is the reader's concern, not this check's
            continue
        for u in urls:
            first.setdefault(u, obj.put_at)
    return first


def _politeness(world: "World") -> list[str]:
    interval = world.cfg.politeness.interval_s * (1 - INTERVAL_SLACK)
    by_host: dict[str, list[Any]] = {}
    for r in world.web.log:
        by_host.setdefault(r.host, []).append(r)
    out: list[str] = []
    for host, reqs in by_host.items():
        reqs.sort(key=lambda r: r.start)
        for a, b in zip(reqs, reqs[1:]):
            if a.end is None or b.start < a.end:
                out.append(f"{host}: {b.path_qs} ({b.process}) started at {b.start:.3f} while {a.path_qs} ({a.process}) "
                           f"was open ({a.start:.3f}-{a.end if a.end is not None else 'never'})")
            elif b.start - a.start < interval:
                out.append(f"{host}: requests {b.start - a.start:.3f}s apart ({a.process} then {b.process} at {b.start:.3f})")
    return _limit("impolite", out)


def _robots(world: "World") -> list[str]:
    truth = world.web.web
    out = []
    for r in world.web.log:
        why = truth.must_not_fetch(r.host, r.path_qs)
        if why is not None:
            out.append(f"{r.url} ({r.process}) must not be fetched: {why}")
    return _limit("must not fetch", out)


def _host_limits(world: "World") -> list[str]:
    limit = world.cfg.limits.max_pages_per_host
    if limit is None:
        return []
    pages: dict[str, set[str]] = {}
    for r in world.web.log:
        path = r.path_qs.partition("?")[0]
        if path == "/robots.txt" or path.endswith("sitemap.xml"):
            continue
        pages.setdefault(r.host, set()).add(r.path_qs)
    return _limit("host limit", [f"{host}: {len(p)} pages fetched, limits.max_pages_per_host is {limit}"
                                 for host, p in sorted(pages.items()) if len(p) > limit])


def _snapshots(world: "World") -> list[str]:
    from crawler.recovery.statelog import parse_piece

    seen: dict[tuple[str, int, int | None], set[str]] = {}
    for _at, key in world.store.puts:
        piece = parse_piece(key)
        if piece is None or piece.kind != "snap":
            continue
        shard = key.split("/")[-2]
        # Objects, not PUTs: a PUT reported failed (it may have landed) is tried again
        # under the same name.
        seen.setdefault((shard, piece.gen, piece.last), set()).add(key)
    return _limit("snapshot", [f"{shard}: {len(keys)} snapshots of generation {gen} at change {seq} (nothing changed)"
                               for (shard, gen, seq), keys in sorted(seen.items()) if len(keys) > 1])
