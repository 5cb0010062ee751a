"""What durable shard state costs with a remote output (crawler.recovery.statelog), measured.

A crawl of the synthetic web (``bench`` profile, ``--hosts`` hosts) by the in-process
runtime, its output on a loopback S3 (moto's server on 127.0.0.1), with the shipped
defaults for the state log (``runtime.state_log_interval_s``) and snapshots
(``runtime.state_ship_interval_s``). Reported per shard, from each shard's own counters
(crawler.recovery.statelog.StateLog.stats): object-store requests per second for state (log
segments and the fence check after each, snapshots, compaction), log and snapshot bytes
per admitted URL; then what a restart does: each shard's state rebuilt from OUT on an
empty folder by a new incarnation (its claim, two listings, the previous generation's
claim, the newest snapshot, the segments after it found by name, its base written to its
claim: crawler.recovery.restore), timed.

    python -m benchmarks.statelog [--hosts 60] [--out benchmarks/results/statelog.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
import uuid
from pathlib import Path

from crawler.config import settings as config
from crawler.clock import SYSTEM_CLOCK
from crawler.session.inprocess import local_session
from crawler.recovery.statefiles import open_shard_store, state_dir
from crawler.testing.fixtures import crawl_config_for, running_web
from crawler.testing.s3 import start_loopback_s3

HERE = Path(__file__).resolve().parent


def measure(hosts: int, shards: int, interval_s: float) -> dict:
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1",
                      AWS_EC2_METADATA_DISABLED="true")
    moto, endpoint = start_loopback_s3("bench")
    try:
        with running_web(seed=1, profile="bench", hosts=hosts) as web, tempfile.TemporaryDirectory() as tmp:
            os.environ["RAYCRAWL_LOCAL_DIR"] = os.path.join(tmp, "node")
            out = f"s3://bench/{uuid.uuid4().hex}"
            opts = {"key": "testing", "secret": "testing", "client_kwargs": {"endpoint_url": endpoint}}
            raw = crawl_config_for(web, politeness={"interval_s": interval_s}, runtime={"shards": shards},
                                   output={"path": out, "storage_options": opts})
            cfg = config.from_dict(raw)
            session = local_session(cfg)
            started = time.monotonic()
            stats = asyncio.run(session.run())
            elapsed = time.monotonic() - started
            per_shard = []
            for sid, shard in session.runtime.shards.items():
                st = shard.state_log.stats()
                counts = shard.store_counts() or {}
                admitted = sum(counts.values())
                log_bytes, snap_bytes = st["state_bytes"], st["state_snapshot_bytes"]
                per_shard.append({
                    "shard": sid, "admitted": admitted, "rows": counts.get("done", 0),
                    "state_requests": st["state_requests"], "segments": st["state_segments"],
                    "records": st["state_records"], "snapshots": st["state_snapshots"],
                    "requests_per_s": round(st["state_requests"] / elapsed, 2),
                    "pages_per_s": round(counts.get("done", 0) / elapsed, 1),
                    "log_bytes": log_bytes, "log_bytes_per_admitted_url": round(log_bytes / max(1, admitted), 1),
                    "snapshot_bytes": snap_bytes,
                })
            # What a restart reads: each shard rebuilt from OUT on an empty folder.
            os.environ["RAYCRAWL_LOCAL_DIR"] = os.path.join(tmp, "fresh-node")
            spec = state_dir(out, None, cfg.fingerprint())
            restarts = []
            for sid in session.runtime.shards:
                t0 = time.monotonic()
                opened = open_shard_store(cfg, sid, spec, SYSTEM_CLOCK)
                took = time.monotonic() - t0
                r = opened.restored
                restarts.append({"shard": sid, "seconds": round(took, 3), "bytes_read": r.bytes_read,
                                 "snapshot_bytes_per_url": round(r.bytes_read / max(1, sum(opened.store.counts().values())), 1),
                                 "segments_read": r.segments, "requests": opened.log.remote.requests,
                                 "urls": sum(opened.store.counts().values())})
                opened.store.close()
    finally:
        moto.stop()
    return {
        "web": {"profile": "bench", "hosts": hosts, "pages": stats["ledger"]["rows"] if stats.get("ledger") else None},
        "config": {"shards": shards, "politeness_interval_s": interval_s,
                   "state_log_interval_s": cfg.runtime.state_log_interval_s,
                   "state_ship_interval_s": cfg.runtime.state_ship_interval_s},
        "elapsed_s": round(elapsed, 1),
        "ledger_balanced": bool(stats.get("ledger", {}).get("balanced")),
        "per_shard": per_shard,
        "requests_per_s_per_shard_max": max(s["requests_per_s"] for s in per_shard),
        "log_bytes_per_admitted_url": round(sum(s["log_bytes"] for s in per_shard)
                                            / max(1, sum(s["admitted"] for s in per_shard)), 1),
        "restart": restarts,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=60)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--interval", type=float, default=0.05, help="politeness interval_s")
    ap.add_argument("--out", default=str(HERE / "results" / "statelog.json"))
    args = ap.parse_args()
    result = measure(args.hosts, args.shards, args.interval)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("elapsed_s", "requests_per_s_per_shard_max", "log_bytes_per_admitted_url")}))


if __name__ == "__main__":
    main()
