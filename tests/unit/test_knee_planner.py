"""`aitax plan-knee`: per-face costs read from one sweep, a knee and its resource predicted for another design."""

from __future__ import annotations

from pathlib import Path

import pytest

from aitax.runs.results import Resources, SweepResult
from aitax.stack.config import Testbed
from aitax.tco.knee import (
    PageCache,
    face_costs,
    point_backlog,
    point_seconds,
    predict,
    predicted_knee,
    predicted_sweep_knee,
    with_thumbnails,
    within_one_step,
)
from tests.unit.results_builders import emulated_run

FED = Testbed(design="fed", scale=100, broker_cpu_cores=0.5, client_cpu_cores=0.5, drive_bytes_per_s=10e6,
              dirty_bytes_per_drive=1 << 26, link_mbit=1000)


def _run(factor: float, faces_per_s: float, stable: bool = True):
    run = emulated_run(factor, stable, writes=0.0)
    # per face: 3 ms of broker CPU, 120 kB appended (three replicas), 300 kB on loopback, 1 ms of the load's CPU
    resources = Resources(broker_disk_write_bytes_per_s=40e3 * faces_per_s, broker_disk_read_bytes_per_s=0.0,
                          broker_write_bytes_per_s={n: 40e3 * faces_per_s for n in (1, 2, 3)},
                          broker_cpu_cores={n: 1e-3 * faces_per_s for n in (1, 2, 3)},
                          loopback_bytes_per_s=300e3 * faces_per_s,
                          client_cpu_cores={"the emulator's consumers": 1e-3 * faces_per_s})
    return run.model_copy(update={"achieved_faces_per_s": faces_per_s, "offered_faces_per_s": 20.0 * factor,
                                  "resources": resources})


def _sweep(runs) -> SweepResult:
    return SweepResult(run_id="s", profile="paper", replication_factor=3, brokers=3, drives_per_broker=1,
                       duration_s=60, kafka_client="confluent-kafka", runs=runs)


def test_costs_are_read_at_the_busiest_stable_point_per_face() -> None:
    costs = face_costs(_sweep([_run(1, 20), _run(2, 40), _run(4, 60, stable=False)]))
    assert costs.read_at == "2x: 40 faces/s"
    assert costs.broker_cpu_s == pytest.approx(3e-3)
    assert costs.broker_write_bytes == pytest.approx(120e3)
    assert costs.network_bytes == pytest.approx(300e3)
    assert costs.offered_per_factor == pytest.approx(20.0)


def test_a_point_lasts_its_schedule_whose_ramps_are_inside_it() -> None:
    run = _run(1, 20)
    ramped = run.model_copy(update={"workload": run.workload.model_copy(
        update={"duration_s": 60.0, "ramp_up_s": 5.0, "ramp_down_s": 5.0})})
    assert point_seconds(_sweep([ramped])) == 60.0


def test_storage_divides_over_drives_and_brokers_and_the_first_to_pass_85_percent_is_named() -> None:
    costs = face_costs(_sweep([_run(1, 20), _run(2, 40)]))
    one_drive = predict(costs, FED, brokers=3, drives_per_broker=1, factors=[1, 2, 4, 8])
    # 4x: 80 faces/s x 120 kB / 3 brokers = 3.2 MB/s of a 10 MB/s drive; brokers 80 x 3 ms / 3 / 0.5 = 16%
    assert one_drive[2].utilisation["broker storage"] == pytest.approx(0.32)
    assert one_drive[2].utilisation["the brokers' CPU slices"] == pytest.approx(0.16)
    assert predicted_knee(one_drive) is None  # 8x: storage 64%, the load 32%
    faster = predict(costs, FED, brokers=3, drives_per_broker=1, factors=[1, 2, 4, 8, 16])
    knee = predicted_knee(faster)
    assert knee is not None and knee.factor == 16 and knee.busiest[0] == "broker storage"
    two_drives = predict(costs, FED, brokers=3, drives_per_broker=2, factors=[16])
    assert two_drives[0].utilisation["broker storage"] == pytest.approx(0.64)


def test_smaller_thumbnails_take_their_bytes_off_each_replica_and_each_hop_and_leave_the_cpu() -> None:
    from aitax.common.errors import UserError

    costs = face_costs(_sweep([_run(1, 20), _run(2, 40)]))  # thumbnails of 37.3 kB
    quarter = with_thumbnails(costs, 0.25)
    # 28 kB less a copy: three replicas appended; producer, two followers and the consumer on the wire
    assert quarter.thumbnail_bytes == pytest.approx(9_325)
    assert quarter.broker_write_bytes == pytest.approx(120e3 - 3 * 27_975)
    assert quarter.network_bytes == pytest.approx(300e3 - 4 * 27_975)
    assert (quarter.broker_cpu_s, quarter.load_cpu_s) == (costs.broker_cpu_s, costs.load_cpu_s)
    assert with_thumbnails(costs, 1.0) == costs
    # the storage-bound design's knee moves out with the bytes (Fig. 15c)
    fast = [1, 2, 4, 8, 16, 32]
    full, small = (predicted_knee(predict(c, FED, brokers=3, drives_per_broker=1, factors=fast))
                   for c in (costs, quarter))
    assert full is not None and (full.factor, full.busiest[0]) == (16, "broker storage")
    assert small is not None and small.factor == 32 and small.utilisation["broker storage"] < 0.85  # CPU first
    with pytest.raises(UserError, match="--face-scale 0: must be above 0"):
        with_thumbnails(costs, 0)


def test_a_prediction_counts_when_it_lands_within_one_factor_step() -> None:
    factors = [1, 2, 4, 8, 16]
    assert within_one_step(8, 8, factors) and within_one_step(4, 8, factors) and within_one_step(16, None, factors)
    assert not within_one_step(2, 8, factors) and not within_one_step(None, 4, factors)


def test_plan_knee_prints_the_prediction_beside_the_measured_knee(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from aitax.cli import main
    from aitax.runs.results import write_results

    fed = write_results(_sweep([_run(1, 20), _run(2, 40)]), tmp_path / "fed.json")
    design = tmp_path / "d.yaml"
    design.write_text("name: d\nbroker: {cpu_cores: 50, memory_gb: 64, link_gbit_s: 100, drives: {write_mb_s: "
                      "1000}}\nscale: 100\n")
    assert main(["plan-knee", "--from-emulation", str(fed), "--design", str(design), "--compare", str(fed)]) == 0
    output = capsys.readouterr().out
    assert "per face, read at 2x: 40 faces/s" in output
    # 2x: 40 faces/s, far below every capacity, in steady state and in the fed sweep's 20 s points
    assert "predicted knee in steady state: none within the factors" in output
    assert "predicted knee in a sweep of 20 s points: none within the factors" in output
    assert "measured knee: none within the factors" in output and "is within one factor step" in output


def test_the_measured_knee_is_the_sweeps_own_and_the_first_saturated_point_is_named_apart() -> None:
    from aitax.tco.knee import first_saturated, measured_knee

    runs = [_run(1, 20), _run(2, 40), _run(4, 80), _run(8, 100, stable=False)]
    assert measured_knee(_sweep(runs)) == 8 and first_saturated(_sweep(runs)) is None
    # a drive at 90% whose page cache still hides it from latency: named, but not the knee
    runs[1] = runs[1].model_copy(update={"resources": runs[1].resources.model_copy(
        update={"busiest_utilisation": 0.9, "saturated": "broker storage (loop0, broker 1) at 90% [signals]"})})
    assert measured_knee(_sweep(runs)) == 8
    assert first_saturated(_sweep(runs)) == (2, "broker storage (loop0, broker 1) at 90%")


def test_a_drives_backlog_in_a_point_follows_the_kernels_write_back() -> None:
    cache = PageCache(dirty_bytes=100e6, background_share=0.5, expire_s=30)
    # A drive that keeps up: nothing is written until pages are 30 s old, then as fast as they come.
    assert point_backlog(0.5e6, 1e6, 60, cache) == pytest.approx(15e6)
    # Overloaded 3x: past the background threshold (50 MB, in its 17th second) the drive writes at its rate, and the
    # backlog grows by the 2 MB/s it cannot take, past the freerun (75 MB) well within a minute.
    assert point_backlog(3e6, 1e6, 60, cache) == pytest.approx(3e6 * 60 - 1e6 * (60 - 16))
    assert cache.freerun_bytes == pytest.approx(75e6)
    assert point_backlog(3e6, 1e6, 20, cache) < cache.freerun_bytes  # a short point hides it


def test_a_sweep_of_short_points_breaks_later_on_storage_than_the_steady_state() -> None:
    costs = face_costs(_sweep([_run(1, 20), _run(2, 40)]))
    slow = Testbed(design="slow", scale=100, broker_cpu_cores=0.5, client_cpu_cores=0.5, drive_bytes_per_s=1e6,
                   dirty_bytes_per_drive=100_000_000, link_mbit=1000)
    cache = PageCache(dirty_bytes=100e6, background_share=0.5, expire_s=30)
    predictions = predict(costs, slow, brokers=3, drives_per_broker=1, factors=[1, 2, 4], point_s=60, cache=cache)
    # 1x: 20 faces/s x 120 kB / 3 = 0.8 MB/s, 80% of the drive; 2x: 160%, past 85% in steady state
    assert [round(p.utilisation["broker storage"], 2) for p in predictions] == [0.8, 1.6, 3.2]
    steady = predicted_knee(predictions)
    assert steady is not None and steady.factor == 2 and steady.busiest[0] == "broker storage"
    # In a 60 s point the page cache takes 2x's excess (backlog under the 75 MB freerun); 4x fills it.
    assert predictions[1].page_cache < 1 <= predictions[2].page_cache
    in_sweep = predicted_sweep_knee(predictions)
    assert in_sweep is not None and in_sweep.factor == 4
    assert in_sweep.breaks_point.startswith("broker storage: its page cache fills within the point (320%")
    # Without a point length only the steady state is predicted.
    assert predict(costs, slow, 3, 1, [1])[0].page_cache is None
