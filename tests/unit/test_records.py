"""Records that cross layers are declared once (issue 23).

A host policy travels from the session to the shards as one ``PolicyChange``, and a
URL's state comes back as one ``UrlStatus``: that every layer passes them whole is the
type checker's to see (crawler.engine.shardapi.ShardApi, crawler.session.runtime.Runtime);
that no module re-declares one of them is not, and is read here from the source (ast).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


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
