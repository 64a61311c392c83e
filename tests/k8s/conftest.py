"""Fixtures of the Kubernetes tests: the project's pinned tools, rendered charts, and a REAL control plane
(etcd + kube-apiserver + controller-manager + scheduler + kwok with 4 fake nodes on 127.0.0.1), started once per
session. Tools come from `bash scripts/install-k8s-tools.sh` (cached: seconds when warm)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from aitax.common.paths import PROJECT_ROOT

CHART = PROJECT_ROOT / "charts" / "aitax"
CI_VALUES = sorted((CHART / "ci").glob("*.yaml"))
TOOLS_BIN = PROJECT_ROOT / ".aitax" / "tools" / "bin"
# prometheus-operator's CRDs for the chart's ServiceMonitor/PodMonitor (scripts/install-k8s-tools.sh).
OPERATOR_CRDS = PROJECT_ROOT / ".aitax" / "tools" / "crds"


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


def operator_crd_files() -> list[Path]:
    files = sorted(OPERATOR_CRDS.glob("monitoring.coreos.com_*.yaml"))
    if not files:
        pytest.fail(f"no CRDs in {OPERATOR_CRDS}: run `bash scripts/install-k8s-tools.sh` (part of `make setup`)")
    return files


def _strict(schema: dict) -> dict:
    """The CRD's structural schema as the API server enforces it with strict field validation: an object that
    lists its properties (and does not preserve unknown fields) takes no others."""
    if isinstance(schema, dict):
        schema = {key: _strict(value) for key, value in schema.items()}
        if ("properties" in schema and "additionalProperties" not in schema
                and not schema.get("x-kubernetes-preserve-unknown-fields")):
            schema["additionalProperties"] = False
    elif isinstance(schema, list):
        schema = [_strict(item) for item in schema]
    return schema


def validate_custom_resource(doc: dict) -> None:
    """Validate a prometheus-operator resource offline against its CRD's schema; raises jsonschema's error."""
    import jsonschema

    group, version = doc["apiVersion"].split("/")
    for file in operator_crd_files():
        crd = yaml.safe_load(file.read_text())
        if crd["spec"]["group"] == group and crd["spec"]["names"]["kind"] == doc["kind"]:
            served = next(v for v in crd["spec"]["versions"] if v["name"] == version and v["served"])
            schema = _strict(served["schema"]["openAPIV3Schema"])
            schema["properties"]["metadata"] = {"type": "object"}  # ObjectMeta: checked by the API server itself
            jsonschema.validate(doc, schema)
            return
    pytest.fail(f"no CRD in {OPERATOR_CRDS} serves {doc['apiVersion']} {doc['kind']}")


@pytest.fixture(scope="session")
def control_plane() -> Iterator:
    from aitax.cluster.control_plane import LocalControlPlane

    for name in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "kubectl"):
        tool_path(name)
    # Four nodes: the chart's default hard anti-affinity puts each broker on its own node, and the experiment
    # test scales Kafka to four brokers.
    plane = LocalControlPlane(nodes=4)
    plane.up()
    yield plane
    plane.down()
