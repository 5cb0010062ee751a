"""notebooks/interactive_crawl.ipynb runs top to bottom in a Jupyter kernel (nbclient), on
embedded Ray against the synthetic web, as a user would run it; any cell error fails.

The notebook is committed without outputs; the test runs it with a small web and a short
first watch (the knobs of its first cell, set through the environment).
"""

from __future__ import annotations

import os
import re
import secrets
import tempfile
from pathlib import Path

import pytest

from tests.integration.procs import _kill_leftovers

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "interactive_crawl.ipynb"


def _text(cell) -> str:
    out = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream":
            out.append(o["text"])
        elif "data" in o:
            out.append(o["data"].get("text/plain", ""))
    return "".join(out)


def test_the_notebook_is_committed_without_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, cell.source[:60]


def test_the_notebook_runs_top_to_bottom(tmp_path, monkeypatch):
    out = tmp_path / "notebook-out"
    ray_tmp = tempfile.mkdtemp(prefix="raynb-", dir="/tmp")
    # The kernel inherits these: a small web, a short first watch, its own Ray temp dir.
    for k, v in {"NOTEBOOK_WEB_PROFILE": "test", "NOTEBOOK_INTERVAL_S": "0.1", "NOTEBOOK_WATCH_S": "3",
                 "NOTEBOOK_OUT": str(out), "RAY_TMPDIR": ray_tmp, "RAY_USAGE_STATS_ENABLED": "0",
                 "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
                 # the embedded Ray's token: the test's own, never the machine's ~/.ray/auth_token
                 "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32), "MPLBACKEND": "module://matplotlib_inline.backend_inline"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    root = str(NOTEBOOK.parents[1])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=240, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    try:
        client.execute()  # raises CellExecutionError on the first cell that fails
    finally:
        _kill_leftovers(ray_tmp)
    code = [c for c in nb.cells if c.cell_type == "code"]
    text = "\n".join(_text(c) for c in code)
    # Watched live, plotted, steered, read while running, stopped cleanly with a balanced ledger.
    assert sum(1 for c in code for o in c.outputs if "image/png" in o.get("data", {})) >= 2
    # The second site's three seeds were new; its paused host held work until unpaused.
    assert "add_seeds: {'accepted': 3, 'already_seen': 0, 'refused': 0}" in text
    assert "the paused host's root: pending" in text
    assert re.search(r"paused: [1-9]\d* queued URLs on 1 host", text)
    assert re.search(r"\d+ rows so far", text)
    assert "finished: True" in text
    assert re.search(r"ledger: admitted \d+ = rows \d+ \+ dropped \d+ \+ queued 0 .*: OK", text), text[-2000:]
    paused_rows = int(re.search(r"the paused host's rows: (\d+)", text).group(1))
    assert paused_rows > 0  # unpaused, its pages were fetched
    assert (out / "stats.json").exists()
