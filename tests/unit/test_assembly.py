"""A shard is assembled once (crawler.engine.assembly.build_shard): every part gets its collaborators
through its constructor, and nothing outside a part sets its fields afterwards.

Checked in the source (ast), so a new ``shard.parts.gate = ...`` or ``router.before_flush =
...`` anywhere in ``crawler/`` or ``actors/`` fails here, as does a collaborator typed
``Any`` in ``crawler/`` (class sizes: tests/unit/test_class_size.py).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("crawler", "actors")

#: The classes a shard is made of (what build_shard builds and the actor wraps).
PART_CLASSES = {
    "Shard", "ShardParts", "Dispatcher", "FetchHandler", "Recorder", "RequestLane", "RobotsGate", "RegionGate",
    "BudgetGate", "Hold", "Claims", "Regions", "RegionBook", "HostParts", "LinkRouter", "Outbox",
    "PagePipeline", "Checkpointer", "Admission", "EventEmitter", "RefreshFeed", "SitemapReader",
    "RobotsClient", "RobotsCache", "MicroBatcher", "LinkPolicy", "NewsPolicy", "RecrawlPolicy",
    "HostBudget", "Frontier", "Politeness", "Fence", "TimedFetcher", "StateLog",
}

#: Parameter and attribute names that hold a part of a shard (or the shard itself).
COLLABORATORS = {
    "shard", "shards", "fetcher", "writer", "events", "emitter", "store", "outbox", "router",
    "pipeline", "frontier", "politeness", "robots", "checkpointer", "feed", "sitemaps", "news",
    "state_log", "regions", "admission", "host_budget", "budget", "gate", "hold", "claims",
    "peers", "parts", "book", "renderer", "render_service", "render_pool", "fence",
}


@functools.cache
def _sources(*folders: str) -> dict[Path, ast.Module]:
    return {p: ast.parse(p.read_text(), str(p)) for f in folders for p in sorted((ROOT / f).rglob("*.py"))}


def _fields(trees: dict[Path, ast.Module]) -> dict[str, set[str]]:
    """Field name -> the part classes that have it (``self.x = ...`` in a method, or a
    class-level annotation: a dataclass field)."""
    out: dict[str, set[str]] = {}
    for tree in trees.values():
        for cls in ast.walk(tree):
            if not isinstance(cls, ast.ClassDef) or cls.name not in PART_CLASSES:
                continue
            for stmt in cls.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    out.setdefault(stmt.target.id, set()).add(cls.name)
            for node in ast.walk(cls):
                if not isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                    continue
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    for t in ast.walk(target):  # also ``self.a, self.b = ...``
                        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                            out.setdefault(t.attr, set()).add(cls.name)
    return out


def _holder(node: ast.expr) -> str:
    """The name an attribute is set on: ``shard`` for ``shard.parts.gate`` and ``self.shard.parts.gate``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def outside_assignments(trees: dict[Path, ast.Module], fields: dict[str, set[str]]) -> list[str]:
    """``x.field = ...`` (or ``x.field += ...``) where ``x`` holds a part of a shard (by
    its name: ``shard``, ``self.shard``, ``router``, ...; never ``self``) and ``field`` is a
    field of a part class: wiring a part after its construction."""
    found = []
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            else:
                continue
            for t in targets:
                for sub in ast.walk(t):
                    if not isinstance(sub, ast.Attribute) or sub.attr not in fields:
                        continue
                    if not isinstance(sub.ctx, ast.Store) or _holder(sub.value) not in COLLABORATORS:
                        continue  # ``self.x``, or a record's field (``src.interval_s``)
                    where = f"{path.relative_to(ROOT)}:{sub.lineno}"
                    found.append(f"{where}: .{sub.attr} (a field of {', '.join(sorted(fields[sub.attr]))})")
    return found


def test_no_field_of_a_shard_part_is_set_from_outside_its_class() -> None:
    trees = _sources(*SCANNED)
    fields = _fields(trees)
    # The scan knows the fields that used to be wired after construction.
    assert {"gate", "events", "fetcher", "before_flush", "on_start", "resumed"} <= set(fields)
    assert outside_assignments(trees, fields) == []


def test_the_scan_finds_wiring_after_construction() -> None:
    """The check above can fail: the old wiring of build_shard and the actor is caught."""
    fields = _fields(_sources(*SCANNED))
    old = ast.parse(
        "shard = Shard()\n"
        "shard.parts.events = emitter\n"
        "router.before_flush = shard.commit_claims\n"
        "self.shard.parts.gate = self._may_work\n"
        "src.interval_s = 1.0\n"  # a record's field, not a part's
        "self.shard.parts.fetcher = TimedFetcher(self.shard.parts.fetcher, observe)\n"
        "shard.parts.resumed += 1\n"
    )
    found = outside_assignments({ROOT / "old.py": old}, fields)
    assert [f.split(": ")[1].split(" ")[0] for f in found] == [".events", ".before_flush", ".gate", ".fetcher", ".resumed"]


def _is_any(ann: ast.expr) -> bool:
    """``Any``, ``Any | None`` or ``"Any"`` (not ``dict[str, Any]``: that is data)."""
    if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
        return _is_any(ast.parse(ann.value, mode="eval").body)
    if isinstance(ann, ast.BinOp):
        return _is_any(ann.left) or _is_any(ann.right)
    return isinstance(ann, ast.Name) and ann.id == "Any"


def _any_typed(tree: ast.Module) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.arg in COLLABORATORS:
            ann, name, line = node.annotation, node.arg, node.lineno
        elif isinstance(node, ast.AnnAssign):
            t = node.target
            name = t.attr if isinstance(t, ast.Attribute) else t.id if isinstance(t, ast.Name) else ""
            ann, line = node.annotation, node.lineno
            if name not in COLLABORATORS:
                continue
        else:
            continue
        if ann is not None and _is_any(ann):
            out.append((line, name))
    return out


def test_no_collaborator_of_a_shard_is_typed_any_in_the_core() -> None:
    found = [f"{p.relative_to(ROOT)}:{line}: {name}" for p, tree in _sources("crawler").items() for line, name in _any_typed(tree)]
    assert found == []


def test_the_any_check_finds_an_untyped_collaborator() -> None:
    old = ast.parse(
        "def build_shard(cfg: Any, *, fetcher: Any = None, writer: 'Any | None' = None, rows: list[Any]) -> None:\n"
        "    self.events: Any = None\n"
    )
    assert sorted(name for _, name in _any_typed(old)) == ["events", "fetcher", "writer"]


#: The shard's own modules: the only ones that read what a shard is made of.
SHARD_MODULES = {"crawler/engine/shard.py", "crawler/engine/assembly.py", "crawler/engine/hostview.py",
                 "crawler/engine/parts.py"}


def _reads_of_parts(trees: dict[Path, ast.Module]) -> list[str]:
    """``<x>.parts`` where ``x`` names a shard, or any use of ``ShardParts``, outside the
    shard's own modules (everyone else goes through crawler.engine.shardapi.ShardApi)."""
    found = []
    for path, tree in trees.items():
        rel = path.relative_to(ROOT).as_posix()
        if rel in SHARD_MODULES:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "parts":
                owner = ast.unparse(node.value)
                if owner.split(".")[-1] in ("shard", "server", "s") or owner.endswith("shards[sid]"):
                    found.append(f"{rel}:{node.lineno}: {owner}.parts")
            elif (isinstance(node, ast.Name) and node.id == "ShardParts") or (
                    isinstance(node, ast.alias) and node.name == "ShardParts"):
                found.append(f"{rel}:{node.lineno}: ShardParts")
    return found


def test_nothing_outside_the_shard_reads_its_parts() -> None:
    assert _reads_of_parts(_sources(*SCANNED)) == []


def test_the_parts_check_finds_a_read_from_outside() -> None:
    old = ast.parse("info = self.shard.parts.frontier.queued_for(host)\nfrom crawler.engine.parts import ShardParts\n")
    assert sorted(_reads_of_parts({ROOT / "crawler/control/x.py": old})) == [
        "crawler/control/x.py:1: self.shard.parts", "crawler/control/x.py:2: ShardParts"]
