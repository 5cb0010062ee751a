"""Ctrl-C while a crawl is still starting (Ray coming up, actors being placed) stops it at
once: the start is cancelled where it waits, what was created is closed, the output's
lease released, and the run exits 130 with one line; no second Ctrl-C is needed.

A real SIGINT to this process, delivered while the runtime's start waits for actors that
are never placed; no Ray (tests/integration/test_render_ray.py does it to `crawl run`)."""

from __future__ import annotations

import asyncio
import os
import signal
import threading

import pytest

from crawler.config import settings as config
from crawler.clock import SYSTEM_CLOCK
from crawler.recovery.lease import Lease, LeaseStore
from crawler.session.crawlsession import CrawlSession
from jobs import crawl as crawl_mod


class NeverPlaced:
    """A runtime whose actors are never placed: start() waits forever, after sending
    this process a SIGINT (as a user pressing Ctrl-C during the wait)."""

    def __init__(self) -> None:
        self.started = self.closed = False

    def default_shards(self, cfg):
        return 1, 1

    async def start(self, plan):
        self.started = True
        asyncio.get_running_loop().call_soon(os.kill, os.getpid(), signal.SIGINT)
        await asyncio.Event().wait()

    async def heartbeat(self):
        return None

    async def close(self):
        self.closed = True


@pytest.mark.timeout(60)  # before the fix this waited forever
def test_ctrl_c_while_actors_are_being_placed_stops_at_once(tmp_path, monkeypatch, capsys):
    cfg = config.from_dict({"seeds": ["http://a.test/"], "output": {"path": str(tmp_path / "out")}})
    runtime = NeverPlaced()

    def make_session(cfg, *, local, address, **kw):
        return CrawlSession(cfg, runtime, **kw)

    monkeypatch.setattr(crawl_mod, "make_session", make_session)
    stats, code = crawl_mod.run_crawl(cfg, progress=False)
    assert runtime.started and runtime.closed
    assert (stats, code) == ({"stopped_during_start": True}, 130)
    err = capsys.readouterr().err
    assert "stopping: the crawl was still starting; nothing was fetched" in err
    assert "Ctrl-C again" not in err  # one Ctrl-C was enough
    # The lease is released: a run right after this one takes the output at once (a
    # lease still held by this live process would be refused, OutputLeasedError).
    assert LeaseStore(cfg.output.path, None).read().released
    assert asyncio.run(Lease(LeaseStore(cfg.output.path, None), 15.0, clock=SYSTEM_CLOCK).acquire()) == 2
    crawl_mod.print_summary(stats, cfg.output.path)
    assert capsys.readouterr().out.startswith("crawl stopped while starting: nothing was fetched")


class BlockingStart(NeverPlaced):
    """A runtime whose Ray start blocks the event loop (ray.init on a busy machine takes
    seconds to tens of them) and never returns; a Ctrl-C arrives meanwhile."""

    def default_shards(self, cfg):
        from actors.rayruntime import _ctrl_c_interrupts

        self.started = True
        with _ctrl_c_interrupts():  # what RayRuntime wraps its ray.init in
            os.kill(os.getpid(), signal.SIGINT)
            threading.Event().wait()  # blocks this thread: the loop cannot run a handler
        return 1, 1


@pytest.mark.timeout(60)  # without the wrapper the Ctrl-C waited for the blocked start
def test_ctrl_c_while_the_embedded_ray_starts_stops_at_once(tmp_path, monkeypatch, capsys):
    cfg = config.from_dict({"seeds": ["http://a.test/"], "output": {"path": str(tmp_path / "out")}})
    runtime = BlockingStart()

    def make_session(cfg, *, local, address, **kw):
        return CrawlSession(cfg, runtime, **kw)

    monkeypatch.setattr(crawl_mod, "make_session", make_session)
    stats, code = crawl_mod.run_crawl(cfg, progress=False)
    assert runtime.started and (stats, code) == ({"stopped_during_start": True}, 130)
    assert "stopping: the crawl was still starting; nothing was fetched" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # every handler put back
