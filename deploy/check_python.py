"""Fail a cluster node's setup at once if its Python does not satisfy requires-python.

    python deploy/check_python.py pyproject.toml

cluster.yaml runs this with the node's venv Python before installing the project, so a
wrong interpreter stops `ray up` with one line naming the versions instead of a pip
resolver error (or a cluster whose nodes disagree). Standard library only, and it runs
on old Pythons too (no tomllib): it reads the one ``requires-python = ">=X.Y"`` line.
"""

import re
import sys


def required(pyproject_text):
    """The minimum (major, minor) of ``requires-python = ">=X.Y"``; ValueError otherwise."""
    m = re.search(r'^requires-python\s*=\s*"\s*>=\s*(\d+)\.(\d+)[^"]*"', pyproject_text, re.M)
    if m is None:
        raise ValueError('no requires-python = ">=X.Y" line in pyproject.toml')
    return int(m.group(1)), int(m.group(2))


def main(argv):
    path = argv[1] if len(argv) > 1 else "pyproject.toml"
    with open(path) as f:
        need = required(f.read())
    have = sys.version_info[:2]
    if have < need:
        print("error: %s is Python %d.%d; the project needs >= %d.%d (pyproject.toml requires-python)"  # noqa: T201 - a command-line check prints its verdict
              % (sys.executable, have[0], have[1], need[0], need[1]), file=sys.stderr)
        return 1
    print("python %d.%d satisfies requires-python >= %d.%d" % (have + need))  # noqa: T201 - a command-line check prints its verdict
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
