"""A Kubernetes phase's resources, from the release's own Prometheus (chart value `prometheus.enabled`): the same
`Usage` the local sampler measures, so the same verdict (`load.resources.resources`) names what saturated.

Read once, after the drain, over the measurement window: Prometheus sampled all along (every few seconds), so
nothing runs beside the load. The queries go through the API server's service proxy, so the experiment driver
needs no route into the cluster.

- Each broker (pod `<kafka StatefulSet>-N`, keyed N), from its JMX exporter (the local stack's meters): its JVM's
  CPU cores, its log appends (bytes in as leader and as follower: what it writes to its log), its network (client
  and replication bytes, in and out), its request-handler and network-thread busy shares, under-min-ISR
  partitions, and produce / fetch p99. The kubelet here (containerd, cgroup v1) gives cAdvisor only pod-level
  cgroups, with CPU and memory and no network or filesystem bytes, and the release's Prometheus reads its own
  node's kubelet only: the brokers' own counters stand in for those, on any cluster and node alike.
- Each node's block devices under the brokers' log dirs, from the disk meter beside each broker (chart value
  `kafka.diskMeter`): bytes, I/Os and busy time at the block layer (iostat's %util), as the local sampler reads the
  machine's; named `<device>@<node>`, with the brokers each serves. The log-append meters above still give what the
  brokers wrote to their logs (the planner's bytes per face), before the page cache.
- Each broker's link, where `aitax cluster` shapes it: the busier way (client and replication bytes in, or out) as
  a share of the rate. Payload only: the wire carries a few per cent more (docs/kubernetes.md, link_bench).
- The machine: its CPU busy share (cAdvisor's root cgroup over the machine's cores).
- The load's own pods: CPU cores, by stage (each process's own), as the local verdict names whoever burnt the CPU.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass

from aitax.common.block_devices import DeviceUsage
from aitax.common.errors import UserError
from aitax.load.resources import Usage

PROMETHEUS_COMPONENT = "prometheus"
SHORTEST_WINDOW_S = 10  # two scrapes at the chart's 5 s: a shorter window has no rate
# cAdvisor's samples carry its housekeeping time (every 10-15 s), not the scrape's: a rate over a 10-20 s window
# found two samples for one broker of three. Its rates look back at least this far from the window's end.
CADVISOR_RANGE_S = 30

Query = Callable[[str, float], list[tuple[dict[str, str], float]]]  # PromQL at a wall-clock time -> series


@dataclass(frozen=True)
class PhaseQueries:
    """What the queries select: the namespace, the brokers' StatefulSet, and each role's Deployment."""

    namespace: str
    kafka: str  # the StatefulSet: its pods are `<kafka>-<ordinal>`
    roles: dict[str, str]  # role (as the verdict names it) -> Deployment name


class ClusterResources:
    """The engine's resource sampler for a release's pods: `usage(start, end)` over two monotonic times."""

    def __init__(self, query: Query, selects: PhaseQueries,
                 link_rate_mbit: Callable[[], float | None] = lambda: None) -> None:
        self.query = query
        self.selects = selects
        self.link_rate_mbit = link_rate_mbit  # each broker's link as the phase shaped it, read after the phase
        self.wall_offset_s = time.time() - time.monotonic()

    def __enter__(self) -> ClusterResources:
        return self

    def __exit__(self, *_: object) -> None:
        pass

    def watch(self, role: str, pids: list[int]) -> None:
        """Pods have no local processes: each process reports its own CPU (process_cpu_seconds_total), wherever
        its node is; a Prometheus reads cAdvisor on its own node only."""

    def usage(self, start: float, end: float) -> Usage:
        seconds = max(SHORTEST_WINDOW_S, round(end - start))
        at, window = end + self.wall_offset_s, f"{seconds}s"
        kafka = f'component="kafka",pod=~"{_literal(self.selects.kafka)}-[0-9]+"'

        def per_broker(promql: str) -> dict[int, float]:
            return {int(labels["pod"].rsplit("-", 1)[1]): value for labels, value in self.query(promql, at)
                    if labels.get("pod", "").rsplit("-", 1)[-1].isdigit()}

        def rate(metric: str, where: str, over: str = window) -> str:
            return f"sum by (pod) (rate({metric}{{{where}}}[{over}]))"

        cadvisor_window = f"{max(seconds, CADVISOR_RANGE_S)}s"
        usage = Usage(float(seconds))
        usage.broker_cpu_cores = per_broker(rate("process_cpu_seconds_total", kafka))  # the JVM's, from JMX

        def bytes_per_s(*meters: str) -> dict[int, float]:
            each = [per_broker(rate(f"kafka_server_brokertopicmetrics_{meter}_total", f'{kafka},topic=""'))
                    for meter in meters]
            return {node: sum(rates.get(node, 0.0) for rates in each) for node in set().union(*each)}

        usage.broker_write_bytes_per_s = bytes_per_s("bytesin", "replicationbytesin")  # = what comes in
        sent = bytes_per_s("bytesout", "replicationbytesout")
        usage.broker_network_bytes_per_s = {node: usage.broker_write_bytes_per_s.get(node, 0.0) + sent.get(node, 0.0)
                                            for node in {*usage.broker_write_bytes_per_s, *sent}}
        rate_mbit = self.link_rate_mbit()
        if rate_mbit:
            usage.broker_link_busy = {node: max(usage.broker_write_bytes_per_s.get(node, 0.0), sent.get(node, 0.0))
                                      * 8 / (rate_mbit * 1e6) for node in usage.broker_network_bytes_per_s}
        idle = per_broker(f"sum by (pod) (increase(kafka_server_request_handler_idle_ns_total{{{kafka}}}[{window}]))")
        usage.broker_handler_busy = {node: min(1.0, max(0.0, 1 - ns / (seconds * 1e9))) for node, ns in idle.items()}
        usage.broker_network_busy = {node: min(1.0, max(0.0, 1 - ratio)) for node, ratio in per_broker(
            f"max by (pod) (kafka_network_processor_idle_ratio{{{kafka}}})").items()}
        usage.under_min_isr_partitions = round(max(per_broker(
            f"max by (pod) (max_over_time(kafka_server_replicamanager_underminisrpartitioncount{{{kafka}}}"
            f"[{window}]))").values(), default=0.0))
        for field, request in (("produce_p99_ms", "Produce"), ("fetch_p99_ms", "FetchConsumer")):
            setattr(usage, field, max(per_broker(
                f'max by (pod) (kafka_network_request_total_time_ms{{{kafka},quantile="0.99",request="{request}"}})'
            ).values(), default=0.0))
        self._devices(usage, at, kafka, window)
        # The machine: every node of `aitax cluster` is a namespace on it, and each kubelet reports it whole.
        busy = self.query(f'max(rate(container_cpu_usage_seconds_total{{id="/"}}[{cadvisor_window}])) '
                          f'/ max(machine_cpu_cores)', at)
        usage.machine_cpu_busy = min(1.0, busy[0][1]) if busy else 0.0
        for role, deployment in self.selects.roles.items():
            # A stage's process names its pod (its host name) in aitax_process_info; its target has no pod label.
            pods = f'host=~"{_literal(deployment)}-[a-z0-9]+-[a-z0-9]+"'
            # Over the window: the producers' pods are gone by its end.
            used = self.query(f"sum(rate(process_cpu_seconds_total[{window}]) * on (instance) group_left() "
                              f"max_over_time(aitax_process_info{{{pods}}}[{window}]))", at)
            usage.role_cpu_cores[role] = used[0][1] if used else 0.0
        return usage


    def _devices(self, usage: Usage, at: float, kafka: str, window: str) -> None:
        """Each node's devices under the brokers' log dirs, from the brokers' disk meters (`aitax disk-meter`): a
        device is `<device>@<node>`; two brokers on one node and device read it once."""
        rates: dict[str, dict[str, float]] = {}
        for counter in ("written_bytes", "read_bytes", "writes_completed", "reads_completed", "io_time_seconds"):
            series = self.query(f"max by (pod, node, device) "
                                f"(rate(aitax_block_device_{counter}_total{{{kafka}}}[{window}]))", at)
            for labels, value in series:
                name = f"{labels.get('device', '?')}@{labels.get('node', '?')}"
                rates.setdefault(name, {})[counter] = value
                usage.device_nodes[name] = labels.get("node", "?")
                broker = labels.get("pod", "").rsplit("-", 1)[-1]
                if broker.isdigit() and name not in usage.broker_devices.setdefault(int(broker), []):
                    usage.broker_devices[int(broker)].append(name)
        usage.devices = {name: DeviceUsage(
            device=name.rsplit("@", 1)[0], read_bytes_per_s=got.get("read_bytes", 0.0),
            write_bytes_per_s=got.get("written_bytes", 0.0), read_iops=got.get("reads_completed", 0.0),
            write_iops=got.get("writes_completed", 0.0), busy_share=min(1.0, got.get("io_time_seconds", 0.0)))
            for name, got in rates.items()}
        for labels, value in self.query(f"max by (node, device) "
                                        f"(aitax_block_device_write_capacity_bytes_per_second{{{kafka}}})", at):
            usage.device_write_capacity[f"{labels.get('device', '?')}@{labels.get('node', '?')}"] = value


def _literal(name: str) -> str:
    """A Kubernetes name (lower case, digits, '-' and '.') as a regex inside a PromQL string: its dots escaped."""
    return name.replace(".", "\\\\.")


def prometheus_query(get: Callable[[str, dict[str, str]], str]) -> Query:
    """PromQL instant queries over Prometheus's HTTP API, `get(path, params)` being the transport."""

    def query(promql: str, at: float) -> list[tuple[dict[str, str], float]]:
        try:
            answer = json.loads(get("api/v1/query", {"query": promql, "time": f"{at:.3f}"}))
        except ValueError as error:
            raise UserError(f"Prometheus answered {promql!r} with something that is not JSON: {error}") from None
        if answer.get("status") != "success":
            raise UserError(f"Prometheus refused {promql!r}: {answer.get('error', answer)}")
        return [(series["metric"], float(series["value"][1])) for series in answer["data"]["result"]]

    return query
