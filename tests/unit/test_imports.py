"""Every module of ``crawler/`` imports on its own, in a fresh interpreter, without Ray.

An import cycle only shows when a module of the cycle is imported *first* ("partially
initialized module"), so a test run that happens to import modules in a lucky order
never sees it. Here each module is imported first, alone, in its own interpreter (one
subprocess per module, run in parallel). The core must never import ray (the layout:
actors wrap the core, not the other way round); that is checked both in those
interpreters (transitive imports) and in the source (imports inside functions too).
A static check adds that the module-level import graph of the package has no cycle at
all, even one whose import order happens to work today.
"""

from __future__ import annotations

import ast
import concurrent.futures
import graphlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "crawler"


def _modules() -> dict[str, Path]:
    """Dotted name -> source file of every module and package under crawler/."""
    out: dict[str, Path] = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()

# Runs in the fresh interpreter: import the module, then report any ray import with the
# stack that asked for it (a finder that only watches: it never changes what is imported).
_PROBE = r"""
import importlib, sys, traceback
asked = []
class Watch:
    def find_spec(self, name, path=None, target=None):
        if (name == "ray" or name.startswith("ray.")) and not asked:
            asked.append("".join(traceback.format_stack()[:-1]))
        return None
sys.meta_path.insert(0, Watch())
importlib.import_module(sys.argv[1])
if asked or "ray" in sys.modules:
    sys.stderr.write("imports ray:\n" + (asked[0] if asked else "(already in sys.modules)"))
    sys.exit(3)
"""


def _import_alone(module: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    return subprocess.run(
        [sys.executable, "-c", _PROBE, module],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def fresh_imports() -> dict[str, subprocess.CompletedProcess[str]]:
    """Every module imported first and alone, in parallel fresh interpreters."""
    workers = max(2, os.cpu_count() or 2)
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        return dict(zip(MODULES, pool.map(_import_alone, MODULES)))


def test_the_walk_finds_the_package():
    # Guards the test itself: an empty or wrong walk would pass everything below.
    assert {"crawler", "crawler.engine.shard", "crawler.output", "crawler.output.schema",
            "crawler.testing.web"} <= set(MODULES)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_module_imports_first_and_alone_without_ray(fresh_imports, module):
    proc = fresh_imports[module]
    assert proc.returncode == 0, f"importing {module} in a fresh interpreter failed:\n{proc.stderr}"


def _imports(tree: ast.AST, *, top_level_only: bool) -> list[tuple[str, list[str], int]]:
    """(module, imported names, line) of each absolute import statement."""
    nodes = tree.body if top_level_only else ast.walk(tree)  # type: ignore[attr-defined]
    out = []
    for node in nodes:
        if isinstance(node, ast.Import):
            out.extend((a.name, [], node.lineno) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.module, [a.name for a in node.names], node.lineno))
    return out


def test_no_module_imports_ray_anywhere_in_its_source():
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in MODULES.values()
        for mod, _, line in _imports(ast.parse(path.read_text()), top_level_only=False)
        if mod == "ray" or mod.startswith("ray.")
    ]
    assert not found, f"crawler/ must not import ray: {found}"


def test_module_level_import_graph_has_no_cycle():
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        deps = set()
        for mod, names, _ in _imports(ast.parse(path.read_text()), top_level_only=True):
            if mod in MODULES:
                deps.add(mod)  # "from crawler.output import X" depends on the package itself
            deps.update(f"{mod}.{n}" for n in names if f"{mod}.{n}" in MODULES)
        graph[name] = deps - {name}
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        pytest.fail(f"import cycle: {' -> '.join(exc.args[1])}")
