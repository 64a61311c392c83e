"""A testbed's drive on a real loop device of declared bandwidth (root): written at its rate through the page cache
as Kafka writes, the block layer reads it busy; idle, it reads idle; the calibration measures its rate."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from aitax.common.block_devices import counters, usage_between
from aitax.stack import calibration, drives

RATE = 20e6  # bytes/s
DIRTY = 16 << 20

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="loop devices and blkio limits need root")


@pytest.fixture
def drive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("AITAX_HOME", str(tmp_path / "home"))
    log_dir = tmp_path / "broker-1" / "data-1"
    device = drives.attach(log_dir, "test", RATE, DIRTY, size_mb=1024)
    yield log_dir, device
    drives.detach(log_dir)
    assert not drives.is_mounted(log_dir)
    assert calibration.write_capacity(device.name) is None  # the next drive may take its loop device's name


def _append_until(path: Path, stop: threading.Event) -> None:
    chunk = os.urandom(64 << 10)
    with open(path, "ab") as segment:
        while not stop.is_set():
            segment.write(chunk)


def test_a_drive_written_at_its_rate_reads_busy_and_idle_reads_idle(drive) -> None:
    log_dir, device = drive
    stop = threading.Event()
    writer = threading.Thread(target=_append_until, args=(log_dir / "00000.log", stop))
    writer.start()
    try:
        time.sleep(3)  # the dirty budget fills first, as a broker's page cache does
        first, started = counters(device), time.monotonic()
        time.sleep(8)
        busy = usage_between(device.name, first, counters(device), time.monotonic() - started, RATE)
    finally:
        stop.set()
        writer.join()
    os.sync()
    time.sleep(1)
    first, started = counters(device), time.monotonic()
    time.sleep(3)
    idle = usage_between(device.name, first, counters(device), time.monotonic() - started, RATE)
    assert busy.utilisation >= 0.9, busy
    assert busy.write_bytes_per_s <= 1.15 * RATE, busy  # the limit holds for buffered writes
    assert idle.utilisation < 0.05, idle


def test_the_calibration_measures_the_drives_rate(drive) -> None:
    log_dir, device = drive
    measured = calibration.calibrate([log_dir], again=True, progress=lambda _: None)[device.name]
    assert 0.8 * RATE <= measured["write_bytes_per_s"] <= 1.2 * RATE, measured
    assert calibration.write_capacity(device.name) == measured["write_bytes_per_s"]
