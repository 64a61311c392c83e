"""A node of `aitax cluster` fails under load and comes back (`aitax faults --scenarios node-failure`).

One emulated phase of the release's own load (its emulator pods, run as `aitax experiment` runs a phase). A quarter
in, the node that holds a broker loses power: its link is cut, and its kubelet, containerd and every container on
it are killed (`RealCluster.fail_node`). After `down_s` it is powered on again (`restore_node`), and its kubelet
restarts the pods the API server still assigns to it, the broker on its own volume. Then every face is accounted
for from the topics: in `faces` (each acknowledged to its producer: acks=all), identified, lost, duplicated; the
producers' stall (the longest gap between appends to `faces`); and the recovery, from the node's return until no
partition is under-replicated and every broker is scraped again (the brokers' own meters, through the release's
Prometheus).

On the cluster, `acknowledged` is what the brokers hold for the run: acks=all, so each face there was acknowledged
to its producer; the emulator pods' own acknowledgement counts are not collected, so a face a producer saw
acknowledged and the brokers then dropped would show as fewer faces, not as lost ones.

The broker chosen by default is the one whose node runs the fewest of the load's pods: the fault is the broker's
node, not the load's. Pods of the load that were on the node restart with it; their restarts are noted, not
failures.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from aitax.cluster.node import NODE_PREFIX, Node
from aitax.cluster.real_cluster import RealCluster
from aitax.common.daemons import poll_until
from aitax.common.errors import UserError
from aitax.emulation.faults import DRAIN_S as FAULT_DRAIN_S
from aitax.runs.results import FaultResult, judge_fault

SCENARIO = "node-failure"
RECOVERY_TIMEOUT_S = 300.0
LOAD_COMPONENTS = ("emulate-producers", "emulate-consumers")


def run_node_failure(cluster: RealCluster, release: str, namespace: str, *, broker: int | None = None,
                     down_s: float = 30.0, duration_s: float = 90.0, factor: float = 1.0,
                     log: Callable[[str], None] = print) -> FaultResult:
    from aitax.experiment.cluster_resources import prometheus_query
    from aitax.experiment.kubernetes_api import KubernetesCluster
    from aitax.experiment.kubernetes_backend import KubernetesBackend

    if len(cluster.node_list) < 3:
        raise UserError(f"{SCENARIO}: the cluster has {len(cluster.node_list)} node(s); it needs 3 or more, one "
                        "broker each (`aitax cluster up --nodes 3`)")
    kube = KubernetesCluster(str(cluster.kubeconfig), namespace=namespace)
    backend = KubernetesBackend(_phase_spec(kube, release, namespace, duration_s, factor), kube, log=log)
    backend.prepare()
    if backend.prometheus is None:
        raise UserError(f"{SCENARIO}: release {release} runs no Prometheus (prometheus.enabled): the brokers' "
                        "recovery is read there")
    query = prometheus_query(lambda path, params: kube.proxy_get(backend.prometheus, "http", path, params))
    brokers = {int(pod.metadata.name.rsplit("-", 1)[1]): pod.spec.node_name
               for pod in kube.release_pods(release, "kafka")}
    broker = _pick_broker(kube, release, brokers, broker)
    node = Node(int(brokers[broker].removeprefix(NODE_PREFIX)))
    moments: dict[str, float] = {}
    on_node: set[str] = set()  # the load's pods that go down with the node (the phase's own: taken when it fails)

    def fail_then_restore() -> None:
        on_node.update(pod.metadata.name for component in LOAD_COMPONENTS
                       for pod in kube.release_pods(release, component) if pod.spec.node_name == node.name)
        cluster.fail_node(node)
        log(f"{node.name} (broker {broker}) failed: link cut, kubelet, containerd and its containers killed")
        time.sleep(down_s)
        moments["restored"] = time.monotonic()
        cluster.restore_node(node)
        moments["ready"] = time.monotonic()
        log(f"{node.name} back, Ready {moments['ready'] - moments['restored']:.0f} s after power-on")

    run_id = f"{SCENARIO}-{random.Random().randrange(16**6):06x}"
    try:
        # A consumer that died with the node holds its partitions until its session times out: the drain waits
        # for the group to recover, as the local fault scenarios' does.
        _, run = backend.run_phase(0, run_id, disruption=fail_then_restore, disruption_after_s=duration_s / 4,
                                   drain_s=FAULT_DRAIN_S)
    finally:
        if node.name not in cluster.ready_nodes():  # the disruption failed half-way: never leave a node down
            cluster.restore_node(node)
        backend.restore()
    kafka = kube.find_workload(release, "kafka").name

    def in_sync() -> bool:
        scraped = query('count(up{job="brokers"} == 1)', time.time())
        lagging = query(f'sum(kafka_server_replicamanager_underreplicatedpartitions{{pod=~"{kafka}-[0-9]+"}})',
                        time.time())
        return bool(scraped) and scraped[0][1] >= len(brokers) and bool(lagging) and lagging[0][1] == 0

    isr_restored = poll_until(in_sync, RECOVERY_TIMEOUT_S, interval_s=2.0)
    recovery_s = round(time.monotonic() - moments["restored"], 1) if isr_restored and "restored" in moments else None
    notes = [f"{node.name}, holding broker {broker}, lost power {duration_s / 4:.0f} s into {duration_s:g} s of "
             f"load at {factor:g}x, for {down_s:g} s"]
    if "ready" in moments:
        notes.append(f"{node.name} Ready {moments['ready'] - moments['restored']:.0f} s after power-on")
    readback = backend.phase_load.readback if backend.phase_load else None
    return _fault_result(run, on_node, readback.stall_s if readback else 0.0, isr_restored, recovery_s, notes)


def _phase_spec(kube, release: str, namespace: str, duration_s: float, factor: float):
    """One emulated phase of the release's load as it runs: its replicas and instances per pod."""
    from aitax.experiment.spec import parse_spec

    load = {key: kube.find_workload(release, f"emulate-{key}") for key in ("producers", "consumers")}
    return parse_spec({"name": SCENARIO, "mode": "emulated", "release": release, "namespace": namespace,
                       "phases": [{"name": SCENARIO, "duration": f"{duration_s:g}s", "factor": factor,
                                   "replicas": {w.stage: max(1, w.original_replicas) for w in load.values()},
                                   "instances": {key: int(w.arg("--instances", "1")) for key, w in load.items()}}]},
                      source=SCENARIO)


def _pick_broker(kube, release: str, brokers: dict[int, str], broker: int | None) -> int:
    """The broker asked for, or the one whose node runs the fewest of the load's pods."""
    if broker is None:
        load_nodes = [pod.spec.node_name for component in LOAD_COMPONENTS
                      for pod in kube.release_pods(release, component)]
        broker = min(sorted(brokers), key=lambda index: load_nodes.count(brokers[index]))
    if broker not in brokers:
        raise UserError(f"{SCENARIO}: --broker {broker}: the release's brokers are {sorted(brokers)}")
    return broker


def _fault_result(run, on_node: set[str], stall_s: float, isr_restored: bool, recovery_s: float | None,
                  notes: list[str]) -> FaultResult:
    """Pods that died with the node restart with it: noted, not failures. The brokers' count of the run's faces is
    the only acknowledgement count here, so the verdict does not claim a check of acknowledged against held."""
    expected = [line for line in run.process_failures if line.split(":")[0].removeprefix("pod/") in on_node]
    failures = [line for line in run.process_failures if line not in expected]
    notes = [*notes, *(f"restarted with its node, as expected: {line}" for line in expected), *run.notes,
             "acknowledged: the faces the brokers hold for the run (acks=all); the producers' own counts are not "
             "collected on the cluster"]
    lost = run.produced_faces - run.identified_faces
    return FaultResult(
        scenario=SCENARIO, offered_faces_per_s=run.offered_faces_per_s or 0.0, acknowledged=run.produced_faces,
        in_topic=run.produced_faces, identified=run.identified_faces, duplicates=run.duplicates, lost=lost,
        stall_s=stall_s, isr_restored=isr_restored, recovery_s=recovery_s, process_failures=failures, notes=notes,
        verdict=judge_fault(acknowledged=None, in_topic=run.produced_faces, lost=lost, isr_restored=isr_restored,
                            process_failures=failures))
