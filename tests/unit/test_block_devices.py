"""Block-layer counters, utilisation as iostat computes it, and declared designs scaled onto this machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from aitax.common.block_devices import BlockDevice, DeviceUsage, counters, device_of, usage_between
from aitax.common.errors import UserError
from aitax.common.paths import PROJECT_ROOT
from aitax.stack.config import StackConfig
from aitax.stack.design import load_design

STAT = "{r} 0 {rs} 10 {w} 3 {ws} 22 0 {busy} 39 2 0 2097160 0 5 7\n"


def _fake_sysfs(tmp_path: Path, **fields: int) -> tuple[Path, BlockDevice]:
    device = BlockDevice("loop7", 7, 7)
    stat = tmp_path / "class" / "block" / "loop7" / "stat"
    stat.parent.mkdir(parents=True, exist_ok=True)
    stat.write_text(STAT.format(**fields))
    return tmp_path, device


def test_counters_read_the_block_layers_stat_file_in_bytes(tmp_path: Path) -> None:
    sysfs, device = _fake_sysfs(tmp_path, r=60, rs=2202, w=193, ws=447912, busy=416)
    counted = counters(device, sysfs)
    assert (counted.read_ios, counted.write_ios, counted.busy_ms) == (60, 193, 416)
    assert counted.read_bytes == 2202 * 512 and counted.write_bytes == 447912 * 512


def test_utilisation_is_busy_time_or_the_share_of_a_declared_rate(tmp_path: Path) -> None:
    sysfs, device = _fake_sysfs(tmp_path, r=0, rs=0, w=0, ws=0, busy=0)
    first = counters(device, sysfs)
    # 10 s: 200 MB written (390625 sectors), busy 0.4 s, as a throttled loop device read on this kernel
    sysfs, device = _fake_sysfs(tmp_path, r=5, rs=40, w=172, ws=390625, busy=400)
    last = counters(device, sysfs)
    real = usage_between("loop7", first, last, 10.0)
    assert real.write_bytes_per_s == pytest.approx(20e6) and real.write_iops == pytest.approx(17.2)
    assert real.utilisation == pytest.approx(0.04)  # a real device: iostat's %util
    declared = usage_between("loop7", first, last, 10.0, rate_limit_bytes_per_s=20e6)
    assert declared.utilisation == pytest.approx(1.0)  # the bios wait above the device, at its limit
    assert DeviceUsage("d", 0, 0, 0, 0, busy_share=0.7, rate_limit_bytes_per_s=20e6).utilisation == 0.7


def test_a_path_maps_to_the_device_under_its_filesystem() -> None:
    device = device_of(PROJECT_ROOT)
    assert device is not None and (Path("/sys/class/block") / device.name / "stat").exists()
    assert device_of(Path("/proc")) is None  # no block device under procfs


def test_the_paper_design_scales_every_capacity_by_one_factor() -> None:
    design = load_design(PROJECT_ROOT / "designs" / "paper.yaml")
    testbed = design.testbed(machine_cores=2, dirty_ratio=0.2)
    # 3 brokers x 56 cores into half of two cores
    assert testbed.scale == pytest.approx(168)
    assert testbed.broker_cpu_cores == pytest.approx(56 / 168)
    assert testbed.drive_bytes_per_s == pytest.approx(design.broker.drives.write_mb_s * 1e6 / 168)
    assert testbed.link_mbit == pytest.approx(100_000 / 168)
    assert testbed.dirty_bytes_per_drive == pytest.approx(384 * 2**30 / 168 * 0.2, rel=1e-6)
    assert testbed.client_cpu_cores == pytest.approx(1.0)
    # the ratios are the design's: seconds of the drive's writes the dirty budget holds, cores per MB/s
    assert testbed.dirty_bytes_per_drive / testbed.drive_bytes_per_s == pytest.approx(
        384 * 2**30 * 0.2 / (design.broker.drives.write_mb_s * 1e6))


def test_every_shipped_design_loads_and_fits_this_kind_of_machine() -> None:
    for path in sorted((PROJECT_ROOT / "designs").glob("*.yaml")):
        testbed = load_design(path).testbed(machine_cores=2, dirty_ratio=0.2)
        assert 0 < testbed.broker_cpu_cores * 3 < 2, path


def test_a_bad_design_is_one_line_naming_file_and_field(tmp_path: Path) -> None:
    path = tmp_path / "d.yaml"
    path.write_text("name: x\nbroker: {cpu_cores: 4, memory_gb: 8, link_gbit_s: 10, drives: {write_mb_s: -3}}\n")
    with pytest.raises(UserError, match=r"d.yaml: broker.drives.write_mb_s: a drive writes more than 0"):
        load_design(path)
    path.write_text("name: x\nbrokers: 3\nbroker: {cpu_cores: 4, memory_gb: 8, link_gbit_s: 10, drives: {write_mb_s: "
                    "100}}\nscale: 1\n")
    with pytest.raises(UserError, match="leave none of this machine's 2 cores"):
        load_design(path).testbed(machine_cores=2, dirty_ratio=0.2)
    with pytest.raises(UserError, match=r"missing\.yaml: cannot read the design \(No such file"):
        load_design(tmp_path / "missing.yaml")


def test_a_stack_on_a_testbed_is_described_with_it(tmp_path: Path) -> None:
    testbed = load_design(PROJECT_ROOT / "designs" / "paper.yaml").testbed(machine_cores=2, dirty_ratio=0.2)
    config = StackConfig(testbed=testbed)
    config.save(tmp_path / "stack.json")
    assert StackConfig.load(tmp_path / "stack.json") == config


def test_on_a_testbed_the_verdict_reads_cpu_against_the_slices() -> None:
    from aitax.load.resources import Usage, saturated_resource

    usage = Usage(20.0, broker_cpu_cores={1: 0.31, 2: 0.2, 3: 0.2}, machine_cpu_busy=0.6,
                  role_cpu_cores={"the emulator's consumers": 0.3}, broker_cpu_quota_cores=1 / 3,
                  client_cpu_quota_cores=1.0)
    assert saturated_resource(usage, None).startswith("the brokers' CPU slices at 93%")
    usage.role_cpu_cores = {"the emulator's consumers": 0.99}
    usage.broker_cpu_cores = {1: 0.1}
    assert saturated_resource(usage, None).startswith("the load's CPU slice at 99%")


def test_a_calibration_measures_each_device_once_and_skips_what_has_none(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from aitax.stack import calibration

    monkeypatch.setenv("AITAX_HOME", str(tmp_path / "home"))
    measure = calibration.measure_write
    monkeypatch.setattr(calibration, "measure_write", lambda directory: measure(directory, max_bytes=16 << 20))
    lines: list[str] = []
    log_dir = tmp_path / "data-1"
    results = calibration.calibrate([log_dir, Path("/dev/shm")], progress=lines.append)
    device = device_of(log_dir)
    assert list(results) == [device.name] and results[device.name]["write_bytes_per_s"] > 0
    assert calibration.write_capacity(device.name) == results[device.name]["write_bytes_per_s"]
    calibration.calibrate([log_dir], progress=lines.append)  # measured already: not again
    assert len(lines) == 1 and lines[0].startswith(f"calibrated {device.name}")
    calibration.forget(device.name)
    assert calibration.write_capacity(device.name) is None
