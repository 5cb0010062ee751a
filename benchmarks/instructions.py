"""Instruction counts of code regions, from valgrind's callgrind: repeatable under load.

CPU time on a shared 2-core machine moves with what else runs (caches, SMT siblings);
the number of instructions a stage executes does not. A benchmark marks each region
with :func:`region`; :class:`CallgrindRun` runs the benchmark again under
``valgrind --tool=callgrind --collect-atstart=no`` and returns the instructions (``Ir``)
counted inside each region. The markers are callgrind client requests, issued through a
tiny C helper compiled on first use (needs ``gcc`` and valgrind's headers:
``apt-get install valgrind``); outside valgrind they cost nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator

_SRC = r"""
#include <valgrind/callgrind.h>
int cg_running(void) { return RUNNING_ON_VALGRIND; }
void cg_begin(void) { CALLGRIND_ZERO_STATS; CALLGRIND_TOGGLE_COLLECT; }
void cg_end(const char *name) { CALLGRIND_TOGGLE_COLLECT; CALLGRIND_DUMP_STATS_AT(name); }
"""
_LIB_DIR = os.path.join(tempfile.gettempdir(), "raycrawl-bench", "callgrind-helper")
_lib: ctypes.CDLL | None = None
_active: bool | None = None


def _helper() -> ctypes.CDLL:
    global _lib
    if _lib is None:
        so = os.path.join(_LIB_DIR, "cg.so")
        if not os.path.exists(so):
            os.makedirs(_LIB_DIR, exist_ok=True)
            src = os.path.join(_LIB_DIR, "cg.c")
            with open(src, "w") as f:
                f.write(_SRC)
            subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-o", so + ".tmp", src], check=True)
            os.replace(so + ".tmp", so)
        _lib = ctypes.CDLL(so)
    return _lib


def under_callgrind() -> bool:
    """True when this process runs under valgrind (then :func:`region` counts)."""
    global _active
    if _active is None:
        _active = os.environ.get("RAYCRAWL_CALLGRIND") == "1" and bool(_helper().cg_running())
    return _active


@contextlib.contextmanager
def region(name: str) -> Iterator[None]:
    """Count the instructions executed inside the block as region ``name`` (no-op outside valgrind)."""
    if not under_callgrind():
        yield
        return
    lib = _helper()
    lib.cg_begin()
    try:
        yield
    finally:
        lib.cg_end(name.encode())


_TRIGGER = re.compile(r"^desc: Trigger: Client Request: (.+)$", re.M)
_TOTALS = re.compile(r"^(?:totals|summary): (\d+)", re.M)


class CallgrindRun:
    """``python -m <argv...>`` running under callgrind; :meth:`counts` waits for it."""

    def __init__(self, argv: list[str]) -> None:
        if shutil.which("valgrind") is None:
            raise SystemExit("valgrind is not installed: apt-get install -y valgrind")
        _helper()  # compile before the slow run starts
        self._dir = tempfile.mkdtemp(prefix="raycrawl-cg-")
        cmd = ["valgrind", "--tool=callgrind", "--collect-atstart=no", "--dump-line=no",
               f"--callgrind-out-file={self._dir}/cg.out", sys.executable, "-m", *argv]
        env = {**os.environ, "RAYCRAWL_CALLGRIND": "1", "PYTHONHASHSEED": "0"}
        self._proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def counts(self, timeout_s: float = 7200) -> dict[str, int]:
        """Instructions per region name (waits for the run to end)."""
        try:
            rc = self._proc.wait(timeout_s)
            if rc != 0:
                raise RuntimeError(f"callgrind run exited with {rc}")
            counts: dict[str, int] = {}
            for path in sorted(glob.glob(f"{self._dir}/cg.out.*")):
                with open(path) as f:
                    text = f.read()
                trig, tot = _TRIGGER.search(text), _TOTALS.search(text)
                if trig and tot:
                    counts[trig.group(1).strip()] = int(tot.group(1))
            return counts
        finally:
            if self._proc.poll() is None:
                self._proc.kill()
            shutil.rmtree(self._dir, ignore_errors=True)
