"""Unit tier: Ray is forbidden here. Policy objects are tested without Ray or sockets to the web."""
import pytest


@pytest.fixture(autouse=True)
def _refuse_ray(monkeypatch):
    try:
        import ray
    except ImportError:  # pragma: no cover - ray is a hard dependency
        return

    def refuse(*args, **kwargs):
        raise RuntimeError("unit tests must not start Ray; move this test to tests/integration")

    monkeypatch.setattr(ray, "init", refuse)
