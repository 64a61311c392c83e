"""The storage capacity model against the paper's measurements and Fig. 15; the emulation results loader."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from aitax.common.errors import UserError
from aitax.tco.capacity import (
    CapacityParameters,
    EmulationResults,
    calibrate_from_emulation,
    capacity_parameters,
    compare_fig15,
    drive_utilisation,
    faces_per_stream_at_1x,
    is_stable,
    load_emulation_results,
    max_stable_factor,
    nominal_write_utilisation_at_1x,
    throughput_speedup,
)
from aitax.tco.catalog import load_catalog
from tests.unit.results_builders import emulated_run, write_sweep


@pytest.fixture(scope="module")
def parameters() -> CapacityParameters:
    return capacity_parameters(load_catalog("paper"))


def test_calibration_reproduces_fig_11b(parameters: CapacityParameters) -> None:
    assert drive_utilisation(1, 3, 1, parameters) == pytest.approx(0.10)
    assert drive_utilisation(6, 3, 1, parameters) < parameters.utilisation_ceiling  # stable through 6x
    assert 0.67 < drive_utilisation(8, 3, 1, parameters) < 0.68  # "over 67%" at 8x


def test_nominal_parameters_would_overstate_the_1x_writes(parameters: CapacityParameters) -> None:
    # 840 x 10 FPS x 37.3 kB x RF 3 / 3 brokers = 313 MB/s, 28.5% of 1.1 GB/s; the paper measured 10%.
    assert nominal_write_utilisation_at_1x(parameters) == pytest.approx(0.2848, abs=1e-4)
    assert faces_per_stream_at_1x(parameters) == pytest.approx(3.51, abs=0.01)


def test_throughput_speedup_is_linear_without_an_unaccelerated_part(parameters: CapacityParameters) -> None:
    linear = replace(parameters, unaccelerated_fraction=0.0)

    assert throughput_speedup(32, linear) == pytest.approx(32)
    assert throughput_speedup(1, parameters) == pytest.approx(1)
    assert throughput_speedup(32, parameters) < throughput_speedup(1e9, parameters) < 1 / 0.027


def test_max_stable_factor_is_the_stability_boundary(parameters: CapacityParameters) -> None:
    for brokers, drives, face in ((3, 1, 1.0), (4, 1, 1.0), (3, 2, 1.0), (3, 1, 0.5)):
        limit = max_stable_factor(brokers, drives, parameters, face)
        assert is_stable(limit * 0.99, brokers, drives, parameters, face)
        assert not is_stable(limit * 1.01, brokers, drives, parameters, face)


def test_small_faces_can_make_any_factor_stable(parameters: CapacityParameters) -> None:
    assert math.isinf(max_stable_factor(3, 1, parameters, 1 / 8))


def test_more_brokers_drives_or_smaller_faces_never_lower_the_limit(parameters: CapacityParameters) -> None:
    base = max_stable_factor(3, 1, parameters)

    assert max_stable_factor(4, 1, parameters) > base
    assert max_stable_factor(3, 2, parameters) > base
    assert max_stable_factor(3, 1, parameters, 0.5) > base


def test_adding_brokers_beats_adding_drives(parameters: CapacityParameters) -> None:
    # Sec. 7.1: 6 brokers (2x) reach 16x, 2 drives per broker (2x the drives) only 12x.
    assert max_stable_factor(6, 1, parameters) > max_stable_factor(3, 2, parameters)


def test_fig15_rows_the_model_matches(parameters: CapacityParameters) -> None:
    comparisons = {
        (row.row.series, row.row.brokers, row.row.drives_per_broker, row.row.face_fraction): row
        for row in compare_fig15(parameters)
    }

    matched = {key for key, comparison in comparisons.items() if comparison.matches}
    assert matched == set(comparisons) - {("drives", 3, 3, 1.0)}
    assert not comparisons[("drives", 3, 1, 1.0)].cells[0].model_stable  # 3 brokers x 1 drive: unstable at 8x
    assert [cell.model_stable for cell in comparisons[("brokers", 4, 1, 1.0)].cells] == [True] + [False] * 4
    assert all(cell.model_stable for cell in comparisons[("brokers", 8, 1, 1.0)].cells)  # 32x with 8 brokers
    assert all(cell.model_stable for cell in comparisons[("drives", 3, 4, 1.0)].cells)  # 32x with 4 drives


def test_fig15_mismatch_is_reported_with_its_numbers(parameters: CapacityParameters) -> None:
    (mismatch,) = [comparison for comparison in compare_fig15(parameters) if not comparison.matches]

    wrong = [cell for cell in mismatch.cells if cell.matches is False]
    assert [cell.factor for cell in wrong] == [24]
    assert wrong[0].paper_stable and not wrong[0].model_stable
    assert "24x" in mismatch.explanation and "70.1%" in mismatch.explanation
    assert "extra_drive_efficiency at least 0.605" in mismatch.explanation


def test_a_purely_linear_model_misses_more_rows(parameters: CapacityParameters) -> None:
    linear = replace(parameters, unaccelerated_fraction=0.0)

    missed = {
        (c.row.series, c.row.brokers, c.row.drives_per_broker) for c in compare_fig15(linear) if not c.matches
    }
    assert {("brokers", 6, 1), ("brokers", 8, 1), ("drives", 3, 4)} <= missed


def test_loader_reads_a_sweep_and_takes_the_median_of_repeats(tmp_path: Path) -> None:
    runs = [emulated_run(1, True, writes) for writes in (100e6, 110e6, 130e6)]
    results = load_emulation_results(write_sweep(tmp_path, runs))

    assert isinstance(results, EmulationResults)
    assert results.sweep.replication_factor == 3
    (native,) = results.sweep.by_factor()
    assert (native.factor, native.stable, len(native.runs)) == (1.0, True, 3)
    assert results.faces_per_stream(native) == pytest.approx(110e6 * 3 / (840 * 37_300 * 3))


def test_loader_names_a_bad_field_and_what_the_planner_needs(tmp_path: Path) -> None:
    path = write_sweep(tmp_path, [emulated_run(1, True, 110e6)])
    document = json.loads(path.read_text())
    document["runs"][0]["face_bytes_mean"] = "37kB"
    path.write_text(json.dumps(document))
    with pytest.raises(UserError, match=r"results.json: runs.0.face_bytes_mean '37kB': input should be a valid number"):
        load_emulation_results(path)

    with pytest.raises(UserError, match=r"runs: empty"):
        load_emulation_results(write_sweep(tmp_path, []))
    unsampled = emulated_run(1, True, 1.0).model_copy(update={"resources": None})
    with pytest.raises(UserError, match=r"runs.0.resources: missing"):
        load_emulation_results(write_sweep(tmp_path, [unsampled]))


def test_one_unstable_repeat_makes_a_factor_unstable(tmp_path: Path, parameters: CapacityParameters) -> None:
    path = write_sweep(tmp_path, [emulated_run(1, True, 110e6), emulated_run(1, False, 110e6)])

    with pytest.raises(UserError, match=r"needs a stable run with factor 1"):
        calibrate_from_emulation(parameters, load_emulation_results(path))


def test_loader_rejects_files_that_are_not_json(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    path.write_text("factor,stable\n1,true\n", encoding="utf-8")

    with pytest.raises(UserError, match=r"results.json: not JSON"):
        load_emulation_results(path)
    with pytest.raises(UserError, match=r"cannot read results"):
        load_emulation_results(tmp_path / "absent.json")


def test_calibration_recovers_the_rate_and_unaccelerated_fraction(
    tmp_path: Path, parameters: CapacityParameters
) -> None:
    # An emulation whose throughput follows Amdahl with u = 0.05, half the paper's streams on 2 brokers.
    def writes(factor: float) -> float:
        speedup = 1 / (0.05 + 0.95 / factor)
        return 2.0 * 420 * 30_000 * 3 * speedup / 2  # 2 faces/s per stream, 30 kB faces, RF 3, 2 brokers

    runs = [
        emulated_run(f, f < 8, writes(f), brokers=2, producers=420, face_bytes_mean=30_000) for f in (1, 2, 4, 6, 8)
    ]
    calibration = calibrate_from_emulation(parameters, load_emulation_results(write_sweep(tmp_path, runs, brokers=2)))

    assert faces_per_stream_at_1x(calibration.parameters) == pytest.approx(2.0)
    assert calibration.parameters.unaccelerated_fraction == pytest.approx(0.05)
    assert "fitted on 3 stable factor(s)" in calibration.note


def test_a_latency_bounded_search_calibrates_from_the_factors_within_its_bound(
    tmp_path: Path, parameters: CapacityParameters
) -> None:
    bounded = {"latency_bound_ms": 500.0, "quantiles": [0.5, 0.99]}
    runs = [emulated_run(f, f <= 5.66, 110e6 * f) for f in (1, 32, 5.66, 8, 4)]  # bisection order
    runs = [run.model_copy(update={"workload": run.workload.model_copy(update=bounded)}) for run in runs]
    calibration = calibrate_from_emulation(parameters, load_emulation_results(write_sweep(tmp_path, runs)))

    assert "fitted on 2 stable factor(s)" in calibration.note  # 4x and 5.66x
    assert calibration.note.endswith("; p99 <= 500 ms held up to 5.66x on 3 brokers")


def test_calibration_needs_a_stable_native_run(tmp_path: Path, parameters: CapacityParameters) -> None:
    path = write_sweep(tmp_path, [emulated_run(1, False, 110e6), emulated_run(2, True, 200e6)])

    with pytest.raises(UserError, match=r"needs a stable run with factor 1"):
        calibrate_from_emulation(parameters, load_emulation_results(path))


def test_calibration_keeps_the_catalog_fraction_without_stable_factors_above_1x(
    tmp_path: Path, parameters: CapacityParameters
) -> None:
    path = write_sweep(tmp_path, [emulated_run(1, True, 110e6), emulated_run(8, False, 700e6)])

    calibration = calibrate_from_emulation(parameters, load_emulation_results(path))

    assert calibration.parameters.unaccelerated_fraction == parameters.unaccelerated_fraction
    assert calibration.parameters.write_utilisation_at_1x == pytest.approx(0.10)
