"""The kubernetes backend: a spec's phases on a Helm release's pods, each through the load engine.

A phase resizes Kafka if it names a broker count, rolls the consumers out with the phase's run id and factor
(AITAX_RUN_ID and AITAX_ACCELERATION_FACTOR in the pod template: the events and faces of each phase carry their
own run id), waits for their consumer group, runs the producers for the phase's duration, scales them to zero,
drains and reads the run back (`aitax.experiment.cluster_load`): a `RunResult` per phase, as on the local backend.
The original replica counts and environment are restored at the end, also after an error or Ctrl-C.

A new broker holds no replicas and a removed one would take its replicas with it, so a change of the Kafka
StatefulSet's size comes with a rebalance Job (the Kafka image's `kafka-rebalance-topics`, as Strimzi's
add-brokers/remove-brokers rebalances): after scaling up, onto the new brokers; before scaling down, off the
brokers that go.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from aitax.cluster.links import LinkShape
from aitax.common.errors import UserError
from aitax.experiment.cluster_load import ClusterLoad, PhasePods
from aitax.experiment.cluster_resources import (
    PROMETHEUS_COMPONENT,
    ClusterResources,
    PhaseQueries,
    prometheus_query,
)
from aitax.experiment.kubernetes_api import KubernetesCluster, Scaled
from aitax.experiment.spec import CONSUMER_STAGE, KAFKA, PRODUCER_STAGE, ExperimentSpec, PhaseLinks
from aitax.load.engine import REAL_DRAIN_S, print_result, run_load
from aitax.pipeline.transport.readback import Collected
from aitax.runs.results import RunResult, Workload

if TYPE_CHECKING:
    from aitax.cluster.real_cluster import RealCluster

PROFILE_CONFIGMAP = "emulator-profile"  # the chart's ConfigMap when emulator.profileYaml is given
PROFILE_KEY = "profile.yaml"


class KubernetesBackend:
    """Runs a spec's phases on the chart's workloads; restores the original scale afterwards. `collect`: how
    `aitax collect` is run where the brokers are (default: exec in a consumer pod)."""

    def __init__(self, spec: ExperimentSpec, cluster: KubernetesCluster, rollout_timeout_s: float = 300.0,
                 log: Callable[[str], None] = print,
                 collect: Callable[[list[str]], Collected] | None = None) -> None:
        self.spec = spec
        self.cluster = cluster
        self.rollout_timeout_s = rollout_timeout_s
        self.log = log
        self.collect = collect
        self.workloads: dict[str, Scaled] = {}
        self.offered_per_producer: float | None = None  # emulated: faces/s one instance offers at 1x
        self.prometheus: str | None = None  # the release's own Prometheus Service: each phase's resources
        self.brokers: str | None = None  # the brokers' StatefulSet, whose pods the resources are read for
        self.phase_load: ClusterLoad | None = None  # the last phase's
        self.nodes: RealCluster | None = None  # `aitax cluster`, when a phase shapes its links
        self.links: PhaseLinks | None = None  # as the phases left them
        self.shaped: list[str] = []  # the nodes whose link they shape

    @property
    def consumers(self) -> Scaled:
        return self.workloads[CONSUMER_STAGE[self.spec.mode]]

    @property
    def producers(self) -> Scaled:
        return self.workloads[PRODUCER_STAGE[self.spec.mode]]

    def prepare(self) -> None:
        """Check the server, find every workload a phase runs or scales, and check what the release runs against
        the spec (at least one pod of each stage; the emulator's profile), before changing anything."""
        version = self.cluster.check_reachable()
        stages = (*self.spec.stages, CONSUMER_STAGE[self.spec.mode], PRODUCER_STAGE[self.spec.mode])
        self.workloads = {stage: self.cluster.find_workload(self.spec.release, stage)
                          for stage in dict.fromkeys(stages)}
        for index, phase in enumerate(self.spec.phases):
            for scaled in (self.consumers, self.producers):
                if phase.replicas.get(scaled.stage, scaled.original_replicas) < 1:
                    raise UserError(f"{self.spec.source}: phases[{index}].replicas.{scaled.stage}: a phase runs at "
                                    f"least 1 pod of each stage (the release has {scaled.original_replicas})")
        if self.spec.mode == "emulated":
            self.offered_per_producer = self._release_profile().offered_faces_per_s(1, 1.0)
            closed = next((i for i, phase in enumerate(self.spec.phases) if phase.in_flight), None)
            if closed is not None and self.producers.arg("--stages", "2") == "3":
                raise UserError(f"{self.spec.source}: phases[{closed}].in_flight: a closed loop runs two stages, "
                                f"but release {self.spec.release} runs three (its stages: 3)")
            for index, phase in enumerate(self.spec.phases):
                for key, scaled in (("producers", self.producers), ("consumers", self.consumers)):
                    running = int(scaled.arg("--instances", "1"))
                    if phase.instances.get(key, 1) != running:
                        raise UserError(f"{self.spec.source}: phases[{index}].instances.{key}: "
                                        f"{phase.instances.get(key, 1)}, but release {self.spec.release} runs "
                                        f"{running} per {scaled.stage} pod (its emulator.{key}.instances)")
        if any(phase.links is not None for phase in self.spec.phases):
            self.nodes = self._local_cluster()
        self.prometheus = self.cluster.service(self.spec.release, PROMETHEUS_COMPONENT)
        if self.prometheus is not None:
            self.brokers = self.cluster.find_workload(self.spec.release, KAFKA).name
        found = ", ".join(f"{w} ({w.original_replicas})" for w in self.workloads.values())
        measured = (f"resources from service/{self.prometheus}" if self.prometheus else
                    "no resources (the release runs no Prometheus: prometheus.enabled)")
        self.log(f"kubernetes {version} at {self.cluster.host}, namespace {self.cluster.namespace}: {found}; "
                 f"{measured}")

    def _local_cluster(self) -> RealCluster:
        """`aitax cluster` on this machine, which a phase's `links:` shape: only there are the nodes' links ours."""
        from aitax.cluster.real_cluster import RealCluster

        local = RealCluster()
        if not local.is_running() or local.server.rstrip("/") != self.cluster.host.rstrip("/"):
            raise UserError(f"{self.spec.source}: phases[].links: shaping needs `aitax cluster` on this machine, "
                            f"but the experiment talks to {self.cluster.host}")
        return local

    def _release_profile(self):
        """The profile the release's emulator pods run, which must be the spec's: the offered load is computed
        from it."""
        from aitax.emulation.profile import load_profile

        running = self.producers.arg("--profile", "paper")
        if not running.startswith("/"):
            if running != self.spec.profile:
                raise UserError(f"{self.spec.source}: profile {self.spec.profile!r}: release {self.spec.release} "
                                f"runs the emulator with profile {running!r} (its emulator.profile)")
            return load_profile(running)
        name = f"{self.producers.name.removesuffix('-emulate-producers')}-{PROFILE_CONFIGMAP}"
        text = self.cluster.config_map(name).get(PROFILE_KEY)
        if text is None:
            raise UserError(f"configmap/{name} has no {PROFILE_KEY}: the release's emulator profile is unknown")
        import tempfile
        from pathlib import Path

        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / PROFILE_KEY
            path.write_text(text)
            release_profile = load_profile(str(path))
        if load_profile(self.spec.profile).to_yaml() != release_profile.to_yaml():
            raise UserError(f"{self.spec.source}: profile {self.spec.profile!r}: release {self.spec.release} runs "
                            f"the emulator with another profile (emulator.profileYaml, configmap/{name})")
        return release_profile

    def run_phase(self, index: int, run_id: str, factor: float | None = None,
                  disruption: Callable[[], None] | None = None, disruption_after_s: float | None = None,
                  drain_s: float | None = None) -> tuple[dict[str, int], RunResult]:
        """The phase through the load engine (at `factor`: a search's probe): the replicas it ran and what it
        measured. `disruption`: a fault scenario's, run `disruption_after_s` into the load
        (`load.engine.run_load`); `self.phase_load` then holds the phase's read-back for its accounting. `drain_s`:
        the longest wait for the backlog after the load (it ends once the consumers caught up), instead of the
        workload's default."""
        drain = {} if drain_s is None else {"drain_s": drain_s}
        phase, mode = self.spec.phases[index], self.spec.mode
        replicas = {stage: phase.replicas.get(stage, scaled.original_replicas)
                    for stage, scaled in self.workloads.items()}
        consumers, producers = replicas[self.consumers.stage], replicas[self.producers.stage]
        per_consumer = int(self.consumers.arg("--instances", "1")) if mode == "emulated" else 1
        if mode == "real":
            workload = Workload(mode="real", producers=producers, consumers=consumers, duration_s=phase.duration_s,
                                video=self.producers.env.get("AITAX_VIDEO"), gallery=self.consumers.arg("--gallery"),
                                pace=self.producers.arg("--pace", "native"), **{"drain_s": REAL_DRAIN_S, **drain})
            offered = None
        else:
            workload, offered = phase.emulated_workload(
                self.spec.profile, {"producers": producers, "consumers": consumers},
                {"producers": int(self.producers.arg("--instances", "1")), "consumers": per_consumer},
                self.offered_per_producer, factor, **drain)
        pods = PhasePods(consumers=self.consumers, producers=self.producers, consumer_replicas=consumers,
                         producer_replicas=producers, members=consumers * per_consumer,
                         group=self.consumers.arg("--group", "identify"))
        load = ClusterLoad(self.cluster, self.spec.release, pods, workload, run_id,
                           resize_kafka=lambda: self._place_brokers(replicas.get(KAFKA), phase.links),
                           rollout_timeout_s=self.rollout_timeout_s, collect=self.collect)
        self.phase_load = load
        result = run_load(load, offered_faces_per_s=offered, sampler=self._resources(), disruption=disruption,
                          disruption_after_s=disruption_after_s)
        if self.links is not None:
            result.notes.append(self._links_note())
        print_result(result)
        return replicas, result

    def _resources(self) -> ClusterResources | None:
        if self.prometheus is None or self.brokers is None:
            return None
        service = self.prometheus
        roles = {scaled.stage: scaled.name for scaled in (self.producers, self.consumers)}
        return ClusterResources(
            prometheus_query(lambda path, params: self.cluster.proxy_get(service, "http", path, params)),
            PhaseQueries(self.cluster.namespace, self.brokers, roles),
            link_rate_mbit=lambda: self.links.shape.rate_mbit if self.links else None)

    def _place_brokers(self, brokers: int | None, links: PhaseLinks | None) -> None:
        """The brokers scaled with their data over unshaped links (moving partitions is not the phase's traffic,
        and at a phase's rate it could outlast the rebalance's timeout), then the phase's links shaped: which nodes
        run a broker is known only once they run."""
        kafka = self.workloads.get(KAFKA)
        moving = kafka is not None and brokers is not None and self.cluster.rollout_state(kafka).desired != brokers
        if moving and self.nodes is not None and self.shaped:
            self.nodes.reshape(LinkShape())
            self.links, self.shaped = None, []
        self._resize_kafka(brokers)
        if self.nodes is None or links is None:
            return
        shaped = [node.name for node in self.nodes.node_list]
        if links.nodes == "brokers":
            running = {pod.spec.node_name for pod in self.cluster.release_pods(self.spec.release, KAFKA)}
            shaped = [name for name in shaped if name in running]
        if (links, shaped) == (self.links, self.shaped):
            return
        for node in self.nodes.node_list:
            self.nodes.reshape(links.shape if node.name in shaped else LinkShape(), [node])
        self.links, self.shaped = links, shaped
        self.log(self._links_note())

    def _links_note(self) -> str:
        return f"links: {self.links.describe()} ({', '.join(self.shaped)})"

    def _resize_kafka(self, brokers: int | None) -> None:
        """Scale the brokers with their data (when the spec scales them): replicas move off leaving brokers
        first, onto new ones after."""
        kafka = self.workloads.get(KAFKA)
        if kafka is None or brokers is None:
            return
        current = self.cluster.rollout_state(kafka).desired
        if brokers < current:
            self._rebalance(kafka, brokers)
        self.cluster.scale(kafka, brokers)
        if brokers > current:
            self.cluster.wait_rollouts([kafka], self.rollout_timeout_s)
            self._rebalance(kafka, brokers)
        self.cluster.wait_rollouts([kafka], self.rollout_timeout_s)

    def _rebalance(self, kafka: Scaled, brokers: int) -> None:
        started = time.monotonic()
        body = self.cluster.rebalance_job(self.spec.release, kafka, brokers, self.rollout_timeout_s)
        name = self.cluster.run_job(body, self.rollout_timeout_s)
        self.log(f"job/{name}: topics spread over {brokers} brokers in {time.monotonic() - started:.0f} s")

    def restore(self) -> None:
        """Put back the replica counts and environment found at the start (best effort, every workload), and the
        nodes' links unshaped if a phase shaped them."""
        problems = []
        if self.nodes is not None and self.links is not None:
            self.nodes.reshape(LinkShape())
            self.links, self.shaped = None, []
        for workload in self.workloads.values():
            try:
                if workload.kind == "Deployment":
                    self.cluster.set_env(workload, workload.original_env)
                    self.cluster.scale(workload, workload.original_replicas)
                else:
                    self._resize_kafka(workload.original_replicas)
            except UserError as error:
                problems.append(str(error))
        if not problems:
            try:
                self.cluster.wait_rollouts(list(self.workloads.values()), self.rollout_timeout_s)
            except UserError as error:
                problems.append(str(error))
        restored = ", ".join(f"{w} -> {w.original_replicas}" for w in self.workloads.values())
        if problems:
            raise UserError(f"restoring the original scale failed: {problems[0]}")
        self.log(f"restored {restored}")
