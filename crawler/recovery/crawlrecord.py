"""Resuming a crawl: what ``OUT/state/crawl.json`` says about an output folder.

``crawl run CONFIG --out OUT`` looks here first:

* no record: a new crawl;
* a record of an unfinished crawl with the same config fingerprint: resume it (the
  shards reopen their durable stores under the state folder, with the shard count the
  crawl started with, since hosts are owned by shard);
* a finished crawl: say so and exit 0 (with ``recrawl.enabled``: continue it, refreshing);
* a different config: refuse, unless ``--force`` (then the old state is set aside).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from crawler.config.settings import CrawlConfig
from crawler.errors import OutputExistsError, RefusedError, StorageError
from crawler.recovery.statefiles import here, state_dir
from crawler.output import open_fs
from crawler.output.fs import retried


@dataclass
class CrawlRecord:
    """The durable facts about one crawl in an output folder."""

    fingerprint: str
    shards: int
    seen_shards: int
    finished: bool = False
    runs: int = 1
    started_at: float = field(default_factory=time.time)
    finished_at: float | None = None


def _record_path(cfg: CrawlConfig) -> tuple[Any, str]:
    fs, root = open_fs(cfg.output.path, dict(cfg.output.storage_options) or None)
    return fs, f"{root.rstrip('/')}/state/crawl.json"


def crawl_state_dir(cfg: CrawlConfig) -> str:
    """The folder with this crawl's SQLite stores, as a spec each process resolves on its
    own node (crawler.recovery.statefiles.here)."""
    return state_dir(cfg.output.path, cfg.runtime.state_dir, cfg.fingerprint())


def load_record(cfg: CrawlConfig) -> CrawlRecord | None:
    fs, path = _record_path(cfg)

    def read() -> bytes | None:
        try:
            data: bytes = fs.cat_file(path)  # fsspec has no types
            return data
        except FileNotFoundError:
            return None

    raw = retried(read, f"reading {path}")  # a passing failure of the store is not a refusal
    if raw is None:
        return None
    try:
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, got {type(data).__name__}")
        return CrawlRecord(**{k: v for k, v in data.items() if k in CrawlRecord.__dataclass_fields__})
    except (ValueError, TypeError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise RefusedError(
            f"{path}: the crawl record is damaged ({exc}); restore it, or start over in this output with --force"
        ) from exc


def save_record(cfg: CrawlConfig, rec: CrawlRecord) -> None:
    fs, path = _record_path(cfg)
    fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    tmp = path + ".tmp"

    def write() -> None:
        with fs.open(tmp, "w") as f:
            json.dump(asdict(rec), f, indent=2)
        fs.mv(tmp, path)

    retried(write, f"writing {path}")


def _start_over(cfg: CrawlConfig) -> None:
    """``--force``: remove the other crawl's rows, bodies, stats and state from OUT (and
    its local state), keeping only the lease this run already holds."""
    fs, root = open_fs(cfg.output.path, dict(cfg.output.storage_options) or None)
    root = root.rstrip("/")
    for name in ("pages", "blobs"):
        if fs.exists(f"{root}/{name}"):
            fs.rm(f"{root}/{name}", recursive=True)
    if fs.exists(f"{root}/stats.json"):
        fs.rm(f"{root}/stats.json")
    if fs.exists(f"{root}/state"):
        for path in fs.ls(f"{root}/state", detail=False):
            if path.rsplit("/", 1)[-1] not in ("lease.json", "epochs"):  # the lease this run holds
                fs.rm(path, recursive=True)
    local = here(crawl_state_dir(cfg))  # this machine's cache of it, for a remote output
    if os.path.isdir(local):
        for name in os.listdir(local):
            if name != "lease.json":
                target = os.path.join(local, name)
                shutil.rmtree(target) if os.path.isdir(target) else os.remove(target)


def prepare(cfg: CrawlConfig, shards: int, seen_shards: int, *, force: bool = False) -> tuple[CrawlRecord, str]:
    """Decide new / resume / finished / refuse for this output. Returns (record, mode).

    mode is "new", "resume" or "finished". Raises :class:`OutputExistsError` when the
    folder holds a crawl of a different config and ``force`` is not set.
    """
    try:
        rec = load_record(cfg)
    except StorageError:
        if not force:
            raise
        rec = CrawlRecord("damaged", shards, seen_shards)  # --force: start over below
    fp = cfg.fingerprint()
    if rec is not None and rec.fingerprint != fp:
        if not force:
            raise OutputExistsError(
                f"{cfg.output.path} holds a crawl made with a different config (fingerprint {rec.fingerprint}, "
                f"this config {fp}); use another --out, or --force to start over in it"
            )
        _start_over(cfg)
        rec = None
    if rec is None:
        rec = CrawlRecord(fp, shards, seen_shards)
        save_record(cfg, rec)
        return rec, "new"
    if rec.finished and not cfg.recrawl.enabled:
        return rec, "finished"
    # An unfinished crawl resumes; with recrawl on, a finished one continues: its pages
    # come due for refresh (a continuous crawl is never "done").
    rec.finished = False
    rec.runs += 1
    save_record(cfg, rec)
    return rec, "resume"


def mark_finished(cfg: CrawlConfig, rec: CrawlRecord) -> None:
    rec.finished = True
    rec.finished_at = time.time()
    save_record(cfg, rec)
