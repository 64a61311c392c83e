"""One experiment phase on a release's pods, as the load engine runs every load (`load.engine.run_load`).

Consumers first: Kafka resized, the consumer Deployment rolled out with the phase's run id and factor, and ready
only once its consumer group is stable with every expected instance holding partitions (group formation is not
broker wait). Then the producers, for the phase's duration, with its frames in flight in a closed loop
(AITAX_IN_FLIGHT; removed for an open loop). At its end the producers are scaled to zero (SIGTERM:
each flushes and waits for its acknowledgements), the consumers drain, and the run is read back from its topics.

The brokers are reachable only from the release's Kafka clients (its NetworkPolicy), so the group's state and the
read-back come from `aitax collect`, run inside a consumer pod through the API server's exec, as one JSON line.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from aitax.common.daemons import poll_until
from aitax.common.errors import UserError
from aitax.experiment.kubernetes_api import (
    COMPONENT_LABEL,
    FACTOR_ENV,
    IN_FLIGHT_ENV,
    INSTANCE_LABEL,
    RUN_ID_ENV,
    KubernetesCluster,
    Scaled,
)
from aitax.pipeline.transport.readback import Collected, GroupState, RunReadback
from aitax.pipeline.transport.security import READER_MOUNT, TLS_ENV
from aitax.runs.results import Driver, Workload
from aitax.telemetry.latency import Timeline

PRODUCERS_GONE_S = 120.0  # the pods' grace period (60 s) and some
POLL_S = 2.0  # each poll is an exec into a pod that starts a Python process
GROUP_TIMEOUT_S = 60.0  # one `aitax collect --group`: a hung exec must not outlast the drain by minutes
READBACK_TIMEOUT_S = 900.0  # the read-back of a long phase: every face and identity since it began
SINCE_MARGIN_S = 300.0  # for a skew between this machine's clock and the broker clock


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
        self.since_ms = 0  # the read-back skips records appended before the phase (less a margin)
        self.producer_failures: list[str] | None = None  # kept when the producers are scaled to zero
        self.readback: RunReadback | None = None

    def start_consumers(self) -> None:
        """Producers stopped (the release's own run before the first phase), Kafka resized, consumers rolled out
        with the phase's run id; ready once their group is stable, every instance holds partitions and nothing
        from before is still queued (an old backlog is not this phase's broker wait)."""
        self.since_ms = int(time.time() * 1000) - round(SINCE_MARGIN_S * 1000)
        self.restarts_before = self._restarts()  # pods created from here on start from 0
        self._stop_producers()
        self.resize_kafka()
        self._roll_out(self.pods.consumers, self.pods.consumer_replicas)
        last: list[GroupState | str] = ["no answer yet"]

        def ready() -> bool:
            try:
                last[0] = state = self._group()
            except UserError as error:  # an exec into a pod that is still starting: ask again
                last[0] = str(error)
                return False
            if state.members >= self.pods.members and state.partitions < self.pods.members:
                raise UserError(f"{self.pods.members} consumer instances in group {state.group}: the {state.topic} "
                                f"topic has {state.partitions} partitions, so some would hold none")
            return (state.state == "STABLE" and state.members == self.pods.members
                    and state.assigned == self.pods.members and state.lag == 0)

        # As long as a rollout may take: a real identify pod loads TensorFlow and FaceNet before it joins.
        timeout_s = self.rollout_timeout_s
        if not poll_until(ready, timeout_s, POLL_S):
            state = last[0]
            seen = state if isinstance(state, str) else (
                f"{state.state}, {state.members} members, {state.assigned} holding partitions, lag {state.lag}")
            raise UserError(f"{self.pods.consumers}: group {self.pods.group} not ready after {timeout_s:.0f} s "
                            f"({seen}; {self.pods.members} members holding partitions and lag 0 expected)")

    def start_producers(self) -> None:
        self._roll_out(self.pods.producers, self.pods.producer_replicas)

    def _roll_out(self, scaled: Scaled, replicas: int) -> None:
        env: dict[str, str | None] = {RUN_ID_ENV: self.run_id, FACTOR_ENV: f"{self.workload.factor:g}"}
        if scaled is self.pods.producers and self.workload.mode == "emulated":
            in_flight = self.workload.in_flight  # None: the open loop, the variable removed
            env[IN_FLIGHT_ENV] = None if in_flight is None else str(in_flight)
        self.cluster.set_env(scaled, env)
        self.cluster.scale(scaled, replicas)
        self.cluster.wait_rollouts([scaled], self.rollout_timeout_s)

    def _stop_producers(self) -> None:
        """Scale the producers to zero and wait until their pods are gone: each gets SIGTERM, flushes and waits for
        its acknowledgements (a Deployment counts a terminating pod as gone already)."""
        self.cluster.scale(self.pods.producers, 0)
        selector = self._selector(self.pods.producers)
        if not poll_until(lambda: not self.cluster.pods(selector), PRODUCERS_GONE_S, POLL_S):
            raise UserError(f"{self.pods.producers}: pods still terminating {PRODUCERS_GONE_S:.0f} s after "
                            f"scaling to 0 (see `kubectl -n {self.cluster.namespace} get pods -l {selector}`)")

    def pids(self) -> dict[str, list[int]]:
        return {}  # pods: their resources are the cluster's metrics, not this machine's processes

    def alive(self) -> bool:
        return not self.failures()

    def finish_producers(self, interrupted: bool) -> None:
        self.producer_failures = self._failed(self.pods.producers)
        self._stop_producers()

    def drain(self, timeout_s: float, on_lag: Callable[[int], None] = lambda _: None) -> int:
        backlog = [0]

        def caught_up() -> bool:
            try:
                backlog[0] = self._group().lag
            except UserError:  # one exec that failed (a pod restarting): the next poll asks again
                return False
            if backlog[0]:
                on_lag(backlog[0])
            return not backlog[0]

        poll_until(caught_up, timeout_s, POLL_S)
        return backlog[0]

    def stop(self) -> list[str]:
        """Nothing: the consumers stay up for the next phase, and the backend restores the release at the end."""
        return []

    def failures(self) -> list[str]:
        producers = self._failed(self.pods.producers) if self.producer_failures is None else self.producer_failures
        return producers + self._failed(self.pods.consumers)

    def produced(self) -> tuple[int, float]:
        readback = self._read_back()
        return readback.produced_faces, readback.face_bytes_mean

    def identities(self) -> tuple[list[Timeline], int]:
        readback = self._read_back()
        return list(readback.timelines), readback.duplicates

    def _read_back(self) -> RunReadback:
        if self.readback is None:
            collected = self.collect(["--run-id", self.run_id, "--since-ms", str(self.since_ms)])
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
        ready = [pod for pod in self.cluster.pods(self._selector(self.pods.consumers))
                 if pod.metadata.deletion_timestamp is None and any(
                     c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])]
        if not ready:
            raise UserError(f"no ready pod of {self.pods.consumers} to run aitax collect in")
        timeout_s = READBACK_TIMEOUT_S if "--run-id" in args else GROUP_TIMEOUT_S
        # As the reader where the chart mounted its identity (security on): a consumer's own may not read results
        reader = [f"{TLS_ENV}={READER_MOUNT}"] if any(
            mount.mount_path == READER_MOUNT for container in ready[0].spec.containers
            for mount in container.volume_mounts or []) else []
        output = self.cluster.exec(ready[0].metadata.name, self.pods.consumers.container,
                                   ["env", *reader, "aitax", "collect", *args], timeout_s)
        line = next((line for line in reversed(output.splitlines()) if line.startswith("{")), "")
        try:
            return Collected.model_validate_json(line)
        except ValueError:
            raise UserError(f"aitax collect {' '.join(args)} in pod/{ready[0].metadata.name}: not its JSON line: "
                            f"{output.strip()[-200:]!r}") from None
