"""A Ray head that sends nothing off the machine (docs/invariants.md #18).

``RAY_USAGE_STATS_ENABLED=0`` alone does not make a Ray head quiet (Ray 2.60, read in
``ray/dashboard/modules/usage_stats/usage_stats_head.py`` and ``ray/_common/usage/usage_lib.py``):

- Every head starts an API server process, and with ``include_dashboard=False`` that
  process loads one module only, ``UsageStatsHead`` (``services.start_api_server``
  passes ``--modules-to-load=UsageStatsHead``). Its ``run()`` calls
  ``get_cluster_config_to_report`` *before* it checks whether usage stats are enabled,
  and without ``~/ray_bootstrap_config.yaml`` (which only an autoscaler head has) that
  probes cloud metadata: ``GET http://169.254.169.254/metadata/instance`` (Azure),
  ``http://metadata.google.internal/computeMetadata/v1`` (a DNS lookup, then GCP) and
  ``http://169.254.169.254/latest/meta-data/`` (AWS), on every start.
- A head started by ``ray start`` or ``ray.cluster_utils.Cluster`` (not ``ray.init``)
  with usage stats disabled then POSTs a "usage stats disabled" notice to
  ``https://usage-stats.ray.io/``.
- ``ray.init(_node_ip_address="127.0.0.1")`` swaps 127.0.0.1 for the machine's address
  unless RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER was 0 when ``ray`` was imported; the GCS,
  raylet and workers then listen on every interface, the agents on the machine's address.

Ray has no setting that turns the probe off. So a head started here, with usage stats
disabled, gets no API server process at all (:func:`quiet_head`): with the
dashboard off it would run nothing but those calls, and Ray already runs on when that
process fails to start. ``RAY_USAGE_STATS_REPORT_URL=file:///dev/null`` (Ray's own
override of the report address) sends the notice, where a head still has an API
server, to a URL ``requests`` refuses before it opens a socket. A head that needs the
dashboard (the jobs API) gets a ``HOME`` holding an empty ``ray_bootstrap_config.yaml``
(:func:`dashboard_home`), as Ray's own usage-stats tests do.

    python -m actors.quietray start --head --include-dashboard false ...

is the ``ray`` command with these settings. Importing this module does not import Ray.
"""

from __future__ import annotations

import logging
from typing import Any
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger(__name__)

#: The environment of a quiet loopback Ray: of every process that starts or joins one.
QUIET_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    # The "usage stats disabled" notice of a `ray start` head goes nowhere: requests has
    # no adapter for file:, so it fails before any socket (and past any proxy setting).
    "RAY_USAGE_STATS_REPORT_URL": "file:///dev/null",
    # Keeps a node given 127.0.0.1 on 127.0.0.1 (else Ray takes the machine's address).
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
}

#: ``ray.init`` arguments of an embedded head: every process on 127.0.0.1, no dashboard.
INIT_KWARGS = {"_node_ip_address": "127.0.0.1", "include_dashboard": False}
#: The same for ``ray.cluster_utils.Cluster`` head and worker node arguments.
NODE_KWARGS = {"node_ip_address": "127.0.0.1", "include_dashboard": False}


def _opted_in(env: Mapping[str, str]) -> bool:
    """A user who set RAY_USAGE_STATS_ENABLED=1 chose to send Ray usage stats: that choice
    (and Ray's report address with it) is kept."""
    return env.get("RAY_USAGE_STATS_ENABLED") == "1"


def quiet_env(base: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
    """``base`` (default ``os.environ``) with :data:`QUIET_ENV` over it, then ``extra``: the
    environment of a process that the tests, benchmarks or demo start and that starts or
    joins a loopback Ray (they send nothing, whatever the shell set)."""
    return {**(os.environ if base is None else base), **QUIET_ENV, **extra}


def use_quiet_env() -> None:
    """Set :data:`QUIET_ENV` in this process's environment, keeping what the user set
    (Ray's processes inherit it from the process that starts them)."""
    if _opted_in(os.environ):
        return
    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)


@contextmanager
def quiet_head() -> Iterator[None]:
    """While open, a Ray head started in this process (``ray.init``, ``Cluster``, ``ray
    start``) is a quiet loopback head: :data:`QUIET_ENV` set, its node on 127.0.0.1, and
    no API server process unless it is asked for the dashboard or usage stats are on (the
    user then asked for what that process sends).

    ``ray.init(_node_ip_address="127.0.0.1")`` alone does not keep a node on loopback:
    Ray swaps 127.0.0.1 for the machine's address unless RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER
    was 0 when ``ray`` was first imported (``services.resolve_ip_for_localhost`` reads
    ``ray_constants.ENABLE_RAY_CLUSTER``), and a program may import Ray before it starts a
    head; so the constant says what that variable says while the head starts."""
    use_quiet_env()
    from ray._private import ray_constants, services

    real_start, real_cluster = getattr(services, "start_api_server", None), ray_constants.ENABLE_RAY_CLUSTER
    if real_start is None:  # tests/unit/test_quietray.py fails on such a Ray; a user's crawl runs on
        log.warning("this Ray starts its API server elsewhere: the head may probe cloud metadata")

    def no_api_server(include_dashboard: bool | None, *args: Any, **kwargs: Any) -> Any:
        if include_dashboard is not False and real_start is not None:  # the dashboard, or Ray's choice: as Ray would
            return real_start(include_dashboard, *args, **kwargs)
        return None, None  # (dashboard URL, process): Ray runs on without one

    ray_constants.ENABLE_RAY_CLUSTER = False
    if real_start is not None and not _opted_in(os.environ):
        services.start_api_server = no_api_server
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = real_cluster
        if real_start is not None:
            services.start_api_server = real_start


def dashboard_home(directory: str | os.PathLike[str]) -> dict[str, str]:
    """The environment entries that keep a head *with* a dashboard from probing cloud
    metadata: ``HOME`` at ``directory``, which gets an empty ``ray_bootstrap_config.yaml``
    (UsageStatsHead reads it instead of asking the cloud). Every process of that head
    sees this HOME, so it suits a throwaway test head (with ``RAY_AUTH_TOKEN`` set, so no
    token is looked up under HOME), not a user's."""
    home = Path(directory)
    home.mkdir(parents=True, exist_ok=True)
    (home / "ray_bootstrap_config.yaml").write_text("{}\n")
    return {"HOME": str(home)}


def main(argv: list[str] | None = None) -> int:
    """The ``ray`` command line, with the quiet environment and no API server for a head
    without the dashboard."""
    use_quiet_env()
    from ray.scripts.scripts import main as ray_main

    sys.argv = ["ray", *(sys.argv[1:] if argv is None else argv)]
    with quiet_head():
        try:
            ray_main()
        except SystemExit as exc:  # click ends with sys.exit
            return int(exc.code or 0) if not isinstance(exc.code, str) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
