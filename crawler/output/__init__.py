"""TEMPORARY bridge until the output package lands (replaced by the h/output-pkg branch)."""
from __future__ import annotations

import dataclasses
from datetime import datetime

from crawler.storage import BlobStore, ResultWriter, OUTCOMES, open_fs  # noqa: F401
from crawler.dataset import compact_pages, read_pages, summarize  # noqa: F401


@dataclasses.dataclass(frozen=True, slots=True)
class OutcomeRow:
    url: str
    host: str
    depth: int
    status: int | None
    outcome: str
    error: str | None
    attempts: int
    fetched_at: datetime
    content_type: str | None
    content_length: int | None
    content_sha256: str | None
    simhash: int | None
    dup_kind: str | None
    dup_of: str | None
    blob_key: str | None
    etag: str | None
    last_modified: str | None
    redirect_to: str | None
    truncated: bool
    shard: str
    referrer: str | None

    def items(self):
        return [(f.name, getattr(self, f.name)) for f in dataclasses.fields(self)]
