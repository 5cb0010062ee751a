"""Shared builders for the output tests: rows the way the engine hands them over."""

from __future__ import annotations

import datetime as dt
import hashlib
import contextlib
import os
from typing import Any

import pytest

from crawler.output import OutcomeRow, open_fs

T0 = dt.datetime(2024, 5, 1, 12, 0, 0, tzinfo=dt.timezone.utc)


def sha(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def page(url: str, body: bytes | None = None, **extra) -> tuple[OutcomeRow, dict[str, bytes]]:
    """A fetched row (and its body mapping) the way the engine would hand it over."""
    fields: dict[str, Any] = {"url": url, "host": url.split("/")[2], "outcome": "fetched", "status": 200,
              "fetched_at": T0}
    bodies = {}
    if body is not None:
        fields["content_sha256"] = sha(body)
        fields["content_length"] = len(body)
        bodies = {sha(body): body}
    fields.update(extra)
    return OutcomeRow(**fields), bodies


def part_files(out) -> list[str]:
    pages = os.path.join(out, "pages")
    if not os.path.isdir(pages):
        return []
    return sorted(n for n in os.listdir(pages) if n.startswith("part-"))


def s3_keys(out: str, opts: dict) -> list[str]:
    fs, root = open_fs(out, opts)
    fs.invalidate_cache()
    return sorted(p[len(root) + 1:] for p in fs.find(root))


class Killed(BaseException):
    """Stands for the process dying: no cleanup code gets to run."""


@contextlib.contextmanager
def dies_before_rename(monkeypatch):
    """The body's write dies between writing its temp file and the rename (or unlink)
    that would publish or clean it; afterwards the file system works again."""

    def die(*a, **k):
        raise Killed

    monkeypatch.setattr(os, "replace", die)
    monkeypatch.setattr(os, "unlink", die)
    with pytest.raises(Killed):
        yield
    monkeypatch.undo()

