"""What each broker drive can write, measured on it: the capacity a share of storage is read against (the planner,
`Resources.broker_storage_write_share`), stored with the stack, never a constant.

Kafka appends to a segment through the page cache and the kernel writes it back in large sequential requests; the
measure is the device's side of that: sequential 1 MiB writes with O_DIRECT (past the page cache, which would
otherwise measure memory) into a file in the log dir, for `seconds` or `max_bytes`, whichever comes first.
"""

from __future__ import annotations

import json
import mmap
import os
import time
from datetime import UTC, datetime
from pathlib import Path

from aitax.common.block_devices import device_of
from aitax.common.errors import UserError
from aitax.common.paths import stack_dir

BLOCK_BYTES = 1 << 20
METHOD = "sequential 1 MiB O_DIRECT writes into a file in the log dir (Kafka's write-back pattern at the device)"


def calibration_file() -> Path:
    return stack_dir() / "storage-calibration.json"


def measure_write(directory: Path, seconds: float = 3.0, max_bytes: int = 1 << 30) -> float:
    """Bytes/s written sequentially to `directory`'s device past the page cache."""
    path = directory / ".aitax-calibration"
    block = mmap.mmap(-1, BLOCK_BYTES)  # page-aligned, as O_DIRECT requires
    block.write(os.urandom(BLOCK_BYTES))
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o600)
    except OSError as error:
        raise UserError(f"{directory}: cannot write there to calibrate ({error.strerror})") from error
    written, started = 0, time.monotonic()
    try:
        while written < max_bytes and time.monotonic() - started < seconds:
            written += os.write(fd, block)
        os.fsync(fd)
        elapsed = time.monotonic() - started
    except OSError as error:
        raise UserError(f"{directory}: cannot write there to calibrate ({error.strerror})") from error
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return written / elapsed


def load() -> dict[str, dict]:
    """device name -> {write_bytes_per_s, measured_at, directory, method}."""
    path = calibration_file()
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text())
    except ValueError as error:
        raise UserError(f"{path}: unreadable calibration ({error}); run `aitax stack calibrate`") from error


def write_capacity(device: str) -> float | None:
    entry = load().get(device)
    return None if entry is None else entry["write_bytes_per_s"]


def forget(device: str) -> None:
    """Drop a device's measurement (a testbed's loop device, whose name the next drive may take)."""
    results = load()
    if results.pop(device, None) is not None:
        calibration_file().write_text(json.dumps(results, indent=2) + "\n")


def calibrate(log_dirs: list[Path], again: bool = False, progress=print) -> dict[str, dict]:
    """Measure each device under `log_dirs` once (every one again with `again`) and store the results."""
    results = load()
    for directory in log_dirs:
        directory.mkdir(parents=True, exist_ok=True)
        device = device_of(directory)
        if device is None or (device.name in results and not again):
            continue
        try:
            bytes_per_s = measure_write(directory)
        except UserError as error:  # a filesystem without O_DIRECT: its storage is still read, only no share
            progress(f"not calibrated: {error}")
            continue
        progress(f"calibrated {device.name} ({directory}): {bytes_per_s / 1e6:.1f} MB/s sequential write")
        results[device.name] = {"write_bytes_per_s": bytes_per_s, "directory": str(directory),
                                "measured_at": datetime.now(UTC).isoformat(timespec="seconds"), "method": METHOD}
    path = calibration_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")
    return results
