"""What the brokers and the machine spend during an emulated run, sampled once a second.

Per broker process: CPU seconds and block-layer write/read bytes (psutil's I/O counters: what the kernel
accounts to the process for storage, page-cache reads excluded) — the paper's Fig. 11b. Machine-wide: CPU busy
share and loopback bytes (all brokers and clients here talk over 127.0.0.1; the paper's Fig. 11a network).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import psutil

from aitax.stack import kafka
from aitax.stack.config import StackConfig


@dataclass(frozen=True)
class Sample:
    at: float  # monotonic seconds
    broker_cpu_s: dict[int, float]
    broker_write_bytes: dict[int, int]
    broker_read_bytes: dict[int, int]
    cpu_busy_s: float
    cpu_total_s: float
    loopback_bytes: int


@dataclass
class Usage:
    seconds: float
    broker_cpu_cores: dict[int, float] = field(default_factory=dict)
    broker_write_bytes_per_s: dict[int, float] = field(default_factory=dict)
    broker_read_bytes_per_s: dict[int, float] = field(default_factory=dict)
    machine_cpu_busy: float = 0.0  # share of all cores
    loopback_bytes_per_s: float = 0.0


def loopback_bytes() -> int:
    with open("/proc/net/dev") as dev:
        for line in dev:
            name, _, counters = line.partition(":")
            if name.strip() == "lo":
                return int(counters.split()[0])  # received on lo = sent on lo
    return 0


def take_sample(config: StackConfig) -> Sample:
    cpu, writes, reads = {}, {}, {}
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
        writes[broker.node_id] = io.write_bytes
        reads[broker.node_id] = io.read_bytes
    machine = psutil.cpu_times()
    idle = machine.idle + getattr(machine, "iowait", 0.0)
    total = sum(machine)
    return Sample(time.monotonic(), cpu, writes, reads, total - idle, total, loopback_bytes())


def usage_between(first: Sample, last: Sample) -> Usage:
    seconds = max(1e-6, last.at - first.at)
    usage = Usage(seconds)
    for node in last.broker_cpu_s.keys() & first.broker_cpu_s.keys():
        usage.broker_cpu_cores[node] = (last.broker_cpu_s[node] - first.broker_cpu_s[node]) / seconds
        written = last.broker_write_bytes[node] - first.broker_write_bytes[node]
        usage.broker_write_bytes_per_s[node] = written / seconds
        usage.broker_read_bytes_per_s[node] = (last.broker_read_bytes[node] - first.broker_read_bytes[node]) / seconds
    total = last.cpu_total_s - first.cpu_total_s
    usage.machine_cpu_busy = (last.cpu_busy_s - first.cpu_busy_s) / total if total > 0 else 0.0
    usage.loopback_bytes_per_s = (last.loopback_bytes - first.loopback_bytes) / seconds
    return usage


class Sampler:
    """Samples in a background thread; `usage(start, end)` covers the samples between two monotonic times."""

    def __init__(self, config: StackConfig, interval_s: float = 1.0) -> None:
        self.config = config
        self.interval_s = interval_s
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="resource-sampler", daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(take_sample(self.config))
            self._stop.wait(self.interval_s)

    def usage(self, start: float, end: float) -> Usage:
        window = [s for s in self.samples if start <= s.at <= end]
        if len(window) < 2:
            window = self.samples[-2:]
        return usage_between(window[0], window[-1]) if len(window) >= 2 else Usage(0.0)
