"""One small crawl as a user runs it, for tests/integration/test_no_egress.py.

    python -m tests.integration.egress_crawl WORKDIR

serves a small synthetic web on 127.0.0.1, writes WORKDIR/crawl.yaml for it, and runs
``python -m jobs.cli run WORKDIR/crawl.yaml --out WORKDIR/out --no-progress`` (the
``crawl run`` command, on the embedded Ray, with the environment it was given); exits
with that command's status. The test runs it inside crawler.testing.egress's namespace,
so the web is served there too.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from crawler.testing.fixtures import crawl_config_for, running_web

#: Small enough for one quick crawl, with a few hosts so several shards have work.
HOSTS, PAGES_PER_HOST = 3, 6


def main(workdir: str) -> int:
    work = Path(workdir)
    with running_web(seed=0, profile="test", hosts=HOSTS, pages_per_host=PAGES_PER_HOST) as server:
        cfgfile = work / "crawl.yaml"
        cfgfile.write_text(yaml.safe_dump(crawl_config_for(server)))
        run = [sys.executable, "-m", "jobs.cli", "run", str(cfgfile), "--out", str(work / "out"), "--no-progress"]
        code = subprocess.run(run, timeout=600).returncode
        print(f"requests served: {len(server.requests())}", flush=True)
        return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
