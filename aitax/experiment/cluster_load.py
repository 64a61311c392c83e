"""One experiment phase on a release's pods, as the load engine runs every load (`aitax.load.engine.run_load`).

Consumers first: Kafka resized, the consumer Deployment rolled out with the phase's run id and factor, and ready
only once its consumer group is stable with every expected instance holding partitions (group formation is not
broker wait). Then the producers, for the phase's duration. At its end the producers are scaled to zero (SIGTERM:
each flushes and waits for its acknowledgements), the consumers drain, and the run is read back from its topics.

The brokers are reachable only from the release's Kafka clients (its NetworkPolicy), so the group's state and the
read-back come from `aitax collect`, run inside a consumer pod through the API server's exec, as one JSON line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from aitax.experiment.kubernetes_api import FACTOR_ENV, RUN_ID_ENV, KubernetesCluster, Scaled
from ground.daemons import poll_until
from ground.errors import UserError
from pipeline.transport.readback import Collected, GroupState, RunReadback
from telemetry.results import Driver, Workload

READY_TIMEOUT_S = {"real": 300.0, "emulated": 120.0}  # a real identify pod loads TensorFlow and FaceNet first
PRODUCERS_GONE_S = 120.0  # the pods' grace period (60 s) and some
POLL_S = 2.0  # each poll is an exec into a pod that starts a Python process
COLLECT_TIMEOUT_S = 600.0  # the read-back of a long phase: every face and identity of the topics
INSTANCE_LABEL = "app.kubernetes.io/instance"
COMPONENT_LABEL = "app.kubernetes.io/component"


@dataclass(frozen=True)
class PhasePods:
    """What one phase runs: the two Deployments, their replica counts, and the group the consumers form."""

    consumers: Scaled
    producers: Scaled
    consumer_replicas: int
    producer_replicas: int
    members: int  # consumer instances expected in the group (pods x instances per pod)
    group: str


class ClusterLoad:
    """The engine's `Load` for a release's pods. `collect` runs `aitax collect ARGS` where the brokers are
    reachable (default: in a running consumer pod) and returns what it printed."""

    def __init__(self, cluster: KubernetesCluster, release: str, pods: PhasePods, workload: Workload, run_id: str,
                 resize_kafka: Callable[[], None], rollout_timeout_s: float,
                 collect: Callable[[list[str]], Collected] | None = None) -> None:
        self.cluster, self.release, self.pods = cluster, release, pods
        self.workload, self.driver, self.run_id = workload, Driver(), run_id
        self.resize_kafka, self.rollout_timeout_s = resize_kafka, rollout_timeout_s
        self.collect = collect or self._collect_in_pod
        self.restarts_before: dict[str, int] = {}
        self.producer_failures: list[str] | None = None  # kept when the producers are scaled to zero
        self.readback: RunReadback | None = None

    def start_consumers(self) -> None:
        self.resize_kafka()
        self._roll_out(self.pods.consumers, self.pods.consumer_replicas)
        self.restarts_before = self._restarts()
        last: list[GroupState | None] = [None]

        def ready() -> bool:
            last[0] = state = self._group()
            if state.members >= self.pods.members and state.partitions < self.pods.members:
                raise UserError(f"{self.pods.members} consumer instances in group {state.group}: the {state.topic} "
                                f"topic has {state.partitions} partitions, so some would hold none")
            return (state.state == "STABLE" and state.members == self.pods.members
                    and state.assigned == self.pods.members)

        if not poll_until(ready, READY_TIMEOUT_S[self.workload.mode], POLL_S):
            state = last[0]
            raise UserError(f"{self.pods.consumers}: group {self.pods.group} not ready after "
                            f"{READY_TIMEOUT_S[self.workload.mode]:.0f} s ({state.state if state else 'unknown'}, "
                            f"{state.members if state else 0} members, {state.assigned if state else 0} holding "
                            f"partitions; {self.pods.members} expected)")

    def start_producers(self) -> None:
        self._roll_out(self.pods.producers, self.pods.producer_replicas)
        self.restarts_before.update({pod: count for pod, count in self._restarts().items()
                                     if pod not in self.restarts_before})

    def _roll_out(self, scaled: Scaled, replicas: int) -> None:
        self.cluster.set_env(scaled, {RUN_ID_ENV: self.run_id, FACTOR_ENV: f"{self.workload.factor:g}"})
        self.cluster.scale(scaled, replicas)
        self.cluster.wait_rollouts([scaled], self.rollout_timeout_s)

    def pids(self) -> dict[str, list[int]]:
        return {}  # pods: their resources are the cluster's metrics, not this machine's processes

    def alive(self) -> bool:
        return not self.failures()

    def finish_producers(self, interrupted: bool) -> None:
        """Scale the producers to zero: each pod gets SIGTERM, flushes and waits for its acknowledgements."""
        self.producer_failures = self._failed(self.pods.producers)
        self.cluster.scale(self.pods.producers, 0)
        self.cluster.wait_rollouts([self.pods.producers], PRODUCERS_GONE_S)

    def drain(self, timeout_s: float, on_lag: Callable[[int], None] = lambda _: None) -> int:
        backlog = [0]

        def caught_up() -> bool:
            backlog[0] = self._group().lag
            if backlog[0]:
                on_lag(backlog[0])
            return not backlog[0]

        poll_until(caught_up, timeout_s, POLL_S)
        return backlog[0]

    def stop(self) -> None:
        """Nothing: the consumers stay up for the next phase, and the backend restores the release at the end."""

    def failures(self) -> list[str]:
        producers = self._failed(self.pods.producers) if self.producer_failures is None else self.producer_failures
        return producers + self._failed(self.pods.consumers)

    def produced(self) -> tuple[int, float]:
        readback = self._read_back()
        return readback.produced_faces, readback.face_bytes_mean

    def identities(self) -> tuple[list, int]:
        readback = self._read_back()
        return list(readback.timelines), readback.duplicates

    def _read_back(self) -> RunReadback:
        if self.readback is None:
            collected = self.collect(["--run-id", self.run_id])
            if collected.readback is None:
                raise UserError(f"aitax collect --run-id {self.run_id}: no read-back in its answer")
            self.readback = collected.readback
        return self.readback

    def _group(self) -> GroupState:
        collected = self.collect(["--group", self.pods.group])
        if collected.group is None:
            raise UserError(f"aitax collect --group {self.pods.group}: no group state in its answer")
        return collected.group

    def _selector(self, scaled: Scaled) -> str:
        return f"{INSTANCE_LABEL}={self.release},{COMPONENT_LABEL}={scaled.stage}"

    def _restarts(self) -> dict[str, int]:
        return {pod.metadata.name: sum(c.restart_count for c in pod.status.container_statuses or [])
                for scaled in (self.pods.consumers, self.pods.producers)
                for pod in self.cluster.pods(self._selector(scaled))}

    def _failed(self, scaled: Scaled) -> list[str]:
        """'pod/NAME: restarted N times (last: REASON, exit CODE)' for each pod of `scaled` that restarted in the
        phase, or failed."""
        lines = []
        for pod in self.cluster.pods(self._selector(scaled)):
            name, statuses = pod.metadata.name, pod.status.container_statuses or []
            restarts = sum(c.restart_count for c in statuses) - self.restarts_before.get(name, 0)
            if restarts > 0 or pod.status.phase == "Failed":
                ended = next((c.last_state.terminated for c in statuses
                              if c.last_state and c.last_state.terminated), None)
                last = f" (last: {ended.reason}, exit {ended.exit_code})" if ended else ""
                lines.append(f"pod/{name}: {pod.status.phase.lower()}, restarted {restarts} times{last}")
        return lines

    def _collect_in_pod(self, args: list[str]) -> Collected:
        running = [pod for pod in self.cluster.pods(self._selector(self.pods.consumers))
                   if pod.status.phase == "Running" and pod.metadata.deletion_timestamp is None]
        if not running:
            raise UserError(f"no running pod of {self.pods.consumers} to collect from")
        output = self.cluster.exec(running[0].metadata.name, self.pods.consumers.container,
                                   ["aitax", "collect", *args], COLLECT_TIMEOUT_S)
        line = next((line for line in reversed(output.splitlines()) if line.startswith("{")), "")
        try:
            return Collected.model_validate_json(line)
        except ValueError:
            raise UserError(f"aitax collect {' '.join(args)} in pod/{running[0].metadata.name}: not its JSON line: "
                            f"{output.strip()[-200:]!r}") from None
