"""Compile ``constraints.txt``: every package the project can install, pinned.

Why: ``pyproject.toml`` states ranges (what the code works with); a fresh machine's pip
(23.x, the one ``python3 -m venv`` brings) cannot always find a set of versions inside
them: it picks the newest boto3, which no aiobotocore release allows, and its
backtracking gives up with ``ResolutionImpossible``. A compiled file of exact versions,
passed with ``-c``, leaves pip nothing to search (Ray does the same with its
``requirements_compiled.txt``).

Run it after any change to the dependencies in ``pyproject.toml`` (needs uv and the
package index; ``pip install uv`` brings uv)::

    python tools/lock.py

It resolves for every extra at once, for every platform (``--universal``: markers such as
``sys_platform == 'darwin'`` stay in the file) and for the oldest Python the project
supports, and writes the hash of the dependency tables it compiled from into the header.
``tests/unit/test_constraints.py`` fails when that hash no longer matches
``pyproject.toml`` or when a range there is not met by its pin.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "constraints.txt"
#: The header line that records what the file was compiled from.
HASH_PREFIX = "# pyproject-dependencies-sha256: "


def dependency_hash(pyproject: Path = ROOT / "pyproject.toml") -> str:
    """SHA-256 of what decides the pins: requires-python, dependencies and every extra."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    tables = {
        "requires-python": project.get("requires-python"),
        "dependencies": project.get("dependencies", []),
        "optional-dependencies": project.get("optional-dependencies", {}),
    }
    return hashlib.sha256(json.dumps(tables, sort_keys=True).encode()).hexdigest()


def _uv() -> list[str]:
    found = shutil.which("uv")
    if found:
        return [found]
    try:
        import uv  # noqa: F401  (pip install uv)
    except ImportError:
        sys.exit("tools/lock.py: uv is needed to compile constraints.txt: pip install uv")
    return [sys.executable, "-m", "uv"]


def main() -> int:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    oldest = project["requires-python"].removeprefix(">=").strip()
    cmd = [*_uv(), "pip", "compile", "pyproject.toml", "--all-extras", "--universal",
           "--python-version", oldest, "--no-header"]
    pinned = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True).stdout
    header = (
        "# Every package the project can install, pinned (all extras, every platform).\n"
        "# Used as: pip install -e . -c constraints.txt (README, .ci/run, cluster.yaml).\n"
        "# Made by: python tools/lock.py (after a change to pyproject.toml's dependencies).\n"
        f"{HASH_PREFIX}{dependency_hash()}\n"
    )
    OUTPUT.write_text(header + pinned, encoding="utf-8")
    print(f"wrote {OUTPUT.relative_to(ROOT)}: {sum(1 for ln in pinned.splitlines() if '==' in ln)} pins")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
