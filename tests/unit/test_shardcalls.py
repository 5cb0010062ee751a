"""The runtime seam's shard calls exist once (crawler.session.shardcalls), and agree with the
protocol the session is written against (crawler.session.runtime.Runtime).

The Ray runtime is read as source (unit tests refuse Ray); the local one is imported.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from crawler.session.inprocess import LocalRuntime
from crawler.session.runtime import Runtime
from crawler.session.shardcalls import ShardCalls, ShardEndpoint, merge_seen_stats

ROOT = Path(__file__).resolve().parents[2]
COMMON = sorted(n for n, v in vars(ShardCalls).items() if inspect.iscoroutinefunction(v) and not n.startswith("_"))


def _methods(path: str, cls: str) -> dict[str, ast.AsyncFunctionDef | ast.FunctionDef]:
    tree = ast.parse((ROOT / path).read_text())
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    return {f.name: f for f in node.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}


def test_the_shard_calls_are_written_once_not_in_each_runtime() -> None:
    assert {"deliver", "widen_scope", "set_host_policy", "place", "url_status", "url_for_hash", "host_info", "vet_seeds"} <= set(COMMON)
    for path, cls in (("crawler/session/inprocess.py", "LocalRuntime"), ("actors/rayruntime.py", "RayRuntime")):
        own = _methods(path, cls)
        assert not set(COMMON) & set(own), f"{cls} writes its own {sorted(set(COMMON) & set(own))}"
        assert {"_call", "_shard_ids"} <= set(own), f"{cls} must say how a call reaches a shard"


def _params(fn) -> list[str]:
    return [p for p in inspect.signature(fn).parameters if p != "self"]


def _ast_params(fn: ast.AsyncFunctionDef | ast.FunctionDef) -> list[str]:
    a = fn.args
    return [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs) if x.arg != "self"]


@pytest.mark.parametrize("name", [n for n in vars(Runtime) if not n.startswith("_")])
def test_both_runtimes_have_the_protocols_methods_with_its_parameters(name: str) -> None:
    want = _params(getattr(Runtime, name))
    assert _params(getattr(LocalRuntime, name)) == want
    ray_own = _methods("actors/rayruntime.py", "RayRuntime")
    got = _ast_params(ray_own[name]) if name in ray_own else _params(getattr(ShardCalls, name))
    assert got == want


def test_the_endpoint_answers_every_call_the_runtimes_make() -> None:
    """Each ``_call(shard, "<method>")`` in crawler.session.shardcalls names a ShardEndpoint method,
    and the HostShard actor exposes each of them (Ray calls the actor's methods)."""
    tree = ast.parse((ROOT / "crawler/session/shardcalls.py").read_text())
    called = {
        n.args[1].value
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("_call", "_each")
        and len(n.args) > 1 and isinstance(n.args[1], ast.Constant)
    }
    assert called and called <= set(dir(ShardEndpoint))
    assert called <= set(_methods("actors/host_shard.py", "HostShard"))


def test_seen_stats_are_merged_the_same_way_on_both_runtimes() -> None:
    merged = merge_seen_stats(
        [{"urls": 3, "fp_rate": 0.5, "mode": "exact", "full": False}, {"urls": 4, "fp_rate": 0.25, "mode": "bloom", "full": True}],
        restored_from_out=1,
    )
    assert merged == {"urls": 7, "fp_rate": 0.75, "mode": "exact", "full": False, "restored_from_out": 1}
