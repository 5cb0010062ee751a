"""`crawl report OUT --to report.html`: one self-contained page whose charts render in a
real browser. Headless Chromium (Debian's ``chromium``) takes a screenshot and every
chart's own colour must cover a real area of it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from jobs import cli
from jobs.report import CHART_COLORS, DUP_COLORS, OUTCOME_COLORS

from tests.unit.reportkit import make_output


def _chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (.ci/run installs Debian's chromium package)")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return exe


def _rgb(hex_color: str) -> tuple[int, int, int]:
    return tuple(int(hex_color[i:i + 2], 16) for i in (1, 3, 5))  # type: ignore[return-value]


def test_the_report_is_self_contained_and_its_charts_render_in_chromium(tmp_path, capsys):
    from PIL import Image

    exe = _chromium()
    out = make_output(tmp_path)
    page = tmp_path / "report.html"
    assert cli.main(["report", out, "--to", str(page)]) == 0
    html = page.read_text()
    # Nothing to fetch: no script, no external resource of any kind.
    assert "<script" not in html and not re.search(r"""(src|href)=["']?(https?:)?//""", html)
    charts = re.findall(r'data-chart="([a-z-]+)"', html)
    assert charts == ["pages-per-second", "outcome-mix", "status-codes", "top-hosts-pages", "top-hosts-errors",
                      "duplicate-share", "politeness-waits"]

    shot = tmp_path / "shot.png"
    proc = subprocess.run(
        [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
         f"--user-data-dir={tmp_path / 'profile'}", "--window-size=820,3200", f"--screenshot={shot}", page.as_uri()],
        capture_output=True, text=True, timeout=60,
    )
    assert shot.exists(), proc.stderr[-2000:]
    pixels = np.asarray(Image.open(shot).convert("RGB"), dtype=np.int16)

    def area(hex_color: str) -> int:
        return int((np.abs(pixels - np.array(_rgb(hex_color), dtype=np.int16)).sum(axis=2) <= 12).sum())

    # Every chart's marks are on screen: bars, the line, every outcome present, the duplicate parts.
    drawn = {name: area(c) for name, c in CHART_COLORS.items()}
    drawn.update({f"outcome:{o}": area(OUTCOME_COLORS[o]) for o in ("fetched", "http_error", "failed", "robots_blocked")})
    drawn.update({f"dup:{k}": area(c) for k, c in DUP_COLORS.items()})
    missing = {k: v for k, v in drawn.items() if v < 150}
    assert not missing, f"charts without their marks in the screenshot (pixels): {missing}"
    # The 404 host bars: four hosts have errors, each drawn.
    assert "a.test" in html and "404" in html
