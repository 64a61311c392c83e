"""The chart on a REAL single-node cluster (`aitax cluster`): pods are containers in containerd with cgroup limits,
Services and DNS work, faces flow from the demo video to identities with the chart's defaults, `helm test` passes,
a broker pod deleted under load comes back with every partition fully replicated, and nothing is left behind."""

from __future__ import annotations

import json
import time

import pytest

from aitax.cluster.demo import helm, identified_faces
from aitax.cluster.node import RealCluster
from tests.cluster.conftest import NAMESPACE

pytestmark = pytest.mark.cluster


def _pods(cluster: RealCluster, selector: str = "") -> list[dict]:
    args = ["get", "pods", "-n", NAMESPACE, "-o", "json"] + (["-l", selector] if selector else [])
    return json.loads(cluster.kubectl(*args).stdout)["items"]


def _exec(cluster: RealCluster, target: str, *command: str) -> str:
    return cluster.kubectl("exec", "-n", NAMESPACE, target, "--", *command).stdout.strip()


def test_pods_are_real_containers_with_limits_and_no_root(cluster: RealCluster, release: str) -> None:
    pods = _pods(cluster)
    assert len(pods) >= 7  # 3 brokers, Elasticsearch, ingest-detect, 2 identify (the paper's ratio)
    for pod in pods:
        for status in pod["status"].get("containerStatuses", []):
            assert status["containerID"].startswith("containerd://"), status
    identify = f"deploy/{release}-aitax-identify"
    # cgroup v1 as the container sees it: the chart's 2Gi memory limit and 1 CPU (cfs quota/period).
    assert int(_exec(cluster, identify, "cat", "/sys/fs/cgroup/memory/memory.limit_in_bytes")) == 2 << 30
    quota = int(_exec(cluster, identify, "cat", "/sys/fs/cgroup/cpu/cpu.cfs_quota_us"))
    period = int(_exec(cluster, identify, "cat", "/sys/fs/cgroup/cpu/cpu.cfs_period_us"))
    assert quota == period
    assert _exec(cluster, identify, "id", "-u") == "10001"
    read_only = cluster.kubectl("exec", "-n", NAMESPACE, identify, "--", "touch", "/opt/x", check=False)
    assert read_only.returncode != 0 and "Read-only file system" in read_only.stderr


def test_services_and_cluster_dns(cluster: RealCluster, release: str) -> None:
    script = ("import socket; print(socket.gethostbyname('kubernetes.default.svc.cluster.local'), "
              f"socket.gethostbyname('{release}-aitax-elasticsearch'))")
    api, elasticsearch = _exec(cluster, f"deploy/{release}-aitax-identify", "python", "-c", script).split()
    assert api == "10.96.0.1"
    service_ip = cluster.kubectl("get", "service", f"{release}-aitax-elasticsearch", "-n", NAMESPACE, "-o",
                                 "jsonpath={.spec.clusterIP}").stdout
    assert elasticsearch == service_ip


def test_faces_flow_with_the_defaults_and_helm_test_passes(cluster: RealCluster, release: str) -> None:
    deadline = time.monotonic() + 600
    while (faces := identified_faces(cluster, NAMESPACE, release)) < 20 and time.monotonic() < deadline:
        time.sleep(5)
    assert faces >= 20, "identify events did not reach the in-cluster Elasticsearch"
    result = helm(cluster, "test", release, "-n", NAMESPACE, "--timeout", "5m", check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_deleted_broker_pod_returns_with_every_partition_replicated(cluster: RealCluster, release: str) -> None:
    broker = f"{release}-aitax-kafka-1"
    before = identified_faces(cluster, NAMESPACE, release)
    cluster.kubectl("delete", "pod", "-n", NAMESPACE, broker, "--wait=false")
    cluster.kubectl("wait", "-n", NAMESPACE, f"pod/{broker}", "--for=condition=Ready", "--timeout=300s",
                    timeout_s=320)
    # The brokers' own view: no partition of any topic under its replication factor.
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        under = _exec(cluster, f"{release}-aitax-kafka-0", "/opt/kafka/bin/kafka-tool",
                      "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", "localhost:9092", "--describe",
                      "--under-replicated-partitions")
        if not under:
            break
        time.sleep(5)
    assert not under, under
    deadline = time.monotonic() + 180
    while identified_faces(cluster, NAMESPACE, release) <= before and time.monotonic() < deadline:
        time.sleep(5)
    assert identified_faces(cluster, NAMESPACE, release) > before, "faces stopped flowing after the broker returned"


def test_scaling_identify_runs_more_real_pods(cluster: RealCluster, release: str) -> None:
    deployment = f"deploy/{release}-aitax-identify"
    cluster.kubectl("scale", "-n", NAMESPACE, deployment, "--replicas=3")
    cluster.kubectl("rollout", "status", "-n", NAMESPACE, deployment, "--timeout=300s", timeout_s=320)
    pods = _pods(cluster, "app.kubernetes.io/component=identify")
    assert len([p for p in pods if p["status"]["phase"] == "Running"]) == 3
    cluster.kubectl("scale", "-n", NAMESPACE, deployment, "--replicas=2")
