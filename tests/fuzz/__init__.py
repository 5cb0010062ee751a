"""Long-running fuzzing on demand: ``python -m tests.fuzz.run --minutes 3 --target all``.

Not collected by pytest (no ``test_*.py`` here); the properties it runs live in
``tests/fuzz/properties.py``, and ``tests/unit/test_fuzz_properties.py`` runs them in CI
with small budgets.
"""
