"""Whether the render tests can run here: they drive the system's Chromium, which
``.ci/run`` installs; elsewhere they are skipped, not failed (on CI a missing browser is
a failure)."""

from __future__ import annotations

import os
import shutil

import pytest

from crawler.render.browser import CANDIDATES

NEEDS_CHROMIUM = pytest.mark.skipif(
    not any(shutil.which(c) for c in CANDIDATES) and os.environ.get("CI") != "true",
    reason="no Chromium on PATH (apt-get install chromium); CI installs it",
)
