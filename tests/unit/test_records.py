"""Records that cross layers are declared once and passed whole (issue 23).

A host policy travels from the session to the shards as one ``PolicyChange``, and a
URL's state comes back as one ``UrlStatus``: no layer unpacks them into loose arguments
or re-declares their fields, so a field added to the record reaches every layer, and a
misspelt one fails where it is built. Read from the source (ast), not by running it.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The operator-facing entry points keep keyword arguments (max_rps, paused, ...): they
#: build the record; every layer below them passes it on.
ENTRY_POINTS = {"crawler/session/steering.py", "crawler/session/crawlsession.py", "crawler/session/handle.py"}


def _defs(name: str):
    for top in ("crawler", "actors"):
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                    yield rel, node


def test_a_host_policy_crosses_every_layer_as_one_policy_change() -> None:
    found = []
    for rel, fn in _defs("set_host_policy"):
        if rel in ENTRY_POINTS:
            continue
        params = [a for a in (*fn.args.args, *fn.args.kwonlyargs) if a.arg not in ("self", "shard_id")]
        kinds = [ast.unparse(a.annotation) if a.annotation is not None else None for a in params]
        found.append(rel)
        assert kinds == ["PolicyChange"], f"{rel}:{fn.lineno} set_host_policy takes {kinds}, not one PolicyChange"
    # The seam, the shard calls (both halves), the actor and the scheduler.
    assert {"crawler/session/runtime.py", "crawler/session/shardcalls.py", "actors/host_shard.py",
            "crawler/engine/shard.py"} <= set(found), found


def test_a_urls_state_comes_back_as_one_url_status() -> None:
    found = []
    for rel, fn in _defs("url_status"):
        returns = ast.unparse(fn.returns) if fn.returns is not None else None
        found.append(rel)
        assert returns == "UrlStatus | None", f"{rel}:{fn.lineno} url_status returns {returns}"
    assert len(found) >= 7, found


def test_the_records_are_declared_once() -> None:
    names: dict[str, list[str]] = {"PolicyChange": [], "UrlStatus": [], "ShardStatus": []}
    for top in ("crawler", "actors", "jobs"):
        for path in sorted((ROOT / top).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ClassDef) and node.name in names:
                    names[node.name].append(path.relative_to(ROOT).as_posix())
    assert names == {
        "PolicyChange": ["crawler/policy/hostpolicy.py"],
        "UrlStatus": ["crawler/frontier/store.py"],
        "ShardStatus": ["crawler/engine/status.py"],
    }
