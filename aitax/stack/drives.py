"""Drives of a declared bandwidth for the brokers' log dirs (a testbed's, `StackConfig.testbed`): one loop device
per log dir, with an ext4 filesystem, mounted on the log dir.

Kafka writes through the page cache and the kernel writes back from its flusher threads, which cgroup v1 does not
charge to the writer, so a per-process throttle does not slow a broker. What does (`../shared/notes/storage.md`,
re-checked on this kernel: 200 MiB written at 22.1 MB/s through a 20 MiB/s limit):
- the device's read and write limits in the ROOT blkio cgroup, which catches the flusher's writeback;
- the device's own dirty-page budget (bdi `strict_limit` + `max_bytes`), the part of the page cache a real broker
  would have for that drive, so that a writer meets the drive's limit as on real hardware instead of after minutes.
Needs root. `remove` undoes all of it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from aitax.common.block_devices import BlockDevice, device_of
from aitax.common.errors import UserError
from aitax.common.paths import stack_dir
from aitax.stack import calibration

BLKIO = Path("/sys/fs/cgroup/blkio")
BDI = Path("/sys/class/bdi")
THROTTLES = ("blkio.throttle.write_bps_device", "blkio.throttle.read_bps_device")


def images_dir(design: str) -> Path:
    """A design's drives: each design keeps its own brokers' data, so that switching designs starts none from
    another's logs (recovering them through a slow drive took minutes)."""
    return stack_dir() / "drives" / design


def _run(*argv: str) -> str:
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode:
        raise UserError(f"{' '.join(argv)}: {(result.stderr or result.stdout).strip()[-300:]}")
    return result.stdout.strip()


def require_root() -> None:
    if os.geteuid() != 0:
        raise UserError("a testbed mounts drives and sets kernel limits: run `aitax stack up --design ...` as root")
    if not (BLKIO / THROTTLES[0]).exists():
        raise UserError(f"{BLKIO / THROTTLES[0]} not found: a testbed's drives need cgroup v1's blkio controller")


def is_mounted(path: Path) -> bool:
    return os.path.ismount(path)


def attach(log_dir: Path, design: str, bytes_per_s: float, dirty_bytes: int, size_mb: int) -> BlockDevice:
    """`log_dir` on a drive of `bytes_per_s` (read and write) with `dirty_bytes` of page cache; a drive already
    mounted there gets its limits again (they do not survive a reboot, the image does)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    if not is_mounted(log_dir):
        image = images_dir(design) / f"{log_dir.parent.name}-{log_dir.name}.img"
        image.parent.mkdir(parents=True, exist_ok=True)
        fresh = not image.exists()
        if fresh:
            with open(image, "wb") as file:  # sparse: it takes what is written
                file.truncate(size_mb << 20)
        loop = _run("losetup", "--find", "--show", str(image))
        if fresh:
            _run("mkfs.ext4", "-q", "-E", "lazy_itable_init=0,lazy_journal_init=0", loop)
        _run("mount", loop, str(log_dir))
        if fresh:  # Kafka takes every folder in a log dir for a partition's
            (log_dir / "lost+found").rmdir()
    device = device_of(log_dir)
    if device is None:
        raise UserError(f"{log_dir}: mounted, but on no block device")
    limit(device, bytes_per_s, dirty_bytes)
    return device


def limit(device: BlockDevice, bytes_per_s: float, dirty_bytes: int) -> None:
    """Throttle `device` to `bytes_per_s` each way (0: no limit) and give it `dirty_bytes` of dirty pages."""
    for throttle in THROTTLES:
        (BLKIO / throttle).write_text(f"{device.number} {int(bytes_per_s)}\n")
    bdi = BDI / device.number
    (bdi / "strict_limit").write_text(f"{int(bool(bytes_per_s))}\n")
    if bytes_per_s:
        (bdi / "max_bytes").write_text(f"{dirty_bytes}\n")


def lift(log_dir: Path) -> None:
    """The drive under `log_dir` at the machine's speed: what its page cache holds is written out in seconds (a
    stopping broker's flush, `umount`) instead of at the declared rate, minutes on a slow drive."""
    device = device_of(log_dir) if is_mounted(log_dir) else None
    if device is not None:
        limit(device, 0, 0)


def detach(log_dir: Path) -> None:
    """Lift the drive's limits, unmount it and free its loop device; the image stays, with the broker's data, for
    the next `stack up` (`make clean` removes it with the stack's state)."""
    if not is_mounted(log_dir):
        return
    device = device_of(log_dir)
    if device is not None:
        limit(device, 0, 0)
    _run("umount", str(log_dir))
    if device is not None and device.name.startswith("loop"):
        subprocess.run(["losetup", "--detach", f"/dev/{device.name}"], capture_output=True)
        calibration.forget(device.name)
