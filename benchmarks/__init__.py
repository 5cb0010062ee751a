"""Throughput, politeness, memory and scale benchmarks (not part of the pytest suite).

Each module is one command (``python -m benchmarks.<name> --help``); see README.md.
"""
