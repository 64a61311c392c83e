"""The block devices under a broker's log dirs, served as Prometheus counters: how a cluster's phases read storage
at the device, per node, as the local sampler reads it from the machine (`load.resources`).

Runs beside each broker (the chart's `disks` container, sharing the pod's log-dir volumes read-only): it finds the
device that holds each log dir (`common.block_devices.device_of`) and, on every scrape, reads that device's
block-layer counters from /sys, which a container sees whole without any privilege. So the figures are the node's
own device, whoever else writes to it, as iostat would show them on that node. Names follow node-exporter's
`node_disk_*` (bytes, completed I/Os, io_time), under `aitax_` with the log dirs and the node as labels.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from aitax.common.block_devices import SYSFS, BlockDevice, counters, device_of
from aitax.common.errors import UserError

LABELS = ["node", "device", "log_dirs"]


def devices_under(log_dirs: Iterable[Path]) -> tuple[dict[BlockDevice, list[str]], list[str]]:
    """Each device under `log_dirs`, with the dirs it holds, and the dirs on no block device (tmpfs, an overlay:
    nothing to read there). A dir that does not exist is an error."""
    found: dict[BlockDevice, list[str]] = {}
    unmetered = []
    for directory in log_dirs:
        if not directory.is_dir():
            raise UserError(f"{directory}: not a directory (a broker log dir to meter)")
        device = device_of(directory)
        if device is None:
            unmetered.append(str(directory))
        else:
            found.setdefault(device, []).append(str(directory))
    return found, unmetered


class DiskCollector(Collector):
    """Counters read at each scrape; `capacity` is a device's calibrated sequential write, where measured."""

    def __init__(self, node: str, devices: dict[BlockDevice, list[str]],
                 capacity: dict[str, float] | None = None, sysfs: Path = SYSFS) -> None:
        self.node = node
        self.devices = devices
        self.capacity = capacity or {}
        self.sysfs = sysfs

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        families = {
            "written": CounterMetricFamily("aitax_block_device_written_bytes", "Bytes written to the device",
                                           labels=LABELS),
            "read": CounterMetricFamily("aitax_block_device_read_bytes", "Bytes read from the device", labels=LABELS),
            "writes": CounterMetricFamily("aitax_block_device_writes_completed", "Write I/Os completed",
                                          labels=LABELS),
            "reads": CounterMetricFamily("aitax_block_device_reads_completed", "Read I/Os completed", labels=LABELS),
            "busy": CounterMetricFamily("aitax_block_device_io_time_seconds",
                                        "Time with an I/O in flight (iostat's %util over a window)", labels=LABELS),
        }
        capacity = GaugeMetricFamily("aitax_block_device_write_capacity_bytes_per_second",
                                     "Sequential O_DIRECT write measured on the device at start", labels=LABELS)
        for device, dirs in self.devices.items():
            labels = [self.node, device.name, ",".join(dirs)]
            counted = counters(device, self.sysfs)
            families["written"].add_metric(labels, counted.write_bytes)
            families["read"].add_metric(labels, counted.read_bytes)
            families["writes"].add_metric(labels, counted.write_ios)
            families["reads"].add_metric(labels, counted.read_ios)
            families["busy"].add_metric(labels, counted.busy_ms / 1000)
            if device.name in self.capacity:
                capacity.add_metric(labels, self.capacity[device.name])
        yield from families.values()
        yield capacity


def serve(collector: DiskCollector, port: int, host: str = "0.0.0.0") -> int:
    """Serve `/metrics` in a background thread; returns the port (0: any free one)."""
    registry = CollectorRegistry()
    registry.register(collector)
    server, _ = start_http_server(port, addr=host, registry=registry)
    return server.server_port
