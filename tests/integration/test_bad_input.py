"""Bad input to every command that takes a path, a config or an address (issue 24).

Each row is one careless operator's command line. Every one must end the same way: one
line on stderr that says what to fix, exit status 2, never a traceback, and nothing
created on disk (the whole temporary tree and the working directory are compared before
and after). The commands run as subprocesses, as an operator runs them; none of these
needs Ray, and none gets far enough to start it. Seeds point at 127.0.0.1 (port 9,
discard) so that even a broken check sends nothing beyond this machine.

The control API's side of the same table (a 400 naming the field) is in
tests/unit/test_api.py.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
GOOD_CONFIG = {"seeds": ["http://127.0.0.1:9/"]}


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _setup(tmp: Path) -> dict[str, str]:
    """The paths a row may name: some exist (made here, before the snapshot), some do not."""
    (tmp / "unrelated").mkdir()
    (tmp / "unrelated" / "notes.txt").write_text("not a crawl\n")
    (tmp / "file.txt").write_text("a regular file\n")
    (tmp / "fake.gz").write_bytes(b"\x1f\x8b" + b"this is not gzip" * 4)
    (tmp / "crawl" / "pages").mkdir(parents=True)  # a crawl output with no rows yet
    (tmp / "good.yaml").write_text(yaml.safe_dump(GOOD_CONFIG))
    (tmp / "out-is-file.yaml").write_text(yaml.safe_dump({**GOOD_CONFIG, "output": {"path": str(tmp / "file.txt")}}))
    (tmp / "latin1.yaml").write_bytes("seeds: [http://127.0.0.1:9/caf\xe9]\n".encode("latin-1"))
    (tmp / "broken.yaml").write_text("seeds: [http://127.0.0.1:9/\nlimits: {max_pages: 3\n")
    (tmp / "page.html").write_text("<a href='/x'>x</a>")
    return {
        "missing": str(tmp / "missing"),
        "typo": str(tmp / "typo"),
        "unrelated": str(tmp / "unrelated"),
        "file": str(tmp / "file.txt"),
        "fake_gz": str(tmp / "fake.gz"),
        "crawl": str(tmp / "crawl"),
        "good": str(tmp / "good.yaml"),
        "out_is_file": str(tmp / "out-is-file.yaml"),
        "latin1": str(tmp / "latin1.yaml"),
        "broken": str(tmp / "broken.yaml"),
        "page": str(tmp / "page.html"),
        "dir": str(tmp),
        "in_missing_dir": str(tmp / "missing" / "dir" / "r.html"),
        "under_file": str(tmp / "file.txt" / "out"),
    }


Row = tuple[str, Callable[[dict[str, str]], list[str]], str]

#: (id, argv after the module, a fragment the one line must contain)
ROWS: list[Row] = [
    # crawl stats / report / export-warc: the folder must hold crawl output
    ("stats-missing", lambda p: ["jobs.cli", "stats", p["missing"]], "holds no crawl output"),
    ("stats-unrelated", lambda p: ["jobs.cli", "stats", p["unrelated"]], "holds no crawl output"),
    ("stats-file", lambda p: ["jobs.cli", "stats", p["file"], "--json"], "not a folder"),
    # --json once printed zeros for a typo: the same one line, no JSON
    ("stats-missing-json", lambda p: ["jobs.cli", "stats", p["missing"], "--json"], "holds no crawl output"),
    ("report-missing", lambda p: ["jobs.cli", "report", p["missing"]], "holds no crawl output"),
    ("report-unrelated", lambda p: ["jobs.cli", "report", p["unrelated"]], "holds no crawl output"),
    ("report-file", lambda p: ["jobs.cli", "report", p["file"]], "not a folder"),
    ("report-to-missing-dir", lambda p: ["jobs.cli", "report", p["crawl"], "--to", p["in_missing_dir"]], "does not exist"),
    ("report-to-a-folder", lambda p: ["jobs.cli", "report", p["crawl"], "--to", p["unrelated"]], "is a folder"),
    ("warc-typo", lambda p: ["jobs.cli", "export-warc", p["typo"]], "holds no crawl output"),
    ("warc-unrelated", lambda p: ["jobs.cli", "export-warc", p["unrelated"]], "holds no crawl output"),
    ("warc-file", lambda p: ["jobs.cli", "export-warc", p["file"]], "not a folder"),
    ("warc-typo-json", lambda p: ["jobs.cli", "export-warc", p["typo"], "--json"], "holds no crawl output"),
    ("warc-to-missing-dir", lambda p: ["jobs.cli", "export-warc", p["crawl"], "--to", p["missing"] + "/d/x.warc.gz"], "does not exist"),
    # crawl links: a readable page file (or a URL)
    ("links-fake-gzip", lambda p: ["jobs.cli", "links", p["fake_gz"]], "not a valid gzip file"),
    ("links-directory", lambda p: ["jobs.cli", "links", p["dir"]], "is a folder"),
    ("links-missing-file", lambda p: ["jobs.cli", "links", p["missing"] + ".html"], "no such file"),
    ("links-ftp", lambda p: ["jobs.cli", "links", "ftp://127.0.0.1:9/"], "not an http(s) URL"),
    ("links-config-latin1", lambda p: ["jobs.cli", "links", p["page"], "--config", p["latin1"]], "UTF-8"),
    # crawl run / python -m jobs.crawl: the config and --out
    ("run-config-latin1", lambda p: ["jobs.cli", "run", p["latin1"], "--local", "--no-progress"], "UTF-8"),
    ("job-config-latin1", lambda p: ["jobs.crawl", p["latin1"], "--local", "--no-progress"], "UTF-8"),
    ("run-config-broken-yaml", lambda p: ["jobs.cli", "run", p["broken"], "--local", "--no-progress"], "not valid YAML"),
    ("run-set-broken-yaml", lambda p: ["jobs.cli", "run", p["good"], "--set", "limits.max_pages=[1", "--local"], "not valid YAML"),
    ("run-config-missing", lambda p: ["jobs.cli", "run", p["missing"] + ".yaml", "--local"], "cannot read"),
    ("run-config-folder", lambda p: ["jobs.cli", "run", p["unrelated"], "--local"], "cannot read"),
    ("run-out-file", lambda p: ["jobs.cli", "run", p["good"], "--out", p["file"], "--local", "--no-progress"], "not a folder"),
    ("run-out-under-file", lambda p: ["jobs.cli", "run", p["good"], "--out", p["under_file"], "--local", "--no-progress"], "not a folder"),
    ("run-config-out-file", lambda p: ["jobs.cli", "run", p["out_is_file"], "--local", "--no-progress"], "not a folder"),
    ("job-out-file", lambda p: ["jobs.crawl", p["good"], "--out", p["file"], "--local", "--no-progress"], "not a folder"),
    ("demo-out-file", lambda p: ["jobs.cli", "demo", "--out", p["file"], "--local", "--no-progress"], "not a folder"),
    # an output that cannot be written (here /proc; a read-only filesystem alike)
    ("run-out-unwritable", lambda p: ["jobs.cli", "run", p["good"], "--out", "/proc/self/crawl-out", "--local", "--no-progress"],
     "cannot write there"),
    ("job-out-unwritable", lambda p: ["jobs.crawl", p["good"], "--out", "/proc/self/crawl-out", "--local", "--no-progress"],
     "cannot write there"),
    ("demo-out-unwritable", lambda p: ["jobs.cli", "demo", "--out", "/proc/self/crawl-out", "--local", "--no-progress"],
     "cannot write there"),
    # crawl ctl: the API address
    ("ctl-api-not-a-url", lambda p: ["jobs.cli", "ctl", "--api", "notaurl", "stats"], "--api"),
    ("ctl-api-ftp", lambda p: ["jobs.cli", "ctl", "--api", "ftp://127.0.0.1:9", "stop"], "--api"),
    ("ctl-api-no-host", lambda p: ["jobs.cli", "ctl", "--api", "http://", "stats"], "--api"),
]


@pytest.mark.parametrize("row", ROWS, ids=[r[0] for r in ROWS])
def test_bad_input_is_one_line_exit_2_and_creates_nothing(tmp_path, row):
    name, argv, fragment = row
    paths = _setup(tmp_path)
    cwd = tmp_path / "cwd"  # `crawl report` writes ./crawl-report.html by default
    cwd.mkdir()
    before = _tree(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(REPO), RAY_USAGE_STATS_ENABLED="0", RAY_ADDRESS="")
    proc = subprocess.run([sys.executable, "-m", *argv(paths)], capture_output=True, text=True, cwd=cwd, env=env, timeout=120)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], proc.stderr
    assert _tree(tmp_path) == before, sorted(_tree(tmp_path) ^ before)


def test_a_crawl_output_with_no_rows_yet_is_not_bad_input(tmp_path):
    """The check is not too eager: a crawl that has made its folder but written no rows
    yet is crawl output (``crawl stats`` on a crawl that just started)."""
    out = tmp_path / "crawl"
    (out / "pages").mkdir(parents=True)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "jobs.cli", "stats", str(out)], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "crawl running or interrupted" in proc.stdout


def test_a_page_file_that_is_gzip_is_read(tmp_path):
    page = tmp_path / "page.html.gz"
    page.write_bytes(gzip.compress(b"<a href='http://127.0.0.1:9/next'>next</a>"))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "jobs.cli", "links", str(page), "--url", "http://127.0.0.1:9/"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "http://127.0.0.1:9/next" in proc.stdout


def test_a_damaged_stats_json_is_one_line_not_a_traceback(tmp_path):
    """Not the operator's typo but a damaged output (exit 1, like a ledger that does not
    balance): still one line naming the file."""
    out = tmp_path / "crawl"
    (out / "pages").mkdir(parents=True)
    (out / "stats.json").write_text('{"finished": tr')
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "jobs.cli", "stats", str(out)], capture_output=True, text=True, env=env, timeout=120)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert len(lines) == 1 and "stats.json" in lines[0], proc.stderr


def _unfinished_crawl(out: Path, damage: str) -> None:
    """An output holding an unfinished crawl of GOOD_CONFIG, its record or its shard's store damaged."""
    from crawler.config import settings as config

    state = out / "state"
    state.mkdir(parents=True)
    record = {"fingerprint": config.from_dict(GOOD_CONFIG).fingerprint(), "shards": 1, "seen_shards": 1,
              "finished": False, "runs": 1, "started_at": 0.0}
    (state / "crawl.json").write_text('{"fingerprint": ' if damage == "record" else json.dumps(record))
    if damage == "store":
        (state / "shard-000.sqlite").write_bytes(b"not a SQLite database\n" * 200)


@pytest.mark.parametrize("module", ["jobs.cli", "jobs.crawl"])
@pytest.mark.parametrize(("damage", "fragment", "fix"), [
    ("record", "the crawl record is damaged", "--force"),
    # A store that is not SQLite is rebuilt from the output's rows once removed: the fix named.
    ("store", "is not a readable frontier store", "remove it"),
])
def test_a_resume_refused_is_one_line_exit_2(tmp_path, module, damage, fragment, fix):
    """Damaged state in OUT refuses the resume like any other refusal: one line naming
    the fix, exit status 2, nothing fetched, nothing changed but the lease."""
    out = tmp_path / "out"
    _unfinished_crawl(out, damage)
    (tmp_path / "good.yaml").write_text(yaml.safe_dump(GOOD_CONFIG))
    before = {p: p.read_bytes() for p in (out / "state").iterdir()}
    argv = ["run"] if module == "jobs.cli" else []
    env = dict(os.environ, PYTHONPATH=str(REPO), RAY_USAGE_STATS_ENABLED="0", RAY_ADDRESS="")
    proc = subprocess.run([sys.executable, "-m", module, *argv, str(tmp_path / "good.yaml"), "--out", str(out), "--local",
                           "--no-progress"], capture_output=True, text=True, env=env, timeout=120)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0] and fix in lines[0], proc.stderr
    assert not (out / "pages").exists()
    assert all(p.read_bytes() == data for p, data in before.items() if p.name != "crawl.json")
