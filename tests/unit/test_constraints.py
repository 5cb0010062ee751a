"""constraints.txt matches pyproject.toml: compiled from the same dependency tables, every
declared package pinned, every pin inside its declared range, and in a form pip takes.

The README's install commands pass it with ``-c``: a file that drifted from
pyproject.toml either pins a version the project does not allow (pip fails) or leaves a
new dependency to the resolver that a fresh machine's pip cannot always satisfy
(tools/lock.py says why). Refresh it with ``python tools/lock.py``.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tools.lock import HASH_PREFIX, dependency_hash

ROOT = Path(__file__).resolve().parents[2]
FIX = "run `pip install uv && python tools/lock.py` and commit constraints.txt"


def _pins() -> dict[str, list[Requirement]]:
    pins: dict[str, list[Requirement]] = {}
    for line in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            pins.setdefault(canonicalize_name(req.name), []).append(req)
    return pins


def _declared() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    specs = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        specs.extend(extra)
    return [r for r in map(Requirement, specs) if canonicalize_name(r.name) != canonicalize_name(project["name"])]


def test_constraints_were_compiled_from_this_pyproject():
    header = [ln for ln in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines() if ln.startswith(HASH_PREFIX)]
    assert header, f"constraints.txt has no '{HASH_PREFIX.strip()}' line: {FIX}"
    assert header[0][len(HASH_PREFIX):] == dependency_hash(), f"pyproject.toml's dependencies changed: {FIX}"


def test_every_declared_package_is_pinned_inside_its_range():
    pins = _pins()
    problems = []
    for req in _declared():
        candidates = pins.get(canonicalize_name(req.name))
        if not candidates:
            problems.append(f"{req.name} is not pinned")
            continue
        for pin in candidates:
            version = next(iter(pin.specifier)).version
            if not req.specifier.contains(version, prereleases=True):
                problems.append(f"{req.name}: pinned {version}, pyproject.toml asks {req.specifier}")
    assert not problems, f"{'; '.join(problems)}: {FIX}"


def test_pip_can_take_the_file_as_constraints():
    # pip refuses extras and anything but exact pins in a constraints file; markers are
    # fine, and for this machine exactly one pin of each package applies.
    env = default_environment()
    for name, reqs in _pins().items():
        for req in reqs:
            assert not req.extras, f"{name}: a constraint cannot name extras ({req})"
            assert re.fullmatch(r"==[^,]+", str(req.specifier)), f"{name}: not an exact pin ({req.specifier})"
        applying = [r for r in reqs if r.marker is None or r.marker.evaluate(env)]
        assert len(applying) <= 1, f"{name}: {len(applying)} pins apply on this machine"
