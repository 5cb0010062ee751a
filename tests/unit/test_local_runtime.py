"""The in-process runtime fails a run the way the Ray runtime does (crawler.session.inprocess)."""

from __future__ import annotations

import asyncio

import pytest

from crawler.config import settings as config
from crawler.engine.dispatcher import Dispatcher
from crawler.errors import ShardFailedError
from crawler.session.inprocess import local_session
from tests.unit.doubles import NoFetches


def test_a_shard_whose_loop_dies_fails_the_run_with_shard_failed_error(tmp_path, monkeypatch) -> None:
    """A shard's loop that raises is named in its status (``error``), and the session stops
    the run with ShardFailedError: on Ray the ShardServer reports it so; in process the raw
    exception used to escape instead, a drift between the runtimes."""

    async def dies(self: Dispatcher) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(Dispatcher, "run", dies)
    cfg = config.from_dict({"seeds": ["http://a.test/"], "output": {"path": str(tmp_path / "out")}})
    session = local_session(cfg, fetcher_factory=NoFetches, durable=False)
    with pytest.raises(ShardFailedError, match=r"shard-000 failed: RuntimeError\('boom'\)"):
        asyncio.run(session.run())
