"""cluster.yaml would deploy: Ray's own validator accepts it (offline), and the points a
first deployment trips on are covered: worker credentials for s3://, a Python that
satisfies requires-python, the dashboard reached through `ray dashboard`, and no .git,
.venv or outputs shipped to the nodes."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def _load() -> dict:
    return yaml.safe_load((ROOT / "cluster.yaml").read_text())


def _validate(cfg: dict) -> None:
    # What `ray up` does before it touches the cloud: defaults filled in, then the schema
    # (ray/autoscaler/ray-schema.json) checked.
    from ray.autoscaler._private.util import prepare_config, validate_config

    validate_config(prepare_config(copy.deepcopy(cfg)))


def test_rays_validator_accepts_cluster_yaml_and_rejects_a_typo():
    cfg = _load()
    _validate(cfg)
    bad = _load()
    bad["available_node_types"]["crawler"]["min_wrokers"] = 2
    with pytest.raises(Exception, match="min_wrokers"):
        _validate(bad)


def test_every_node_type_has_an_instance_profile_that_can_write_the_bucket():
    cfg = _load()
    iam = yaml.safe_load((ROOT / "deploy" / "aws-iam.yaml").read_text())["Resources"]
    profiles = {r["Properties"]["InstanceProfileName"]: r["Properties"]["Roles"][0]["Ref"]
                for r in iam.values() if r["Type"] == "AWS::IAM::InstanceProfile"}
    bucket_policy = next(k for k, r in iam.items() if r["Type"] == "AWS::IAM::ManagedPolicy")
    actions = {a for st in iam[bucket_policy]["Properties"]["PolicyDocument"]["Statement"] for a in st["Action"]}
    assert {"s3:PutObject", "s3:GetObject", "s3:ListBucket", "s3:DeleteObject"} <= actions
    for name, node_type in cfg["available_node_types"].items():
        profile = node_type["node_config"]["IamInstanceProfile"]["Name"]
        assert profile in profiles, f"{name}: instance profile {profile} is not created by deploy/aws-iam.yaml"
        role = iam[profiles[profile]]["Properties"]
        assert {"Ref": bucket_policy} in role["ManagedPolicyArns"], f"{name}: its role cannot write the bucket"
    # The head launches the workers: it may pass the worker role on.
    head = cfg["available_node_types"][cfg["head_node_type"]]["node_config"]["IamInstanceProfile"]["Name"]
    head_role = iam[profiles[head]]["Properties"]
    passes = [st for p in head_role["Policies"] for st in p["PolicyDocument"]["Statement"] if st["Action"] == "iam:PassRole"]
    assert passes and passes[0]["Resource"] == {"Fn::GetAtt": [profiles["raycrawl-worker"], "Arn"]}


def test_setup_installs_a_python_that_satisfies_requires_python_and_checks_it():
    cfg = _load()
    setup = "\n".join(cfg["setup_commands"])
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'requires-python = ">=3.11"' in pyproject
    assert "uv venv --python 3.11" in setup and "deploy/check_python.py" in setup
    for node_type in cfg["available_node_types"].values():
        assert "latest_dlami" not in str(node_type["node_config"]["ImageId"])  # Ubuntu 18.04, old Python
    check = ROOT / "deploy" / "check_python.py"
    ok = subprocess.run([sys.executable, str(check), str(ROOT / "pyproject.toml")], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr


def test_the_python_check_refuses_an_interpreter_below_requires_python(tmp_path):
    future = tmp_path / "pyproject.toml"
    future.write_text('[project]\nrequires-python = ">=3.99"\n')
    proc = subprocess.run([sys.executable, str(ROOT / "deploy" / "check_python.py"), str(future)],
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert f"is Python {sys.version_info[0]}.{sys.version_info[1]}; the project needs >= 3.99" in proc.stderr


def test_file_mounts_ship_neither_git_nor_venv_nor_outputs_and_the_dashboard_stays_private():
    cfg = _load()
    assert cfg["file_mounts"] == {"~/raycrawl": "."}
    assert cfg["file_mounts_sync_continuously"] is False
    assert ".gitignore" in cfg["rsync_filter"]
    excluded = set(cfg["rsync_exclude"])
    assert {".git", ".venv"} <= excluded
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    for pattern in (".venv/", "crawl-demo-out/", "/out/", "__pycache__/"):
        assert pattern in ignored
    # ray job submit --working-dir . uploads through .gitignore and .rayignore.
    assert ".git" in (ROOT / ".rayignore").read_text().splitlines()
    head = " ".join(cfg["head_start_ray_commands"])
    assert "--dashboard-host=0.0.0.0" not in head  # reached with `ray dashboard cluster.yaml`


def test_every_node_keeps_the_crawls_local_files_on_its_own_disk():
    # Each raylet passes RAYCRAWL_LOCAL_DIR to the workers it starts (crawler.recovery.statefiles.local_dir).
    cfg = _load()
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        start = next(c for c in cfg[key] if "ray start" in c)
        assert "export RAYCRAWL_LOCAL_DIR=" in start.split("ray start")[0], (key, start)
