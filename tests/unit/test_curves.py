"""Device curves: time per batch against batch size, their files, and the emulated stages that sleep them."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from aitax.common.errors import UserError
from aitax.emulation.curves import BatchCurve, built_in_curves, load_curve, write_curve
from aitax.emulation.profile import Distribution, paper_profile
from aitax.emulation.workers import EmulatedFaceFinder, EmulatedIdentifier
from aitax.pipeline.schema import FaceMessage, FaceMeta
from aitax.telemetry.timing import Stopwatch

CURVE = BatchCurve("t", "identify", ((1, 2.0), (8, 3.4), (32, 8.2)))


@pytest.mark.parametrize(("batch", "ms"), [(1, 2.0), (4, 2.6), (8, 3.4), (20, 5.8), (32, 8.2), (64, 14.6)])
def test_a_curve_interpolates_between_its_points_and_extends_its_last_slope(batch: int, ms: float) -> None:
    assert CURVE.ms(batch) == pytest.approx(ms)


def test_below_its_first_point_a_curve_costs_that_point_and_a_falling_tail_never_goes_below_its_last() -> None:
    assert BatchCurve("t", "identify", ((4, 3.0), (8, 5.0))).ms(1) == 3.0
    falling = BatchCurve("t", "detect", ((1, 21.3), (2, 25.0), (8, 20.0)))  # as measured: a noisy last point
    assert falling.ms(64) == 20.0 and falling.ms(5) == pytest.approx(22.5)
    with pytest.raises(ValueError, match="at least 1"):
        CURVE.ms(0)


def test_a_spread_multiplies_the_time_per_batch_around_its_median() -> None:
    spread = BatchCurve("t", "identify", ((1, 10.0),), Distribution(((0.0, 0.9), (0.5, 1.0), (1.0, 1.3))))
    assert spread.ms(1) == pytest.approx(10.0)
    draws = [spread.ms(1, random.Random(seed)) for seed in range(200)]
    assert 9.0 <= min(draws) < 9.5 and 12.0 < max(draws) <= 13.0


def test_the_shipped_curves_read_back_with_their_stage_and_provenance() -> None:
    assert set(built_in_curves()) == {"h200-bf16", "h200-fp16", "h200-mtcnn", "epyc-openvino-bf16"}
    assert load_curve("epyc-openvino-bf16").host_cpu and not load_curve("h200-bf16").host_cpu
    bf16 = load_curve("h200-bf16")
    assert bf16.stage == "identify" and bf16.ms(1) == pytest.approx(2.113) and bf16.ms(256) == pytest.approx(7.862)
    # The note's straight line (2.05 ms + 0.0227 ms per face) within 10% at every batch from 8 up
    assert all(abs(bf16.ms(n) - (2.05 + 0.0227 * n)) / bf16.ms(n) < 0.1 for n in (8, 16, 64, 256))
    assert load_curve("h200-mtcnn").stage == "detect"
    assert "Not measured" in built_in_curves()["h200-fp16"].read_text()


def test_a_written_curve_round_trips_and_a_linear_one_reads_as_two_points(tmp_path: Path) -> None:
    spread = Distribution(((0.0, 0.95), (0.5, 1.0), (1.0, 1.2)))
    path = write_curve(tmp_path / "cpu.yaml", "cpu-bf16", "identify", "this machine", [(1, 7.2), (8, 48.0)], spread)
    again = load_curve(str(path))
    assert again == BatchCurve("cpu-bf16", "identify", ((1, 7.2), (8, 48.0)), spread)
    linear = tmp_path / "linear.yaml"
    linear.write_text("version: 1\nname: l\nstage: identify\nprovenance: p\nfixed_ms: 2.0\nper_item_ms: 0.5\n")
    assert load_curve(str(linear)).ms(10) == pytest.approx(7.0)


@pytest.mark.parametrize(("text", "message"), [
    ("version: 1\nname: x\nstage: identify\nprovenance: p\nper_batch_ms: [[2, 1.0], [1, 2.0]]\n",
     "per_batch_ms: batch sizes must increase"),
    ("version: 1\nname: x\nstage: identify\nprovenance: p\nfixed_ms: 1\n", "fixed_ms and per_item_ms go together"),
    ("version: 1\nname: x\nstage: ingest\nprovenance: p\nfixed_ms: 1\nper_item_ms: 1\n", "stage 'ingest'"),
    ("version: 1\nname: x\nstage: identify\nper_batch_ms: [[1, 1.0]]\n", "provenance: field required"),
    ("version: 2\n", "curve version 2, expected 1"),
])
def test_a_malformed_curve_file_is_one_line_naming_the_field(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(UserError) as raised:
        load_curve(str(path))
    assert message in str(raised.value) and str(path) in str(raised.value) and "\n" not in str(raised.value)


def test_the_emulated_identify_sleeps_the_curves_time_for_the_batch_it_formed(monkeypatch) -> None:
    from aitax.emulation import workers

    computed: list[tuple[float, bool]] = []
    monkeypatch.setattr(workers, "emulated_compute", lambda seconds, on_cpu: computed.append((seconds, on_cpu)))
    with_curve = EmulatedIdentifier(paper_profile(), 1000.0, random.Random(1), CURVE)
    for faces in (1, 5, 32):
        with_curve(_faces(faces), Stopwatch())
    # The device's time for each batch, not divided by the factor (it raises the load, not the device's speed)
    assert [s for s, _ in computed] == pytest.approx([0.002, CURVE.ms(5) / 1000, 0.0082])
    assert not any(on_cpu for _, on_cpu in computed)  # a device's curve leaves the host's cores free
    computed.clear()
    EmulatedIdentifier(paper_profile(), 2.0, random.Random(1))(_faces(3), Stopwatch())
    assert computed == [(pytest.approx(3 * 131.5 / 2 / 1000), False)]  # the profile's per-face times, summed, / factor
    computed.clear()
    EmulatedFaceFinder(paper_profile(), 8.0, random.Random(1), load_curve("h200-mtcnn"))(None, Stopwatch())
    assert computed == [(pytest.approx(0.0213), False)]  # one frame per call: the curve's batch of one


def test_a_curve_measured_on_the_host_cpu_takes_cpu_time_whatever_the_profile_does(monkeypatch, tmp_path) -> None:
    from aitax.emulation import workers

    computed: list[tuple[float, bool]] = []
    monkeypatch.setattr(workers, "emulated_compute", lambda seconds, on_cpu: computed.append((seconds, on_cpu)))
    host = load_curve(str(write_curve(tmp_path / "cpu.yaml", "cpu", "identify", "test", [(1, 10.0)], host_cpu=True)))
    EmulatedIdentifier(paper_profile(), 1.0, random.Random(1), host, on_cpu=False)(_faces(1), Stopwatch())
    EmulatedIdentifier(paper_profile(), 1.0, random.Random(1), on_cpu=True)(_faces(1), Stopwatch())
    assert [on_cpu for _, on_cpu in computed] == [True, True]


def test_compute_on_the_cpu_takes_this_threads_cpu_time_and_a_sleep_takes_none() -> None:
    import time

    from aitax.emulation.workers import emulated_compute

    for on_cpu, low, high in ((True, 0.04, 1.0), (False, 0.0, 0.01)):
        started = time.thread_time()
        emulated_compute(0.05, on_cpu)
        assert low <= time.thread_time() - started <= high


def test_calibration_times_each_batch_size_and_writes_a_curve_the_emulator_reads(tmp_path: Path) -> None:
    import time

    from aitax.emulation.calibrate import time_batches

    runs: list[int] = []

    def run(batch: int) -> None:
        runs.append(batch)
        time.sleep((1.0 + 0.5 * batch) / 1000)  # 1 ms per batch + 0.5 ms per item

    done: list[int] = []
    points, spread = time_batches(run, (1, 4), repeats=5, progress=done.append)
    assert runs == [1] * 8 + [4] * 8 and done == [1, 4]  # 3 warm-up runs, then 5 timed, per size
    assert [n for n, _ in points] == [1, 4]
    assert points[0][1] >= 1.5 and points[1][1] >= 3.0 and points[1][1] > points[0][1]
    assert spread.quantile(0.5) == pytest.approx(1.0, abs=0.05)
    path = write_curve(tmp_path / "mine.yaml", "sleepy", "identify", "a test", points, spread)
    assert load_curve(str(path)).ms(4) == pytest.approx(points[1][1], abs=1e-4)  # written to 0.1 us


def test_the_speed_up_a_device_gave_is_read_at_the_batch_the_median_face_was_identified_in() -> None:
    from dataclasses import replace

    from aitax.emulation.sweep import device_speedup
    from aitax.telemetry.latency import summarize
    from tests.unit.results_builders import emulated_run, identity

    faces = [replace(identity(i * 100, 50), batch_size=1 if i < 2 else 8) for i in range(10)]
    run = emulated_run(32, True, 1e6)
    run = run.model_copy(update={"latency": summarize(faces), "workload": run.workload.model_copy(
        update={"accelerators": ["h200-bf16"]})})
    # The CPU's time per face at batch 8 against the device's at batch 8 (2.278 ms / 8 faces)
    cpu = load_curve("epyc-openvino-bf16")
    assert device_speedup(run, "epyc-openvino-bf16") == pytest.approx(cpu.ms(8) / 2.278)
    assert device_speedup(run.model_copy(update={"workload": run.workload.model_copy(
        update={"accelerators": ["h200-mtcnn"]})}), "epyc-openvino-bf16") is None  # no identify curve


def _faces(count: int) -> list[FaceMessage]:
    """Emulated faces with their (random) thumbnails: each one costs the emulated identify its share of a batch."""
    meta = FaceMeta("r", "s", 0, 0, count, (0, 0, 160, 160), 1.0, "synthetic", 0, 0, 0, 0, 0, 0)
    return [FaceMessage(meta, b"x")] * count
