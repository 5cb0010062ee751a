"""Where the tests find the real-page corpus, and what they do without it.

The corpus (saved real pages and their ``manifest.jsonl``) is not in the repository. It
is found in exactly two places, in this order:

1. ``$CRAWLER_CORPUS``, when set (and then only there);
2. ``../shared/corpus`` beside the checkout, where the project's shared folder sits
   next to a clone.

Without it, the tests that read it skip with a reason saying how to get it, except under
CI (``CI=true``), where ``test_corpus_is_available`` fails instead: a CI run that
silently skipped the real-page checks would prove nothing about real pages.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_CORPUS = ROOT.parent / "shared" / "corpus"
HOW_TO_GET = (
    "set CRAWLER_CORPUS to a folder with manifest.jsonl, or place the shared folder "
    "beside the checkout (../shared/corpus)"
)


def in_ci() -> bool:
    """True when the CI environment variable says so (``CI=true``, as CI services set)."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


@cache
def corpus_dir() -> Path | None:
    """The corpus folder (it has a ``manifest.jsonl``), or None when there is none."""
    env = os.environ.get("CRAWLER_CORPUS")
    path = Path(env) if env else SHARED_CORPUS
    return path if (path / "manifest.jsonl").is_file() else None


def missing_reason() -> str:
    """Why the corpus was not found, and how to get it (one line)."""
    env = os.environ.get("CRAWLER_CORPUS")
    where = f"CRAWLER_CORPUS={env!r} has no manifest.jsonl" if env else f"nothing at {SHARED_CORPUS}"
    return f"real-page corpus not found ({where}): {HOW_TO_GET}"


def require_corpus() -> Path:
    """The corpus folder; without one the calling test skips (under CI,
    ``test_corpus_is_available`` is the test that fails)."""
    root = corpus_dir()
    if root is None:
        pytest.skip(missing_reason())
    return root
