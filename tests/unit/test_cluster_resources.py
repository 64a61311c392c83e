"""A Kubernetes phase's resources from Prometheus's answers (the HTTP API faked at its edge): the same Usage, and so
the same verdict, as a local run's. The real release's Prometheus is in tests/cluster/test_real_cluster.py."""

from __future__ import annotations

import json
import time

import pytest

from aitax.common.errors import UserError
from aitax.experiment.cluster_resources import ClusterResources, PhaseQueries, prometheus_query
from aitax.load.resources import resources

BROKERS = {"t-aitax-kafka-0": 0, "t-aitax-kafka-1": 1, "t-aitax-kafka-2": 2}


def answer(promql: str, _at: float) -> list[tuple[dict[str, str], float]]:
    """What a release's Prometheus holds after a phase whose broker 1 ran its request handlers flat out."""
    def each(values: list[float]) -> list[tuple[dict[str, str], float]]:
        return [({"pod": pod}, value) for pod, value in zip(BROKERS, values, strict=True)]

    if "aitax_block_device_" in promql:  # a release without disk meters (kafka.diskMeter.enabled false)
        return []
    if "container_cpu_usage_seconds_total" in promql and 'id="/"' in promql:
        return [({}, 0.5)]
    if "process_cpu_seconds_total" in promql and "kafka" in promql:
        return each([0.2, 0.9, 0.2])
    if "process_cpu_seconds_total" in promql:
        return [({}, 0.4 if "emulate-producers" in promql else 0.6)]
    if "replicationbytesin" in promql:  # each broker follows the others' partitions
        return each([20e6, 20e6, 20e6])
    if "replicationbytesout" in promql:
        return each([20e6, 20e6, 20e6])
    if "bytesin" in promql:  # as the leader, from the producers
        return each([10e6, 11e6, 9e6])
    if "bytesout" in promql:  # to the consumers
        return each([10e6, 11e6, 9e6])
    if "request_handler_idle_ns_total" in promql:
        return each([30 * 0.8e9, 30 * 0.05e9, 30 * 0.8e9])  # idle ns over a 30 s window: broker 1 95% busy
    if "processor_idle_ratio" in promql:
        return each([0.9, 0.7, 0.9])
    if "underminisr" in promql:
        return each([0.0, 2.0, 0.0])
    if 'request="Produce"' in promql:
        return each([12.0, 180.0, 15.0])
    if 'request="FetchConsumer"' in promql:
        return each([500.0, 501.0, 502.0])
    raise AssertionError(f"unexpected query {promql}")


def disks(promql: str) -> list[tuple[dict[str, str], float]]:
    """The disk meters: broker 0 alone on node a's vda1 (calibrated), brokers 1 and 2 on node b's vda1, written hard."""
    if "write_capacity" in promql:
        return [({"node": "a", "device": "vda1"}, 200e6)]
    per_node = {"written_bytes": (20e6, 90e6), "read_bytes": (1e6, 0.0), "writes_completed": (150.0, 700.0),
                "reads_completed": (3.0, 0.0), "io_time_seconds": (0.1, 0.98)}
    counter = next(name for name in per_node if f"aitax_block_device_{name}_total" in promql)
    node_a, node_b = per_node[counter]
    return [({"pod": "t-aitax-kafka-0", "node": "a", "device": "vda1"}, node_a),
            ({"pod": "t-aitax-kafka-1", "node": "b", "device": "vda1"}, node_b),
            ({"pod": "t-aitax-kafka-2", "node": "b", "device": "vda1"}, node_b)]


def test_a_phase_on_pods_gets_the_local_runs_usage_and_verdict() -> None:
    asked: list[tuple[str, float]] = []

    def query(promql: str, at: float) -> list[tuple[dict[str, str], float]]:
        asked.append((promql, at))
        return answer(promql, at)

    sampler = ClusterResources(query, PhaseQueries("lab", "t-aitax-kafka", {"emulate-producers": "t-aitax-emulate-"
                                                                            "producers", "emulate-consumers":
                                                                            "t-aitax-emulate-consumers"}))
    end = time.monotonic()
    usage = sampler.usage(end - 30, end)
    assert usage.broker_cpu_cores == {0: 0.2, 1: 0.9, 2: 0.2}
    # Log appends: leader and follower bytes in. Network: client and replication bytes, in and out.
    assert usage.broker_write_bytes_per_s == {0: 30e6, 1: 31e6, 2: 29e6}
    assert usage.broker_network_bytes_per_s == {0: 60e6, 1: 62e6, 2: 58e6}
    assert usage.broker_handler_busy[1] == pytest.approx(0.95) and usage.broker_network_busy[1] == pytest.approx(0.3)
    assert (usage.under_min_isr_partitions, usage.produce_p99_ms, usage.fetch_p99_ms) == (2, 180.0, 502.0)
    assert usage.machine_cpu_busy == 0.5 and usage.role_cpu_cores == {"emulate-producers": 0.4,
                                                                      "emulate-consumers": 0.6}
    # Every query asks for the window's end, by the wall clock, over the window's length.
    assert {round(at) for _, at in asked} == {round(time.time())}
    assert all("[30s]" in promql for promql, _ in asked if "rate(" in promql or "increase(" in promql)
    # A stage's CPU: its processes' own, joined to the pods they name (their targets carry only an address).
    stages = [promql for promql, _ in asked if "process_cpu" in promql and "kafka" not in promql]
    assert len(stages) == 2 and all("on (instance)" in q and 'aitax_process_info{host=~"t-aitax-emulate-' in q
                                    for q in stages), stages
    assert [q for q, _ in asked if "container_" in q] == [  # cAdvisor: the machine's root cgroup only
        'max(rate(container_cpu_usage_seconds_total{id="/"}[30s])) / max(machine_cpu_cores)']
    assert all('topic=""' in promql for promql, _ in asked if "brokertopicmetrics" in promql)  # per broker, all topics
    assert usage.devices == {} and usage.broker_devices == {}  # no disk meters: no device figures, no failure
    verdict = resources(usage, None)
    assert verdict.saturated.startswith("the brokers' request handlers at 95%"), verdict.saturated
    assert "2 partition(s) under min ISR" in verdict.saturated


def test_a_shaped_link_is_measured_against_its_rate_and_named_when_it_ran_out() -> None:
    end = time.monotonic()
    shaped = ClusterResources(answer, PhaseQueries("lab", "t-aitax-kafka", {}), link_rate_mbit=lambda: 250.0)
    usage = shaped.usage(end - 30, end)
    # The busier way of each broker's link: 30, 31, 29 MB/s each way against 250 Mbit/s.
    assert usage.broker_link_busy == pytest.approx({0: 0.96, 1: 0.992, 2: 0.928})
    assert resources(usage, None).saturated.startswith("the brokers' links at 99%")
    unshaped = ClusterResources(answer, PhaseQueries("lab", "t-aitax-kafka", {}), link_rate_mbit=lambda: None)
    assert unshaped.usage(end - 30, end).broker_link_busy == {}


def test_each_nodes_devices_under_the_log_dirs_are_read_from_the_disk_meters() -> None:
    end = time.monotonic()
    metered = ClusterResources(lambda promql, at: disks(promql) if "aitax_block_device_" in promql
                               else answer(promql, at), PhaseQueries("lab", "t-aitax-kafka", {}))
    usage = metered.usage(end - 30, end)
    # One device per node, whichever brokers share it; each broker knows its own.
    assert usage.broker_devices == {0: ["vda1@a"], 1: ["vda1@b"], 2: ["vda1@b"]}
    assert usage.device_nodes == {"vda1@a": "a", "vda1@b": "b"}
    assert usage.devices["vda1@b"].write_bytes_per_s == 90e6 and usage.devices["vda1@b"].write_iops == 700.0
    assert usage.devices["vda1@a"].utilisation == pytest.approx(0.1)
    verdict = resources(usage, None)
    rows = {(row.node, row.device): row for row in verdict.storage}
    assert rows["b", "vda1"].brokers == [1, 2] and rows["b", "vda1"].utilisation == pytest.approx(0.98)
    assert rows["a", "vda1"].write_share == pytest.approx(0.1) and rows["b", "vda1"].write_share is None
    assert verdict.broker_storage_utilisation == pytest.approx({0: 0.1, 1: 0.98, 2: 0.98})
    # Busier than the request handlers (95%): the verdict names the node's device and the brokers on it.
    assert verdict.saturated.startswith("broker storage (vda1@b, brokers 1,2) at 98%"), verdict.saturated


def test_a_window_shorter_than_two_scrapes_is_read_over_two() -> None:
    asked: list[str] = []
    sampler = ClusterResources(lambda promql, at: asked.append(promql) or [], PhaseQueries("lab", "k", {}))
    usage = sampler.usage(100.0, 103.0)
    assert usage.seconds == 10 and all("[10s]" in q for q in asked if "rate(" in q and "container_" not in q)
    assert all("[30s]" in q for q in asked if "container_" in q)  # cAdvisor's samples come every 10-15 s
    assert usage.broker_cpu_cores == {} and usage.machine_cpu_busy == 0.0  # nothing scraped: zeros, not a crash


def test_prometheus_answers_are_read_and_refusals_are_one_line() -> None:
    def serving(body: dict) -> object:
        return prometheus_query(lambda path, params: json.dumps(body))

    ok = {"status": "success", "data": {"resultType": "vector",
                                        "result": [{"metric": {"pod": "k-0"}, "value": [1.0, "2.5"]}]}}
    assert serving(ok)("up", 1.0) == [({"pod": "k-0"}, 2.5)]
    with pytest.raises(UserError, match=r"^Prometheus refused 'up\(': parse error"):
        serving({"status": "error", "error": "parse error"})("up(", 1.0)
    with pytest.raises(UserError, match="not JSON"):
        prometheus_query(lambda path, params: "<html>")("up", 1.0)


class OnePhase:
    """A load that acknowledges and identifies nothing, at once: only how the engine takes resources is looked at."""

    def __init__(self) -> None:
        from aitax.runs.results import Driver, Workload

        self.workload = Workload(mode="emulated", producers=1, consumers=1, duration_s=0.05, drain_s=0)
        self.driver, self.run_id = Driver(), "phase-1"

    def start_consumers(self) -> None: ...

    def start_producers(self) -> None: ...

    def pids(self) -> dict[str, list[int]]:
        return {}

    def alive(self) -> bool:
        return True

    def finish_producers(self, interrupted: bool) -> None: ...

    def drain(self, timeout_s: float, on_lag: object) -> int:
        return 0

    def stop(self) -> list[str]:
        return []

    def failures(self) -> list[str]:
        return []

    def produced(self) -> tuple[int, float]:
        return 0, 0.0

    def identities(self) -> tuple[list, int]:
        return [], 0


def test_a_prometheus_that_fails_costs_the_phase_its_resources_not_its_result() -> None:
    from aitax.load.engine import run_load

    def gone(promql: str, at: float) -> list[tuple[dict[str, str], float]]:
        raise UserError("GET api/v1/query of service/t-aitax-prometheus in namespace lab: 503 no endpoints")

    result = run_load(OnePhase(), sampler=ClusterResources(gone, PhaseQueries("lab", "t-aitax-kafka", {})))
    assert result.resources is None and result.run_id == "phase-1"
    assert result.notes == ["resources not measured: GET api/v1/query of service/t-aitax-prometheus in namespace lab: "
                            "503 no endpoints"]
    measured = run_load(OnePhase(), sampler=ClusterResources(answer, PhaseQueries("lab", "t-aitax-kafka", {})))
    assert measured.resources is not None and measured.resources.broker_cpu_cores == {0: 0.2, 1: 0.9, 2: 0.2}
