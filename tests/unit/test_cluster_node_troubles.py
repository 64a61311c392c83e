"""Which nodes of `aitax cluster` can take pods, and why the others cannot: read from the Node objects (kubectl
faked at its edge with the API server's JSON); the real cluster's tests wait on it for real."""

from __future__ import annotations

import json
import subprocess

import pytest

from aitax.cluster.node import Node
from aitax.cluster.real_cluster import RealCluster
from aitax.common.errors import UserError


def node(name: str, ready: str = "True", pressure: str = "", taints: tuple[str, ...] = ()) -> dict:
    conditions = [{"type": "Ready", "status": ready, "message": "kubelet is posting ready status"
                   if ready == "True" else "container runtime is down"},
                  {"type": "MemoryPressure", "status": "False", "message": "kubelet has sufficient memory"},
                  {"type": "DiskPressure", "status": "True" if pressure == "disk" else "False",
                   "message": "kubelet has disk pressure" if pressure == "disk" else "kubelet has no disk pressure"}]
    return {"metadata": {"name": name}, "status": {"conditions": conditions},
            "spec": {"taints": [{"key": key, "effect": "NoSchedule"} for key in taints]}}


class Listed(RealCluster):
    """A cluster whose `kubectl get nodes` answers with these Node objects."""

    def __init__(self, items: list[dict]) -> None:
        super().__init__(nodes=3)
        object.__setattr__(self, "items", items)

    def kubectl(self, *args: str, check: bool = True, timeout_s: float = 60) -> subprocess.CompletedProcess:
        assert args[:2] == ("get", "nodes")
        return subprocess.CompletedProcess(args, 0, json.dumps({"items": self.items}), "")


def test_a_node_can_take_pods_when_ready_without_pressure_or_trouble_taints() -> None:
    cluster = Listed([
        node("aitax-node-0"),
        node("aitax-node-1", taints=("aitax.io/clients",)),  # a user's own taint is no trouble
        node("aitax-node-2", pressure="disk", taints=("node.kubernetes.io/disk-pressure",)),
    ])
    assert cluster.ready_nodes() == {"aitax-node-0", "aitax-node-1"}
    troubles = cluster.node_troubles()
    assert troubles["aitax-node-1"] == ""
    assert troubles["aitax-node-2"] == ("DiskPressure: kubelet has disk pressure; "
                                        "taint node.kubernetes.io/disk-pressure:NoSchedule")


def test_a_ready_node_still_tainted_not_ready_cannot_take_pods_yet() -> None:
    """The controller lifts the not-ready taint a moment after kubelet reports Ready: until then pods stay
    Pending."""
    cluster = Listed([node("aitax-node-0", taints=("node.kubernetes.io/not-ready",)),
                      node("aitax-node-1", ready="False", taints=("node.kubernetes.io/not-ready",))])
    assert cluster.ready_nodes() == set()
    assert cluster.node_troubles()["aitax-node-1"].startswith("Ready=False: container runtime is down; taint ")


def test_waiting_for_nodes_that_never_recover_names_each_ones_trouble(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = Listed([node("aitax-node-0"), node("aitax-node-1", pressure="disk",
                                                  taints=("node.kubernetes.io/disk-pressure",))])
    monkeypatch.setattr("aitax.cluster.real_cluster.NODE_READY_TIMEOUT_S", 0.2)
    with pytest.raises(UserError) as raised:
        cluster._wait_for_nodes([Node(0), Node(1), Node(2)], "3 Ready node(s)", None)
    message = str(raised.value)
    assert message.startswith("3 Ready node(s) not healthy after 0 s")
    assert ("aitax-node-0: ready; aitax-node-1: DiskPressure: kubelet has disk pressure; taint "
            "node.kubernetes.io/disk-pressure:NoSchedule; aitax-node-2: no Node object)") in message
