"""Every module of ``crawler/`` imports on its own, in a fresh interpreter, without Ray.

An import cycle only shows when a module of the cycle is imported *first* ("partially
initialized module"), so a test run that happens to import modules in a lucky order
never sees it. Here each module is imported first, alone, in its own interpreter (one
subprocess per module, run in parallel). The core must never import ray (the layout:
actors wrap the core, not the other way round); that is checked both in those
interpreters (transitive imports) and in the source (imports inside functions too).
A static check adds that the module-level import graph of the package has no cycle at
all, even one whose import order happens to work today.

Above modules, the package has a layer order (:data:`LAYERS`): its units (a subpackage
such as ``crawler.fetch``, or a top-level module such as ``crawler.errors``) from the
bottom up, each importing only from lower layers. Two checks hold it: no import circle
between units, and no import from a lower layer to a higher one (nor between two units
of one layer). They count every absolute import in a module's source: module-level ones,
ones inside functions (a lazy import is still a dependency), and ones under ``if
TYPE_CHECKING:`` (a type from a higher layer in a lower layer's signature couples the two
just the same; a Protocol in the lower layer is the way out). Today's exceptions are
listed in :data:`KNOWN_VIOLATIONS`, which may only shrink.
"""

from __future__ import annotations

import ast
import concurrent.futures
import json
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

#: Third-party packages a zygote interpreter imports once before it forks a child per
#: module: they are not what is tested (the crawler's modules are, each first and alone in
#: its child), and importing them ~220 times over cost most of this file's minute.
PRELOAD = ("aiohttp", "numpy", "pyarrow", "pyarrow.parquet", "yaml", "selectolax.lexbor", "feedparser",
           "fsspec", "protego", "tldextract", "xxhash", "zstandard", "warcio", "rich", "yarl", "multidict")

# Runs in a fresh interpreter: preload PRELOAD, then for each module fork a child that
# imports it and reports any ray import with the stack that asked for it (a finder that
# only watches: it never changes what is imported). Answers {module: [exit code, stderr]}.
_ZYGOTE = r"""
import importlib, json, os, sys, traceback
for name in json.loads(sys.argv[1]):
    try:
        importlib.import_module(name)
    except ImportError:
        pass
assert not any(m == "ray" or m.startswith("ray.") for m in sys.modules), "a preloaded package imported ray"
out = {}
for module in json.loads(sys.argv[2]):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.dup2(w, 2)
        code = 0
        try:
            asked = []
            class Watch:
                def find_spec(self, name, path=None, target=None):
                    if (name == "ray" or name.startswith("ray.")) and not asked:
                        asked.append("".join(traceback.format_stack()[:-1]))
                    return None
            sys.meta_path.insert(0, Watch())
            importlib.import_module(module)
            if asked or "ray" in sys.modules:
                sys.stderr.write("imports ray:\n" + (asked[0] if asked else "(already in sys.modules)"))
                code = 3
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stderr.flush()
        os._exit(code)
    os.close(w)
    with os.fdopen(r, "r", errors="replace") as f:
        err = f.read()
    _, status = os.waitpid(pid, 0)
    out[module] = [os.waitstatus_to_exitcode(status), err]
print(json.dumps(out))
"""


def _import_each_alone(modules: list[str]) -> dict[str, subprocess.CompletedProcess[str]]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    proc = subprocess.run(
        [sys.executable, "-c", _ZYGOTE, json.dumps(PRELOAD), json.dumps(modules)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, f"the import zygote failed:\n{proc.stderr}"
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    return {m: subprocess.CompletedProcess([m], code, "", err) for m, (code, err) in found.items()}


@pytest.fixture(scope="module")
def fresh_imports() -> dict[str, subprocess.CompletedProcess[str]]:
    """Every module imported first and alone: in a child forked, per module, from one of
    two zygotes that hold the third-party packages only."""
    names = sorted(MODULES)
    halves = [names[0::2], names[1::2]]
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        out: dict[str, subprocess.CompletedProcess[str]] = {}
        for part in pool.map(_import_each_alone, halves):
            out.update(part)
    return out


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
    out: list[tuple[str, list[str], int]] = []
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


# -- the layer order -------------------------------------------------------------------

#: crawler's units from the bottom up. A unit imports from units of lower layers only: not
#: from a higher layer, nor from a peer of its own layer (peers are independent).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "clock", "eventloop", "counters"),  # nothing from crawler
    ("urls", "config", "output", "robots"),  # config: parsing and value checks, no component
    ("fetch", "recovery"),  # recovery: stamps, leases, state folders
    ("seen", "content", "events"),
    ("parse", "frontier", "services"),  # services: the crawl-wide page budget and content index
    ("policy", "freshness"),  # what may be fetched, when and how often; feeds, news, sitemaps
    ("render", "placement"),
    ("engine", "configcheck"),  # the shard; the components' checks of a config
    ("control",),  # the HTTP API, over a session it is handed (typed by a Protocol)
    ("session",),  # one crawl over either runtime
    ("testing",),  # the test kit: synthetic webs, fakes, the simulator
)

#: Imports that run against :data:`LAYERS` today, as "importing module -> unit". The test
#: fails on a new one, and on a listed one that no longer violates (delete it here then).
KNOWN_VIOLATIONS: frozenset[str] = frozenset({
    # crawler.recovery holds the base of durable state (stamps, leases, state folders, the
    # state log: used by seen, content, frontier and events) and one module of a higher
    # level: a shard's state files in OUT, which the budget service reads too.
    "crawler.recovery.statefiles -> crawler.events",
    "crawler.recovery.statefiles -> crawler.frontier",
})

RANK = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}


def _unit(module: str) -> str | None:
    """The unit of a dotted module name of the package (None: the package itself)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == PACKAGE else None


def _unit_imports() -> dict[tuple[str, str], list[str]]:
    """(importing module, imported unit) -> where, for each import across units: every
    absolute import in the source (module level, in functions, under TYPE_CHECKING)."""
    out: dict[tuple[str, str], list[str]] = {}
    for name, path in MODULES.items():
        source = _unit(name)
        if source is None:
            continue
        for mod, names, line in _imports(ast.parse(path.read_text()), top_level_only=False):
            targets = [f"{mod}.{n}" for n in names] if mod == PACKAGE else [mod]  # from crawler import errors
            for target in map(_unit, targets):
                if target is not None and target != source:
                    out.setdefault((name, target), []).append(f"{path.relative_to(ROOT)}:{line}")
    return out


UNIT_IMPORTS = _unit_imports()


def _violations() -> dict[str, list[str]]:
    """"module -> crawler.unit" -> where, for each import that is not to a lower layer."""
    return {
        f"{module} -> {PACKAGE}.{target}": where
        for (module, target), where in UNIT_IMPORTS.items()
        if RANK[target] >= RANK[_unit(module) or ""]
    }


def test_every_unit_has_one_layer():
    units = {u for u in map(_unit, MODULES) if u is not None}
    listed = [u for layer in LAYERS for u in layer]
    assert len(listed) == len(set(listed)), "a unit listed twice in LAYERS"
    assert units == set(listed), (f"not in LAYERS (place it): {sorted(units - set(listed))}; "
                                  f"in LAYERS but gone: {sorted(set(listed) - units)}")


def test_the_layer_walk_sees_lazy_and_type_only_imports():
    # Guards the walk: a function-level import and a TYPE_CHECKING one are both counted.
    assert ("crawler.configcheck", "render") in UNIT_IMPORTS
    assert ("crawler.session.inprocess", "render") in UNIT_IMPORTS  # under TYPE_CHECKING, and in a function
    assert ("crawler.session.inprocess", "render") in UNIT_IMPORTS


def test_config_imports_no_component():
    # crawler.config parses and checks values; what needs a component is crawler.configcheck's.
    found = {f"{m} -> {t}" for (m, t) in UNIT_IMPORTS if _unit(m) == "config" and t != "errors"}
    assert not found, found


def test_no_import_circle_between_units():
    graph: dict[str, set[str]] = {}
    for (module, target) in UNIT_IMPORTS:
        if f"{module} -> {PACKAGE}.{target}" not in KNOWN_VIOLATIONS:
            graph.setdefault(_unit(module) or "", set()).add(target)
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        pytest.fail(f"import circle between units: {' -> '.join(exc.args[1])}")


def test_no_import_from_a_lower_layer_to_a_higher_one():
    found = _violations()
    new = {k: v for k, v in found.items() if k not in KNOWN_VIOLATIONS}
    assert not new, "imports against the layer order (crawler.<unit> a layer above, or a peer):\n" + "\n".join(
        f"  {k}  ({', '.join(v)})" for k, v in sorted(new.items()))
    fixed = sorted(KNOWN_VIOLATIONS - set(found))
    assert not fixed, f"no longer violates: delete from KNOWN_VIOLATIONS: {fixed}"
