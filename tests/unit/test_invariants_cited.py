"""Every invariant the code cites is one that docs/invariants.md states.

Docstrings and comments cite the crawler's invariants as ``docs/invariants.md #N``; a
citation of a number the document does not have, or of the design card outside the
repository, would send a reader nowhere.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CITED = re.compile(r"docs/invariants\.md\s+#(\d+)(?:\s+and\s+#(\d+))?")
HEADING = re.compile(r"^## (\d+)\. \S", re.MULTILINE)


def _sources() -> list[Path]:
    return [p for d in ("crawler", "actors", "jobs", "tests") for p in sorted((ROOT / d).rglob("*.py"))]


def test_the_document_numbers_its_invariants_one_to_eighteen_in_order():
    numbers = [int(n) for n in HEADING.findall((ROOT / "docs" / "invariants.md").read_text())]
    assert numbers == list(range(1, 19))


def test_every_citation_names_a_stated_invariant_and_none_cites_the_design_card():
    stated = {int(n) for n in HEADING.findall((ROOT / "docs" / "invariants.md").read_text())}
    cited: dict[int, list[str]] = {}
    outside: list[str] = []
    for path in _sources():
        text = path.read_text(encoding="utf-8")
        rel = str(path.relative_to(ROOT))
        for m in CITED.finditer(text):
            for n in filter(None, m.groups()):
                cited.setdefault(int(n), []).append(rel)
        if re.search(r"DESIGN\.md\s+invariants?\s+\d", text) and path.name != Path(__file__).name:
            outside.append(rel)
    assert outside == []
    assert set(cited) - stated == set(), {n: cited[n] for n in set(cited) - stated}
    assert len(cited) >= 10  # the code does cite them (a broken pattern would find none)
