"""The runtime seam's shard calls exist once (crawler.session.shardcalls), over each shard's
typed ShardApi (crawler.engine.shardapi).

mypy checks that the shard, the ShardServer and both proxies implement ShardApi (they are
returned where one is expected) and that each runtime is a crawler.session.runtime.Runtime
(it is passed where one is expected). What it cannot see is the Ray actor: the proxy calls
``handle.<name>.remote(...)`` on an untyped handle, so the HostShard actor must have every
ShardApi method, with the same parameters -- checked here, from the source (unit tests
refuse Ray).
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any


from crawler.engine.shardapi import ShardApi
from crawler.session.shardcalls import ShardCalls, merge_seen_stats

ROOT = Path(__file__).resolve().parents[2]
COMMON = sorted(n for n, v in vars(ShardCalls).items() if inspect.iscoroutinefunction(v) and not n.startswith("_"))
API = sorted(n for n, v in vars(ShardApi).items() if inspect.iscoroutinefunction(v) and not n.startswith("_"))


def _methods(path: str, cls: str) -> dict[str, ast.AsyncFunctionDef | ast.FunctionDef]:
    tree = ast.parse((ROOT / path).read_text())
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    return {f.name: f for f in node.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}


def test_the_shard_calls_are_written_once_not_in_each_runtime() -> None:
    assert {"deliver", "widen_scope", "set_host_policy", "place", "url_status", "url_for_hash", "host_info", "vet_seeds"} <= set(COMMON)
    for path, cls in (("crawler/session/inprocess.py", "LocalRuntime"), ("actors/rayruntime.py", "RayRuntime"),
                      ("crawler/testing/sim/services.py", "SimRuntime")):
        own = _methods(path, cls)
        assert not set(COMMON) & set(own), f"{cls} writes its own {sorted(set(COMMON) & set(own))}"
        assert "_shards" in own, f"{cls} must say which shards it hands out"


def _params(fn: Any) -> list[str]:
    return [p for p in inspect.signature(fn).parameters if p != "self"]


def _ast_params(fn: ast.AsyncFunctionDef | ast.FunctionDef) -> list[str]:
    a = fn.args
    return [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs) if x.arg != "self"]


def test_the_ray_actor_answers_every_shard_call_the_proxy_makes() -> None:
    assert {"accept", "adopt", "place", "status", "shutdown", "host_info"} <= set(API)
    actor = _methods("actors/host_shard.py", "HostShard")
    for name in API:
        assert name in actor, f"HostShard lacks {name} (actors/shardproxy.py calls it)"
        assert _ast_params(actor[name]) == _params(getattr(ShardApi, name)), name
    proxy = _methods("actors/shardproxy.py", "RayShard")
    for name in API:
        body = ast.unparse(proxy[name])
        assert f"self._h.{name}.remote(" in body, f"RayShard.{name} calls another actor method"


def test_seen_stats_are_merged_the_same_way_on_both_runtimes() -> None:
    merged = merge_seen_stats(
        [{"urls": 3, "fp_rate": 0.5, "mode": "exact", "full": False}, {"urls": 4, "fp_rate": 0.25, "mode": "bloom", "full": True}],
        restored_from_out=1,
    )
    assert merged == {"urls": 7, "fp_rate": 0.75, "mode": "exact", "full": False, "restored_from_out": 1}
