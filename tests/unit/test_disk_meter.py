"""The disk meter beside each broker (`aitax disk-meter`): a log dir's device and its block-layer counters, served
for Prometheus; a dir it cannot meter is one line."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from aitax.common.block_devices import BlockDevice
from aitax.common.errors import UserError
from aitax.telemetry.disk_meter import DiskCollector, devices_under, serve

STAT = "{r} 0 {rs} 10 {w} 3 {ws} 22 0 {busy} 39 2 0 2097160 0 5 7\n"


def scraped(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Each sample's name -> its (labels, value) pairs, as Prometheus would read them."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples


def test_each_scrape_reads_the_devices_counters_with_node_and_log_dirs(tmp_path: Path) -> None:
    stat = tmp_path / "class" / "block" / "loop7" / "stat"
    stat.parent.mkdir(parents=True)
    stat.write_text(STAT.format(r=60, rs=2000, w=193, ws=4000, busy=1500))
    device = BlockDevice("loop7", 7, 7)
    port = serve(DiskCollector("node-b", {device: ["/data-0", "/data-1"]}, {"loop7": 2e8}, tmp_path), 0, "127.0.0.1")
    labels = {"node": "node-b", "device": "loop7", "log_dirs": "/data-0,/data-1"}
    first = scraped(port)
    assert first["aitax_block_device_written_bytes_total"] == [(labels, 4000 * 512)]
    assert first["aitax_block_device_reads_completed_total"] == [(labels, 60)]
    assert first["aitax_block_device_io_time_seconds_total"] == [(labels, 1.5)]
    assert first["aitax_block_device_write_capacity_bytes_per_second"] == [(labels, 2e8)]
    stat.write_text(STAT.format(r=61, rs=2000, w=393, ws=9000, busy=2500))  # read anew at every scrape
    again = scraped(port)
    assert again["aitax_block_device_written_bytes_total"] == [(labels, 9000 * 512)]
    assert again["aitax_block_device_writes_completed_total"] == [(labels, 393)]


def test_a_real_log_dir_is_metered_on_its_own_device(tmp_path: Path) -> None:
    devices, unmetered = devices_under([tmp_path])  # this machine's temporary folders are on its disk
    assert unmetered == []
    port = serve(DiskCollector("here", devices), 0, "127.0.0.1")
    before = scraped(port)["aitax_block_device_written_bytes_total"][0][1]
    with open(tmp_path / "segment", "wb") as segment:
        segment.write(os.urandom(8 << 20))
        segment.flush()
        os.fsync(segment.fileno())
    assert scraped(port)["aitax_block_device_written_bytes_total"][0][1] - before >= 8 << 20


def test_a_missing_dir_is_one_line_and_one_on_no_device_is_named_and_left_out(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"/nowhere: not a directory"):
        devices_under([tmp_path / "nowhere"])
    devices, unmetered = devices_under([Path("/dev/shm"), tmp_path])
    assert unmetered == ["/dev/shm"] and [dirs for dirs in devices.values()] == [[str(tmp_path)]]
    missing = subprocess.run([sys.executable, "-m", "aitax.cli", "disk-meter", "--log-dir", str(tmp_path / "nowhere")],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode != 0 and "Traceback" not in missing.stderr
    assert missing.stderr.strip().splitlines()[-1].endswith("/nowhere: not a directory (a broker log dir to meter)")
    # A meter beside a broker whose log dir is on tmpfs says so once and keeps serving: the broker never waits on it.
    with subprocess.Popen([sys.executable, "-m", "aitax.cli", "disk-meter", "--log-dir", "/dev/shm", "--port", "0",
                           "--host", "127.0.0.1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as meter:
        try:
            line = meter.stderr.readline()
            assert line.strip() == "/dev/shm: on no block device (tmpfs or overlay): its storage is not metered"
            assert meter.poll() is None
        finally:
            meter.terminate()
        assert meter.wait(10) == 0  # SIGTERM: a clean exit
