"""Ray's actor classes as the type checker should see them.

``@ray.remote`` turns a class into an actor class (``.options(...)``, ``.remote(...)``),
but mypy keeps seeing the plain class a decorator returns, and Ray's own annotations are
not followed (pyproject.toml: its handles are dynamic). :func:`remote_class` says so at the
few places an actor is created; every call to a running actor goes through a typed
wrapper (actors/shardproxy.py, actors/serviceactors.call_service).
"""

from __future__ import annotations

from typing import Any


def remote_class(cls: type) -> Any:
    """``cls`` as Ray's decorator made it: an actor class, untyped."""
    return cls
