"""What the brokers and the machine spend during a load run, sampled once a second, and what saturated first.

Per broker process: CPU seconds (on a testbed, less its JIT compiler threads', which run outside its slice and
fall to "other processes") and storage write/read bytes (psutil's I/O counters: what the kernel accounts to
the process, page-cache reads excluded). Per device under the brokers' log dirs: the block layer's own counters
(bytes, I/Os and busy time, `common.block_devices`), whose utilisation is the paper's Fig. 11b: iostat's %util,
or on a testbed's drive the share of its declared bandwidth. On a testbed, each broker's CPU against its slice
and the load's against its own. Per broker, from its
own exported meters: the request-handler busy share (from the cumulative idle time, so exact per window), the
network threads' busy share, under-min-ISR partitions, and produce / consumer-fetch p99 as the broker sees
them. Per watched client process (the emulator's producers and consumers): CPU seconds. Machine-wide: CPU busy
share and loopback bytes (all brokers and clients here talk over 127.0.0.1; the paper's Fig. 11a network).
"""

from __future__ import annotations

import os
import threading
import time
import urllib.request
from dataclasses import dataclass, field

import psutil

from aitax.common.block_devices import BlockDevice, DeviceCounters, DeviceUsage, counters, device_of
from aitax.common.block_devices import usage_between as device_usage_between
from aitax.runs.results import Resources, StorageDevice
from aitax.stack import calibration, cpu_slices, kafka
from aitax.stack.config import StackConfig
from aitax.telemetry.latency import LatencySummary

OTHER_PROCESSES_SHOWN_CORES = 0.1
SATURATION = 0.85  # a resource busier than this is saturated (the paper saw storage give out near 67%)

# The broker meters read (names from aitax/stack/maven/kafka-metrics.yaml), each line's name up to its value.
BROKER_METERS = {
    "kafka_server_request_handler_idle_ns_total": "handler_idle_ns",
    "kafka_network_processor_idle_ratio": "network_idle",
    "kafka_server_replicamanager_underminisrpartitioncount": "under_min_isr",
    'kafka_network_request_total_time_ms{quantile="0.99",request="Produce"}': "produce_p99_ms",
    'kafka_network_request_total_time_ms{quantile="0.99",request="FetchConsumer"}': "fetch_p99_ms",
}


@dataclass(frozen=True)
class Sample:
    at: float  # monotonic seconds
    broker_cpu_s: dict[int, float]
    broker_write_bytes: dict[int, int]
    broker_read_bytes: dict[int, int]
    cpu_busy_s: float
    cpu_total_s: float
    loopback_bytes: int
    broker_meters: dict[int, dict[str, float]] = field(default_factory=dict)
    role_cpu_s: dict[str, float] = field(default_factory=dict)  # watched client processes, summed by role
    device_counters: dict[str, DeviceCounters] = field(default_factory=dict)  # devices under the log dirs


@dataclass
class Usage:
    seconds: float
    broker_cpu_cores: dict[int, float] = field(default_factory=dict)
    broker_write_bytes_per_s: dict[int, float] = field(default_factory=dict)
    broker_read_bytes_per_s: dict[int, float] = field(default_factory=dict)
    machine_cpu_busy: float = 0.0  # share of all cores
    loopback_bytes_per_s: float = 0.0
    broker_network_bytes_per_s: dict[int, float] = field(default_factory=dict)  # in + out (pods; locally all is lo)
    broker_handler_busy: dict[int, float] = field(default_factory=dict)  # request handlers' busy share
    broker_network_busy: dict[int, float] = field(default_factory=dict)  # network threads' busy share (1-min mean)
    broker_link_busy: dict[int, float] = field(default_factory=dict)  # a shaped link's busier way / its rate
    under_min_isr_partitions: int = 0  # the most seen at once in the window: acks=all writes fail there
    produce_p99_ms: float = 0.0  # the slowest broker's, at the window's end (the broker's recent reservoir)
    fetch_p99_ms: float = 0.0
    role_cpu_cores: dict[str, float] = field(default_factory=dict)
    devices: dict[str, DeviceUsage] = field(default_factory=dict)  # under the brokers' log dirs
    broker_devices: dict[int, list[str]] = field(default_factory=dict)
    device_nodes: dict[str, str] = field(default_factory=dict)  # a cluster's: the node each device is on
    device_write_capacity: dict[str, float] = field(default_factory=dict)  # calibrated sequential write, bytes/s
    machine_cores: int = field(default_factory=lambda: os.cpu_count() or 1)
    broker_cpu_quota_cores: float | None = None  # a testbed's slice per broker
    client_cpu_quota_cores: float | None = None  # ... and the load's


def broker_devices(config: StackConfig) -> dict[int, list[BlockDevice]]:
    """The block devices under each broker's log dirs (none for a log dir on tmpfs)."""
    found: dict[int, list[BlockDevice]] = {}
    for broker in kafka.brokers(config):
        devices = [device for d in broker.log_dirs if d.exists() and (device := device_of(d)) is not None]
        found[broker.node_id] = list(dict.fromkeys(devices))
    return found


def loopback_bytes() -> int:
    with open("/proc/net/dev") as dev:
        for line in dev:
            name, _, counters = line.partition(":")
            if name.strip() == "lo":
                return int(counters.split()[0])  # received on lo = sent on lo
    return 0


def broker_meters(port: int, timeout_s: float = 0.5) -> dict[str, float]:
    """The BROKER_METERS of one broker's metrics endpoint (empty if it does not answer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout_s) as response:
            text = response.read().decode()
    except OSError:
        return {}
    meters = {}
    for line in text.splitlines():
        name, _, value = line.rpartition(" ")
        if name in BROKER_METERS:
            meters[BROKER_METERS[name]] = float(value)
    return meters


def _cpu_seconds(pids: list[int], last_seen: dict[int, float]) -> float:
    """CPU seconds of these processes and their descendants (a real ingest-detect decodes in a child process); one
    that has exited counts with what it had used when last seen. Descendants found are added to `pids`, so they
    keep counting after they exit."""
    for pid in list(pids):
        try:
            pids.extend(child.pid for child in psutil.Process(pid).children(recursive=True) if child.pid not in pids)
        except psutil.Error:
            continue
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        last_seen[pid] = times.user + times.system
    return sum(last_seen.get(pid, 0.0) for pid in pids)


def take_sample(config: StackConfig, watched: dict[str, list[int]] | None = None,
                last_seen: dict[int, float] | None = None, devices: list[BlockDevice] = ()) -> Sample:
    cpu, writes, reads, meters = {}, {}, {}, {}
    for broker in kafka.brokers(config):
        pid = broker.process.pid()
        if pid is None:
            continue
        try:
            process = psutil.Process(pid)
            times, io = process.cpu_times(), process.io_counters()
        except psutil.Error:
            continue
        cpu[broker.node_id] = times.user + times.system
        if config.testbed is not None:  # its JIT compilers run outside its slice (stack.cpu_slices.COMPILERS)
            cpu[broker.node_id] -= cpu_slices.threads_cpu_s(pid, cpu_slices.compiler_threads(pid))
        writes[broker.node_id] = io.write_bytes
        reads[broker.node_id] = io.read_bytes
        meters[broker.node_id] = broker_meters(config.broker_metrics_port(broker.node_id))
    machine = psutil.cpu_times()
    idle = machine.idle + getattr(machine, "iowait", 0.0)
    total = sum(machine)
    roles = {role: _cpu_seconds(pids, {} if last_seen is None else last_seen) for role, pids in (watched or {}).items()}
    return Sample(time.monotonic(), cpu, writes, reads, total - idle, total, loopback_bytes(), meters, roles,
                  {device.name: counters(device) for device in devices})


def usage_between(first: Sample, last: Sample, drive_bytes_per_s: float | None = None) -> Usage:
    """`drive_bytes_per_s`: the declared bandwidth of the log dirs' drives (a testbed's), else None."""
    seconds = max(1e-6, last.at - first.at)
    usage = Usage(seconds)
    usage.devices = {name: device_usage_between(name, first.device_counters[name], counted, seconds,
                                                drive_bytes_per_s)
                     for name, counted in last.device_counters.items() if name in first.device_counters}
    for node in last.broker_cpu_s.keys() & first.broker_cpu_s.keys():
        usage.broker_cpu_cores[node] = (last.broker_cpu_s[node] - first.broker_cpu_s[node]) / seconds
        written = last.broker_write_bytes[node] - first.broker_write_bytes[node]
        usage.broker_write_bytes_per_s[node] = written / seconds
        usage.broker_read_bytes_per_s[node] = (last.broker_read_bytes[node] - first.broker_read_bytes[node]) / seconds
    total = last.cpu_total_s - first.cpu_total_s
    usage.machine_cpu_busy = (last.cpu_busy_s - first.cpu_busy_s) / total if total > 0 else 0.0
    usage.loopback_bytes_per_s = (last.loopback_bytes - first.loopback_bytes) / seconds
    for node, meters in last.broker_meters.items():
        before = first.broker_meters.get(node, {})
        if "handler_idle_ns" in meters and "handler_idle_ns" in before:
            idle_share = (meters["handler_idle_ns"] - before["handler_idle_ns"]) / (seconds * 1e9)
            usage.broker_handler_busy[node] = min(1.0, max(0.0, 1 - idle_share))
        if "network_idle" in meters:
            usage.broker_network_busy[node] = min(1.0, max(0.0, 1 - meters["network_idle"]))
        usage.produce_p99_ms = max(usage.produce_p99_ms, meters.get("produce_p99_ms", 0.0))
        usage.fetch_p99_ms = max(usage.fetch_p99_ms, meters.get("fetch_p99_ms", 0.0))
    usage.role_cpu_cores = {role: (last.role_cpu_s[role] - first.role_cpu_s.get(role, 0.0)) / seconds
                            for role in last.role_cpu_s}
    return usage


class Sampler:
    """Samples in a background thread; `usage(start, end)` covers the samples between two monotonic times."""

    def __init__(self, config: StackConfig, interval_s: float = 1.0) -> None:
        self.config = config
        self.interval_s = interval_s
        self.watched: dict[str, list[int]] = {}
        self._last_seen: dict[int, float] = {}  # pid -> CPU seconds when last sampled
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="resource-sampler", daemon=True)
        self.broker_devices = broker_devices(config)
        self._devices = list(dict.fromkeys(d for devices in self.broker_devices.values() for d in devices))

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def watch(self, role: str, pids: list[int]) -> None:
        """Also account the CPU of these client processes, as `role` (before the window starts)."""
        self.watched = {**self.watched, role: [*self.watched.get(role, []), *pids]}

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(take_sample(self.config, self.watched, self._last_seen, self._devices))
            self._stop.wait(self.interval_s)

    def usage(self, start: float, end: float) -> Usage:
        window = [s for s in self.samples if start <= s.at <= end]
        if len(window) < 2:
            window = self.samples[-2:]
        if len(window) < 2:
            return Usage(0.0)
        testbed = self.config.testbed
        declared = (testbed.drive_bytes_per_s or None) if testbed else None  # 0: the machine's own disk
        usage = usage_between(window[0], window[-1], declared)
        usage.broker_devices = {node: [d.name for d in devices] for node, devices in self.broker_devices.items()}
        usage.device_write_capacity = {name: entry["write_bytes_per_s"] for name, entry in calibration.load().items()
                                       if name in usage.devices}
        if testbed is not None:
            usage.broker_cpu_quota_cores = testbed.broker_cpu_cores
            usage.client_cpu_quota_cores = testbed.client_cpu_cores
            # Local brokers share loopback, which is not shaped: every byte on it, over the brokers, against the
            # design's link, is an upper bound of each broker's link.
            link_bytes_per_s = testbed.link_mbit * 1e6 / 8
            usage.broker_link_busy = {node: usage.loopback_bytes_per_s / self.config.brokers / link_bytes_per_s
                                      for node in self.config.node_ids}
        usage.under_min_isr_partitions = int(max(m.get("under_min_isr", 0.0) for s in window
                                                 for m in s.broker_meters.values()) if window[-1].broker_meters
                                             else 0)
        return usage


def storage_devices(usage: Usage) -> list[StorageDevice]:
    """Each device under the log dirs, with the brokers it serves and its share of its calibrated write rate."""
    rows = []
    for name, device in usage.devices.items():
        capacity = usage.device_write_capacity.get(name)
        rows.append(StorageDevice(
            device=device.device, node=usage.device_nodes.get(name),
            brokers=sorted(n for n, names in usage.broker_devices.items() if name in names),
            write_bytes_per_s=device.write_bytes_per_s, read_bytes_per_s=device.read_bytes_per_s,
            write_iops=device.write_iops, read_iops=device.read_iops, busy_share=device.busy_share,
            utilisation=device.utilisation, declared_bytes_per_s=device.rate_limit_bytes_per_s,
            calibrated_write_bytes_per_s=capacity,
            write_share=None if not capacity else device.write_bytes_per_s / capacity))
    return rows


def resources(usage: Usage, latency: LatencySummary | None) -> Resources:
    """The results model's view of a window's usage, with what saturated first."""
    def mean(values: dict[int, float]) -> float:
        return sum(values.values()) / len(values) if values else 0.0

    return Resources(
        broker_disk_write_bytes_per_s=mean(usage.broker_write_bytes_per_s),
        broker_disk_read_bytes_per_s=mean(usage.broker_read_bytes_per_s),
        broker_write_bytes_per_s=usage.broker_write_bytes_per_s, broker_cpu_cores=usage.broker_cpu_cores,
        machine_cpu_busy=usage.machine_cpu_busy, loopback_bytes_per_s=usage.loopback_bytes_per_s,
        broker_network_bytes_per_s=usage.broker_network_bytes_per_s,
        broker_handler_busy=usage.broker_handler_busy, broker_network_busy=usage.broker_network_busy,
        broker_link_busy=usage.broker_link_busy, under_min_isr_partitions=usage.under_min_isr_partitions,
        produce_p99_ms=usage.produce_p99_ms, fetch_p99_ms=usage.fetch_p99_ms, client_cpu_cores=usage.role_cpu_cores,
        storage=storage_devices(usage), broker_storage_utilisation=broker_storage_utilisation(usage),
        broker_cpu_slice_busy=broker_cpu_slice_busy(usage), client_cpu_slice_busy=client_cpu_slice_busy(usage),
        busiest_utilisation=busiest_resource(usage)[1], saturated=saturated_resource(usage, latency))


def broker_storage_utilisation(usage: Usage) -> dict[int, float]:
    """Each broker's busiest log-dir device (shared devices count for every broker on them)."""
    return {node: max(usage.devices[name].utilisation for name in names if name in usage.devices)
            for node, names in usage.broker_devices.items() if any(name in usage.devices for name in names)}


def broker_cpu_slice_busy(usage: Usage) -> dict[int, float]:
    quota = usage.broker_cpu_quota_cores
    return {} if not quota else {node: cores / quota for node, cores in usage.broker_cpu_cores.items()}


def client_cpu_slice_busy(usage: Usage) -> float | None:
    quota = usage.client_cpu_quota_cores
    return None if not quota else sum(usage.role_cpu_cores.values()) / quota


def busiest_resource(usage: Usage) -> tuple[str, float]:
    """The resource nearest its capacity, and its utilisation: the brokers' own meters, utilisation at the
    devices, and on a testbed the CPU slices."""
    utilisation = {
        "the brokers' request handlers": max(usage.broker_handler_busy.values(), default=0.0),
        "the brokers' network threads": max(usage.broker_network_busy.values(), default=0.0),
        "cpu (machine)": usage.machine_cpu_busy,
    }
    for name, device in usage.devices.items():
        served = sorted(n for n, names in usage.broker_devices.items() if name in names)
        utilisation[f"broker storage ({name}, broker{'s' * (len(served) > 1)} "
                    f"{','.join(map(str, served))})"] = device.utilisation
    if slices := broker_cpu_slice_busy(usage):
        utilisation["the brokers' CPU slices"] = max(slices.values())
    if (clients := client_cpu_slice_busy(usage)) is not None:
        utilisation["the load's CPU slice"] = clients
    if usage.broker_link_busy:
        utilisation["the brokers' links"] = max(usage.broker_link_busy.values())
    return max(utilisation.items(), key=lambda item: item[1])


def saturated_resource(usage: Usage, latency: LatencySummary | None) -> str:
    """Which resource ran out first (`busiest_resource`) and where faces waited.

    A saturated machine CPU is attributed to whoever burnt the most of it: the brokers, or the load's own
    producers or consumers (then the verdict is about the load generator, not about Kafka)."""
    handlers = max(usage.broker_handler_busy.values(), default=0.0)
    network = max(usage.broker_network_busy.values(), default=0.0)
    name, busiest = busiest_resource(usage)
    under_min_isr = (f", {usage.under_min_isr_partitions} partition(s) under min ISR"
                     if usage.under_min_isr_partitions else "")
    signals = (f"[broker handlers {handlers:.0%} busy, network {network:.0%}, produce p99 {usage.produce_p99_ms:.0f} "
               f"ms, fetch p99 {usage.fetch_p99_ms:.0f} ms{under_min_isr}]")
    if busiest >= SATURATION:
        verdict = f"{name} at {busiest:.0%}"
        if name == "cpu (machine)":
            verdict += ", " + cpu_owner(usage)
        return f"{verdict} {signals}"
    if latency is not None:
        stage = max(latency.breakdown_ms, key=lambda s: latency.breakdown_ms[s])
        return f"none above {SATURATION:.0%} (busiest: {name} {busiest:.0%}); faces waited most in {stage} {signals}"
    return f"none above {SATURATION:.0%} (busiest: {name} {busiest:.0%}) {signals}"


def cpu_owner(usage: Usage) -> str:
    """'mostly the brokers (1.10 cores; ...)': who used the CPU, in cores; what neither the brokers nor the load
    burnt is the rest of the machine's (Elasticsearch, a build beside the run), so it is never charged to them."""
    cores = {"the brokers": sum(usage.broker_cpu_cores.values()), **usage.role_cpu_cores}
    rest = usage.machine_cpu_busy * usage.machine_cores - sum(cores.values())
    if rest > OTHER_PROCESSES_SHOWN_CORES:
        cores["other processes"] = rest
    owner = max(cores, key=lambda role: cores[role])
    others = "; ".join(f"{role} {used:.2f}" for role, used in cores.items() if role != owner)
    return f"mostly {owner} ({cores[owner]:.2f} cores{'; ' + others if others else ''})"
