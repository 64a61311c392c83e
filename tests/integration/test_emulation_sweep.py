"""The emulator against real brokers: every field of a factor's result, and verdicts that can fail."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from aitax.stack.config import StackConfig
from emulation.profile import paper_profile
from emulation.sweep import SweepSpec, highest_stable, run_factor

pytestmark = pytest.mark.integration


def _spec(producers: int, consumers: int, duration_s: float = 8.0) -> SweepSpec:
    return SweepSpec(factors=[1.0], duration_s=duration_s, producers=producers, consumers=consumers, processes=1,
                     profile=paper_profile(), profile_name="paper")


def test_light_load_is_stable_and_reports_every_field(stack: StackConfig, tmp_path: Path, unique_name: str) -> None:
    # 1 stream at 10 faces/s; 3 consumers at 131.5 ms per face can take 22 faces/s.
    result = run_factor(_spec(producers=1, consumers=3), stack, 1.0, unique_name, tmp_path)
    assert result.stable, result.reasons
    assert result.offered_faces_per_s == pytest.approx(10.0)
    assert result.achieved_faces_per_s >= 8.0
    assert result.produced_faces >= result.identified_faces >= 70
    assert result.face_bytes_mean == pytest.approx(37_300)
    assert result.latency is not None and result.latency.faces == result.identified_faces
    # One face takes at least its emulated compute: 18.8 + 74.8 + 131.5 ms.
    assert result.latency.mean_ms > 225
    assert set(result.latency.breakdown_ms) == {"schedule_delay", "ingest", "frame_queue", "detect",
                                                "broker_wait", "identify"}
    # A face waits for its whole batch's emulated compute: at least its own 131.5 ms.
    assert result.latency.breakdown_ms["identify"] >= 131.5 * 0.95
    assert set(result.broker_write_bytes_per_s) == set(stack.node_ids)
    # RF 3: every broker writes the thumbnails' bytes (10 x 37.3 kB/s), give or take Kafka's own overhead.
    assert result.broker_disk_write_bytes_per_s > 100_000
    assert 0 < result.machine_cpu_busy <= 1
    for field in dataclasses.fields(result):
        assert getattr(result, field.name) is not None, field.name


def test_overload_is_judged_unstable(stack: StackConfig, tmp_path: Path, unique_name: str) -> None:
    # 3 streams offer 30 faces/s; one consumer can take 7.6 faces/s: faces pile up in the brokers.
    result = run_factor(_spec(producers=3, consumers=1), stack, 1.0, unique_name, tmp_path)
    assert not result.stable
    assert result.achieved_faces_per_s < 0.5 * result.offered_faces_per_s
    assert highest_stable([result]) is None


def test_bad_input_is_refused_before_anything_starts(stack: StackConfig) -> None:
    for args, message in ((["--factors", "0,2"], "every factor must be > 0"),
                          (["--brokers", "5"], "the running stack has 3"),
                          (["--profile", "nope"], "neither a built-in")):
        result = subprocess.run([sys.executable, "-m", "aitax.cli", "emulate", *args], capture_output=True,
                                text=True, timeout=60)
        assert result.returncode == 2, result.stderr
        assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
