"""Block devices as the kernel's block layer counts them: which device holds a path, and its cumulative counters
(`/sys/class/block/<name>/stat`, the numbers iostat reads).

Utilisation is iostat's %util: the share of wall time the device had at least one request in flight (io_ticks).
A drive throttled in the block layer (`stack.drives`) holds its bios above the device, so its io_ticks stay low
while it is written at its limit: there the share of the declared rate is the utilisation (`DeviceUsage`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

SECTOR_BYTES = 512  # the stat file counts 512-byte sectors whatever the device's own sector size
SYSFS = Path("/sys")


@dataclass(frozen=True)
class BlockDevice:
    name: str  # e.g. vda, vda1, loop3
    major: int
    minor: int

    @property
    def number(self) -> str:
        """MAJ:MIN, as cgroup throttles and bdi name it."""
        return f"{self.major}:{self.minor}"


@dataclass(frozen=True)
class DeviceCounters:
    read_ios: int
    read_bytes: int
    write_ios: int
    write_bytes: int
    busy_ms: int  # io_ticks: time with a request in flight


@dataclass(frozen=True)
class DeviceUsage:
    """One device over a window. `rate_limit_bytes_per_s`: the declared bandwidth of a throttled drive (None: a
    real device, judged by its busy time)."""

    device: str
    read_bytes_per_s: float
    write_bytes_per_s: float
    read_iops: float
    write_iops: float
    busy_share: float
    rate_limit_bytes_per_s: float | None = None

    @property
    def utilisation(self) -> float:
        """iostat's %util; on a throttled drive the busier way's share of its declared rate, when higher."""
        if self.rate_limit_bytes_per_s is None:
            return self.busy_share
        by_rate = max(self.read_bytes_per_s, self.write_bytes_per_s) / self.rate_limit_bytes_per_s
        return max(self.busy_share, by_rate)


def device_of(path: Path, sysfs: Path = SYSFS) -> BlockDevice | None:
    """The block device whose filesystem holds `path` (None: tmpfs, overlay or another device-less filesystem)."""
    number = os.stat(path).st_dev
    major, minor = os.major(number), os.minor(number)
    link = sysfs / "dev" / "block" / f"{major}:{minor}"
    if not link.exists():
        return None
    return BlockDevice(link.resolve().name, major, minor)


def counters(device: BlockDevice, sysfs: Path = SYSFS) -> DeviceCounters:
    fields = [int(value) for value in (sysfs / "class" / "block" / device.name / "stat").read_text().split()]
    # read I/Os, read merges, read sectors, read ticks, write I/Os, write merges, write sectors, write ticks,
    # in flight, io_ticks, ...
    return DeviceCounters(read_ios=fields[0], read_bytes=fields[2] * SECTOR_BYTES, write_ios=fields[4],
                          write_bytes=fields[6] * SECTOR_BYTES, busy_ms=fields[9])


def usage_between(device: str, first: DeviceCounters, last: DeviceCounters, seconds: float,
                  rate_limit_bytes_per_s: float | None = None) -> DeviceUsage:
    seconds = max(seconds, 1e-6)
    return DeviceUsage(
        device=device,
        read_bytes_per_s=(last.read_bytes - first.read_bytes) / seconds,
        write_bytes_per_s=(last.write_bytes - first.write_bytes) / seconds,
        read_iops=(last.read_ios - first.read_ios) / seconds,
        write_iops=(last.write_ios - first.write_ios) / seconds,
        busy_share=min(1.0, (last.busy_ms - first.busy_ms) / (seconds * 1000)),
        rate_limit_bytes_per_s=rate_limit_bytes_per_s,
    )
