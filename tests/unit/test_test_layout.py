"""The tests' own shape: no module under tests/ imports a test module (``test_*.py``).

Importing one test module from another ties the two files together (an edit to one
breaks the other, and pytest sees the imported names twice); what several files share
lives in a kit instead: tests/unit/doubles.py for the stand-ins of a shard's and a
session's collaborators, tests/unit/statekit.py, seen_kit.py, reportkit.py, http_kit.py,
tests/fuzz/properties.py and tests/integration/chromium.py.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _is_test_module(dotted: str) -> bool:
    return dotted.rsplit(".", 1)[-1].startswith("test_")


def imports_of_test_modules(source: str) -> list[str]:
    """The test modules ``source`` imports, as written (``tests.unit.test_x``, ``.test_x``)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if _is_test_module(a.name)]
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            if node.module and _is_test_module(node.module):
                found.append(module)
            else:  # ``from tests.unit import test_x``, ``from . import test_x``
                sep = "" if module.endswith(".") else "."
                found += [f"{module}{sep}{a.name}" for a in node.names if _is_test_module(a.name)]
    return found


def test_the_finder_sees_every_spelling_of_a_test_module_import() -> None:
    source = (
        "import tests.unit.test_a\n"
        "from tests.unit.test_b import x\n"
        "from .test_c import y\n"
        "from tests.unit import test_d, doubles\n"
        "from . import test_e\n"
        "from .. import test_f\n"
        "from tests.unit.doubles import MemorySeen\n"
        "from tests.unit.statekit import open_on\n"
        "import pytest\n"
    )
    assert imports_of_test_modules(source) == [
        "tests.unit.test_a", "tests.unit.test_b", ".test_c", "tests.unit.test_d", ".test_e", "..test_f",
    ]


def test_no_module_under_tests_imports_a_test_module() -> None:
    offenders = {
        str(path.relative_to(TESTS.parent)): found
        for path in sorted(TESTS.rglob("*.py"))
        if (found := imports_of_test_modules(path.read_text(encoding="utf-8")))
    }
    assert not offenders, (
        "test modules import other test modules; move what they share to a kit "
        f"(tests/unit/doubles.py for shard and session stand-ins): {offenders}"
    )
