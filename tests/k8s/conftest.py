"""Fixtures of the Kubernetes tests: the project's pinned tools, rendered charts, and a REAL control plane
(etcd + kube-apiserver + controller-manager + scheduler + kwok with 3 fake nodes on 127.0.0.1), started once per
session. Tools come from `bash scripts/install-k8s-tools.sh` (cached: seconds when warm)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from aitax.paths import PROJECT_ROOT

CHART = PROJECT_ROOT / "charts" / "aitax"
CI_VALUES = sorted((CHART / "ci").glob("*.yaml"))
TOOLS_BIN = PROJECT_ROOT / ".aitax" / "tools" / "bin"


def tool_path(name: str) -> Path:
    path = TOOLS_BIN / name
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} missing: run `bash scripts/install-k8s-tools.sh` (part of `make setup`)")
    return path


def helm(*args: str, kubeconfig: Path | None = None, check: bool = True,
         timeout_s: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "HELM_CACHE_HOME": str(PROJECT_ROOT / ".aitax" / "helm" / "cache"),
           "HELM_CONFIG_HOME": str(PROJECT_ROOT / ".aitax" / "helm" / "config"),
           "HELM_DATA_HOME": str(PROJECT_ROOT / ".aitax" / "helm" / "data")}
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    result = subprocess.run([str(tool_path("helm")), *args], capture_output=True, text=True, env=env,
                            timeout=timeout_s)
    if check and result.returncode != 0:
        pytest.fail(f"helm {' '.join(args)} failed ({result.returncode}):\n{result.stdout[-2000:]}\n"
                    f"{result.stderr[-3000:]}")
    return result


def render(*values: Path | str, sets: tuple[str, ...] = (), release: str = "t",
           namespace: str = "aitax") -> list[dict]:
    """`helm template` the chart; returns its documents (hooks and the test pod included)."""
    args = ["template", release, str(CHART), "--namespace", namespace]
    for file in values:
        args += ["-f", str(file)]
    for assignment in sets:
        args += ["--set", assignment]
    return [doc for doc in yaml.safe_load_all(helm(*args).stdout) if doc]


@pytest.fixture(scope="session")
def control_plane() -> Iterator:
    from aitax.experiment.k8s_cluster import LocalControlPlane

    for name in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "kubectl"):
        tool_path(name)
    plane = LocalControlPlane()
    plane.up()
    yield plane
    plane.down()
