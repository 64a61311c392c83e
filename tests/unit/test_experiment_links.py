"""A kubernetes phase's `links:`: shaped on every node, or on the nodes running the release's brokers alone (found once
the phase's brokers run), the others unshaped; unchanged links are not touched again. The cluster and `tc` are
faked at their edges; the real cluster's runs are in docs/kubernetes.md."""

from __future__ import annotations

from types import SimpleNamespace

from aitax.cluster.links import LinkShape
from aitax.cluster.node import Node
from aitax.experiment.kubernetes_backend import KubernetesBackend
from aitax.experiment.spec import PhaseLinks, parse_spec


class Nodes:
    def __init__(self) -> None:
        self.node_list = [Node(index) for index in range(5)]
        self.applied: list[tuple[str, LinkShape]] = []

    def reshape(self, shape: LinkShape, nodes: list[Node] | None = None) -> None:
        self.applied += [(node.name, shape) for node in nodes or self.node_list]


class Kube:
    def __init__(self, broker_nodes: list[int]) -> None:
        self.broker_nodes = broker_nodes

    def release_pods(self, release: str, component: str) -> list:
        assert (release, component) == ("aitax", "kafka")
        return [SimpleNamespace(spec=SimpleNamespace(node_name=Node(i).name)) for i in self.broker_nodes]


SPEC = parse_spec({"name": "links", "mode": "emulated", "phases": [
    {"name": "one", "duration": 10, "replicas": {"emulate-producers": 1, "emulate-consumers": 1}}]})
SLOW = LinkShape(rate_mbit=10.0)


def backend(broker_nodes: list[int]) -> tuple[KubernetesBackend, Nodes, list[str]]:
    lines: list[str] = []
    phase_backend = KubernetesBackend(SPEC, Kube(broker_nodes), log=lines.append)  # type: ignore[arg-type]
    phase_backend.nodes = Nodes()  # type: ignore[assignment]
    return phase_backend, phase_backend.nodes, lines  # type: ignore[return-value]


def test_the_brokers_nodes_alone_are_shaped_and_the_others_unshaped() -> None:
    phase_backend, nodes, lines = backend([0, 2, 4])
    phase_backend._place_brokers(None, PhaseLinks(SLOW, "brokers"))
    assert dict(nodes.applied) == {"aitax-node-0": SLOW, "aitax-node-1": LinkShape(), "aitax-node-2": SLOW,
                                   "aitax-node-3": LinkShape(), "aitax-node-4": SLOW}
    assert lines == ["links: the brokers' nodes: 10 Mbit/s (aitax-node-0, aitax-node-2, aitax-node-4)"]


def test_brokers_on_more_nodes_take_the_shape_with_them_and_the_same_links_are_left_alone() -> None:
    phase_backend, nodes, _ = backend([0, 1, 2])
    phase_backend._place_brokers(None, PhaseLinks(SLOW, "brokers"))
    nodes.applied.clear()
    phase_backend._place_brokers(None, PhaseLinks(SLOW, "brokers"))  # the next phase, same brokers
    assert nodes.applied == []
    phase_backend.cluster.broker_nodes = [0, 1, 2, 3, 4]  # five brokers now
    phase_backend._place_brokers(None, PhaseLinks(SLOW, "brokers"))
    assert {name for name, shape in nodes.applied if shape == SLOW} == {f"aitax-node-{i}" for i in range(5)}


def test_every_nodes_link_is_shaped_when_the_phase_names_no_nodes() -> None:
    phase_backend, nodes, _ = backend([0, 1, 2])
    phase_backend._place_brokers(None, PhaseLinks(SLOW))
    assert dict(nodes.applied) == {f"aitax-node-{i}": SLOW for i in range(5)}


def test_links_are_unshaped_while_the_brokers_move_and_shaped_again_after() -> None:
    phase_backend, nodes, _ = backend([0, 1, 2])
    phase_backend._place_brokers(None, PhaseLinks(SLOW, "brokers"))
    moves: list[int] = []
    kafka = SimpleNamespace(stage="kafka")
    phase_backend.workloads = {"kafka": kafka}  # type: ignore[dict-item]
    phase_backend.cluster.rollout_state = lambda workload: SimpleNamespace(desired=3)  # type: ignore[attr-defined]

    def resize(brokers: int | None) -> None:
        assert all(shape == LinkShape() for _, shape in nodes.applied)  # every link open while data moves
        moves.append(brokers)
        phase_backend.cluster.broker_nodes = [0, 1, 2, 3, 4]

    phase_backend._resize_kafka = resize  # type: ignore[method-assign]
    nodes.applied.clear()
    phase_backend._place_brokers(5, PhaseLinks(SLOW, "brokers"))
    assert moves == [5]
    assert {name for name, shape in nodes.applied[5:] if shape == SLOW} == {f"aitax-node-{i}" for i in range(5)}

