"""The test side of tests/integration/local_cluster.py: start that cluster process, send it
commands, stop every process of it by PID at the end (shared by the multi-node tests)."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile
from pathlib import Path

from actors import quietray
from tests.integration.procs import ray_node_pids, stop_pids

ROOT = Path(__file__).resolve().parents[2]
TOKEN = secrets.token_hex(32)  # this cluster's own token (never the machine's ~/.ray/auth_token)


def _env() -> dict[str, str]:
    env = quietray.quiet_env(PYTHONUNBUFFERED="1", RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=TOKEN, PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    for k in ("RAY_ADDRESS", "RAY_AUTH_TOKEN_PATH"):
        env.pop(k, None)
    return env


class LocalCluster:
    """Talks to the cluster process (one JSON line per command)."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        # env: added to the cluster's environment (the head node's processes inherit it).
        self.temp_dir = tempfile.mkdtemp(prefix="ray2n-", dir="/tmp")
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.integration.local_cluster", self.temp_dir],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={**_env(), **(env or {})},
                                     cwd=ROOT,
                                     start_new_session=True)  # its own process group: ray_node_pids
        assert self.proc.stdin is not None and self.proc.stdout is not None  # both PIPE
        self._stdin, self._stdout = self.proc.stdin, self.proc.stdout
        first = self._read()
        self.address, self.head = first["address"], first["head"]
        self.worker: str | None = None

    def _read(self) -> dict:
        line = self._stdout.readline()
        assert line, f"the cluster process ended (exit {self.proc.poll()})"
        return json.loads(line)

    def ask(self, cmd: str) -> dict:
        self._stdin.write(cmd + "\n")
        self._stdin.flush()
        return self._read()

    def add_worker(self, local_dir: str | None = None, *, region: str | None = None, source: str | None = None) -> str:
        words = [local_dir or "", f"region={region}" if region else "", f"source={source}" if source else ""]
        self.worker = self.ask(" ".join(["add-worker", *filter(None, words)]))["worker"]
        return self.worker

    def shards(self) -> dict[str, tuple[str, str]]:
        """HostShard actors: name -> (node id, state)."""
        return {a["name"]: (a["node"], a["state"]) for a in self.ask("actors")["actors"] if ":shard-" in a["name"]}

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                self._stdin.write("quit\n")
                self._stdin.flush()
                self.proc.wait(timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            pass
        finally:
            pids = ray_node_pids(self.temp_dir)
            pids.discard(self.proc.pid)
            if self.proc.poll() is None:
                pids.add(self.proc.pid)
            stop_pids(pids)
            assert not pids, f"cluster processes still alive: {sorted(pids)}"
