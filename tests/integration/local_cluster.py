"""A Ray cluster of several raylets on 127.0.0.1, owned by a child process of a test.

    python -m tests.integration.local_cluster TEMP_DIR

builds a head node (``ray.cluster_utils.Cluster``, every process bound to 127.0.0.1, no
dashboard, its own temp dir, nothing sent off the machine: actors.quietray) and prints one
JSON line ``{"address", "head"}``, then obeys one command per line on stdin, answering one
JSON line each:

    add-worker [DIR] [region=R] [source=ADDR]
                      a second raylet ({"worker": node_id}); with DIR its processes keep
                      their local files there (RAYCRAWL_LOCAL_DIR, as on a machine's disk);
                      region=R labels it (ray start --labels region=R); source=ADDR binds
                      its outgoing connections to ADDR (RAYCRAWL_SOURCE_ADDRESS)
    actors            the GCS actor table ({"actors": [{"name", "node", "state", "pid"}...]})
    kill-worker       SIGKILL every process of that raylet and its workers, by PID
                      ({"killed": node_id, "workers": n}): a machine lost at once
    kill-actor NAME   SIGKILL the worker process of one live named actor ({"pid": pid})
    quit / EOF        shut the cluster down

The head's processes inherit this process's RAYCRAWL_LOCAL_DIR (the caller sets it).

It runs in its own process so the test process (which may hold the session's Ray) stays
out of it, and so ``Cluster``'s address file lands in TEMP_DIR, not in /tmp/ray. A second
``ray start --address`` would bind some agents to the machine's primary address; this
keeps every socket on loopback (cluster_client gives it actors.quietray's environment).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

from actors import quietray
from tests.integration.procs import _proc_table

#: Node death is noticed within about a second (Ray's defaults take 15-30 s), so a killed
#: node's actors restart elsewhere while the test watches.
HEALTH_CHECK = {"health_check_period_ms": 300, "health_check_timeout_ms": 300, "health_check_failure_threshold": 3}


def _children(parent: int) -> list[int]:
    """PIDs whose parent is ``parent``."""
    return [pid for pid, (ppid, _, _) in _proc_table().items() if ppid == parent]


def _kill_node(cluster, node) -> int:
    """SIGKILL a node's worker processes (the raylet's children: actors, agents), then the
    node's own processes. ``Cluster.remove_node`` alone kills only the latter, and the
    workers then ran on until they noticed their raylet was gone (a real machine loss
    takes them all at the same instant). Returns how many workers were killed."""
    raylet = node.all_processes["raylet"][0].process.pid
    workers = _children(raylet)
    for pid in workers:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue  # exited meanwhile
    cluster.remove_node(node, allow_graceful=False)  # SIGKILL by PID
    return len(workers)


def main(temp_dir: str) -> None:
    os.environ["RAY_TMPDIR"] = temp_dir
    os.makedirs(os.path.join(temp_dir, "ray"), exist_ok=True)
    os.environ.update(quietray.QUIET_ENV)
    from ray.cluster_utils import Cluster

    common: dict[str, Any] = {**quietray.NODE_KWARGS, "num_cpus": 2, "object_store_memory": 80 * 2**20}
    with quietray.quiet_head():
        cluster = Cluster(initialize_head=True, head_node_args={
            **common, "temp_dir": temp_dir, "_system_config": HEALTH_CHECK,
        })
    worker = None

    def say(obj: dict) -> None:
        print(json.dumps(obj), flush=True)

    assert cluster.head_node is not None  # initialize_head=True
    say({"address": cluster.address, "head": cluster.head_node.node_id})
    try:
        for line in sys.stdin:
            cmd = line.strip()
            if cmd == "add-worker" or cmd.startswith("add-worker "):
                words = cmd[len("add-worker"):].split()
                opts = dict(w.split("=", 1) for w in words if "=" in w)
                local_dir = next((w for w in words if "=" not in w), "")
                saved = {k: os.environ.get(k) for k in ("RAYCRAWL_LOCAL_DIR", "RAYCRAWL_SOURCE_ADDRESS")}
                if local_dir:  # the raylet, and every worker it starts, inherit it
                    os.environ["RAYCRAWL_LOCAL_DIR"] = local_dir
                if opts.get("source"):  # this "machine's" outgoing address (a region's)
                    os.environ["RAYCRAWL_SOURCE_ADDRESS"] = opts["source"]
                labels = {"region": opts["region"]} if opts.get("region") else {}
                try:
                    worker = cluster.add_node(**common, resources={"second_node": 1}, labels=labels)
                finally:
                    for k, v in saved.items():
                        if v is None:
                            os.environ.pop(k, None)
                        else:
                            os.environ[k] = v
                cluster.wait_for_nodes()
                say({"worker": worker.node_id})
            elif cmd == "actors":
                table = cluster.global_state.actor_table(None)
                say({"actors": [{"name": a.get("Name", ""), "node": a["Address"]["NodeID"], "state": a["State"],
                                 "pid": a.get("Pid")} for a in table.values()]})
            elif cmd.startswith("kill-actor "):
                name = cmd[len("kill-actor "):].strip()
                table = cluster.global_state.actor_table(None)
                pid = next(a["Pid"] for a in table.values() if a.get("Name") == name and a["State"] == "ALIVE")
                os.kill(pid, signal.SIGKILL)
                say({"pid": pid})
            elif cmd == "kill-worker":
                assert worker is not None, "no worker to kill"
                say({"killed": worker.node_id, "workers": _kill_node(cluster, worker)})
                worker = None
            elif cmd in ("quit", ""):
                break
    finally:
        cluster.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
