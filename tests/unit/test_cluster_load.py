"""A phase on a release's pods (`ClusterLoad`), with the API server and `aitax collect` faked at their edges: when
the consumers count as ready, what counts as a failure, and what is read back. (The whole path against a real API
server: tests/k8s; on real pods: tests/cluster.)"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from aitax.common.errors import UserError
from aitax.experiment import cluster_load
from aitax.experiment.cluster_load import ClusterLoad, PhasePods
from aitax.experiment.kubernetes_api import Scaled
from aitax.pipeline.transport.readback import Collected, GroupState, RunReadback
from aitax.runs.results import Workload
from aitax.telemetry.latency import Timeline

CONSUMERS = Scaled(stage="emulate-consumers", kind="Deployment", name="t-aitax-emulate-consumers",
                   container="emulate-consumers", original_replicas=2,
                   args=("emulate-consumers", "--instances", "2", "--group", "faces-group", "--factor", "1"))
PRODUCERS = Scaled(stage="emulate-producers", kind="Deployment", name="t-aitax-emulate-producers",
                   container="emulate-producers", original_replicas=1, args=("emulate-producers",))


def _pod(name: str, restarts: int = 0, phase: str = "Running", reason: str | None = None) -> SimpleNamespace:
    terminated = SimpleNamespace(reason=reason, exit_code=137) if reason else None
    status = SimpleNamespace(restart_count=restarts, last_state=SimpleNamespace(terminated=terminated))
    return SimpleNamespace(metadata=SimpleNamespace(name=name, deletion_timestamp=None),
                           status=SimpleNamespace(phase=phase, container_statuses=[status]))


class FakeCluster:
    """The API calls ClusterLoad makes, recorded; pods per component as the test sets them."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.pods_by_component: dict[str, list] = {"emulate-consumers": [], "emulate-producers": []}

    def set_env(self, scaled: Scaled, env: dict) -> None:
        self.calls.append(("env", scaled.stage, env["AITAX_RUN_ID"], env["AITAX_ACCELERATION_FACTOR"],
                           env.get("AITAX_IN_FLIGHT", "untouched")))

    def scale(self, scaled: Scaled, replicas: int) -> None:
        self.calls.append(("scale", scaled.stage, replicas))
        if replicas == 0:  # the pods terminate (at once here)
            self.pods_by_component[scaled.stage] = []

    def wait_rollouts(self, workloads: list[Scaled], timeout_s: float) -> dict[str, int]:
        self.calls.append(("rollout", workloads[0].stage))
        return {}

    def pods(self, selector: str) -> list:
        return self.pods_by_component[selector.rsplit("=", 1)[1]]


def _group(state: str = "STABLE", members: int = 4, assigned: int = 4, partitions: int = 12,
           lag: int = 0) -> Collected:
    return Collected(group=GroupState(group="faces-group", topic="faces", state=state, members=members,
                                      assigned=assigned, partitions=partitions, lag=lag))


def _load(cluster: FakeCluster, answers: list[Collected | Exception], asked: list[list[str]],
          rollout_timeout_s: float = 60, in_flight: int | None = None) -> ClusterLoad:
    def collect(args: list[str]) -> Collected:
        asked.append(args)
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    workload = Workload(mode="emulated", producers=1, consumers=4, consumer_processes=2, duration_s=10, factor=4,
                        in_flight=in_flight)
    pods = PhasePods(consumers=CONSUMERS, producers=PRODUCERS, consumer_replicas=2, producer_replicas=1,
                     members=4, group=CONSUMERS.arg("--group"))
    return ClusterLoad(cluster, "t", pods, workload, "run-1", resize_kafka=lambda: cluster.calls.append(("kafka",)),
                       rollout_timeout_s=rollout_timeout_s, collect=collect)


@pytest.fixture(autouse=True)
def _fast_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster_load, "POLL_S", 0.01)


def test_the_chart_arguments_of_a_stage_are_read_by_option() -> None:
    assert (CONSUMERS.arg("--instances"), CONSUMERS.arg("--group"), CONSUMERS.arg("--factor")) == ("2", "faces-group",
                                                                                                    "1")
    assert PRODUCERS.arg("--profile", "paper") == "paper"
    assert Scaled("s", "Deployment", "n", "c", 1, args=("--group", "a", "--group", "b")).arg("--group") == "b"
    assert Scaled("s", "Deployment", "n", "c", 1, args=("x", "--group")).arg("--group") is None  # no value after it


def test_consumers_are_ready_once_every_instance_holds_partitions_and_no_backlog_is_left() -> None:
    cluster, asked = FakeCluster(), []
    cluster.pods_by_component["emulate-producers"] = [_pod("release-own-producer")]
    load = _load(cluster, [_group("PREPARING_REBALANCE", 3, 0), UserError("exec: pod not ready"),
                           _group("STABLE", 4, 3), _group(lag=120), _group()], asked)
    load.start_consumers()
    assert asked == [["--group", "faces-group"]] * 5  # a failed exec is asked again; ready at the fifth answer
    load.start_producers()
    # The release's own producers stop first: what they queued is drained before the phase, not measured in it.
    assert cluster.calls == [
        ("scale", "emulate-producers", 0), ("kafka",),
        ("env", "emulate-consumers", "run-1", "4", "untouched"), ("scale", "emulate-consumers", 2),
        ("rollout", "emulate-consumers"),
        # An open loop: the producers' AITAX_IN_FLIGHT removed (None), whatever a phase before set.
        ("env", "emulate-producers", "run-1", "4", None), ("scale", "emulate-producers", 1),
        ("rollout", "emulate-producers")]


def test_a_closed_loop_phase_rolls_the_producers_out_with_its_frames_in_flight() -> None:
    cluster = FakeCluster()
    load = _load(cluster, [_group()], [], in_flight=3)
    load.start_consumers()
    load.start_producers()
    envs = [call for call in cluster.calls if call[0] == "env"]
    assert envs == [("env", "emulate-consumers", "run-1", "4", "untouched"),
                    ("env", "emulate-producers", "run-1", "4", "3")]


def test_more_instances_than_partitions_is_a_clear_error() -> None:
    load = _load(FakeCluster(), [_group("STABLE", 4, 3, partitions=3)], [])
    with pytest.raises(UserError, match="4 consumer instances in group faces-group: the faces topic has 3 partitions"):
        load.start_consumers()


def test_a_group_that_never_forms_names_what_it_saw() -> None:
    load = _load(FakeCluster(), [_group("COMPLETING_REBALANCE", 4, 2)], [], rollout_timeout_s=0.05)
    with pytest.raises(UserError, match=r"group faces-group not ready after 0 s \(COMPLETING_REBALANCE, 4 members, "
                                        r"2 holding partitions, lag 0; 4 members holding partitions and lag 0 "
                                        r"expected\)"):
        load.start_consumers()


def test_containers_restarted_in_the_phase_are_its_failures() -> None:
    cluster = FakeCluster()
    cluster.pods_by_component["emulate-consumers"] = [_pod("c-1", restarts=1), _pod("c-2")]
    load = _load(cluster, [_group()], [])
    load.start_consumers()  # c-1 had restarted before the phase: not this phase's failure
    cluster.pods_by_component["emulate-producers"] = [_pod("p-1")]
    load.start_producers()
    assert load.alive() and load.failures() == []
    cluster.pods_by_component["emulate-producers"] = [_pod("p-1", 1, reason="Error")]
    assert not load.alive()  # a producer that restarted during the load ends it
    cluster.pods_by_component["emulate-consumers"] = [_pod("c-1", restarts=1), _pod("c-2", 2, reason="OOMKilled")]
    load.finish_producers(interrupted=False)  # the producers' failures are kept once their pods are gone
    assert cluster.calls[-1] == ("scale", "emulate-producers", 0)
    assert load.failures() == ["pod/p-1: running, restarted 1 times (last: Error, exit 137)",
                               "pod/c-2: running, restarted 2 times (last: OOMKilled, exit 137)"]


def test_the_drain_polls_the_lag_and_the_run_is_read_back_once() -> None:
    asked: list[list[str]] = []
    timelines = [Timeline(*(i * 10 + step for step in range(len(Timeline._fields)))) for i in range(3)]
    readback = Collected(readback=RunReadback(run_id="run-1", produced_faces=3, face_bytes_mean=100.0,
                                              identified_faces=3, duplicates=1, timelines=timelines))
    load = _load(FakeCluster(), [_group(lag=7), _group(lag=2), _group(lag=0), readback], asked)
    lags: list[int] = []
    assert load.drain(5.0, lags.append) == 0 and lags == [7, 2]
    assert load.produced() == (3, 100.0)
    assert load.identities() == (timelines, 1)
    assert asked[-1][:3] == ["--run-id", "run-1", "--since-ms"] and len(asked) == 4  # read back once
