"""Broker storage capacity: the highest stable AI acceleration for a broker layout, and the paper's Fig. 15.

The model (parameters in the catalog's `capacity:` section, each with its source):

    throughput speedup  s(f) = 1 / (u + (1 - u) / f)                 u = unaccelerated_fraction
    faces per stream    r1 = write_utilisation_at_1x x drive_bw x reference_brokers
                             / (reference_producers x face_bytes x replication_factor)   (1x, calibrated)
    disk writes         W(f) = streams x r1 x s(f) x face_bytes x face_fraction x replication_factor
    drive utilisation   W(f) / brokers / (drive_bw x (1 + extra_drive_efficiency x (drives - 1)))
    stable              drive utilisation < utilisation_ceiling

Calibration. The paper measured broker writes at 10% of a 1.1 GB/s drive at 1x (Fig. 11b). Its nominal rate,
840 streams x 10 FPS x 37.3 kB x RF 3 over 3 brokers, would write 313 MB/s (28.5%); the model uses the
measurement, so the emulation's effective 1x rate is about 3.5 faces/s per stream.

Why s(f) is not f. The emulation divides only the sleeps standing in for compute by the factor; Kafka
client and loop code keep their time. Linear scaling from 10% at 1x gives 80% at 8x where the paper measured
"over 67%", and puts 8 brokers at 32x at 120% of a drive, although the paper saw that layout stable.
u = 2.7% gives 67.3% at 8x.

Extra drives. The paper's drive runs put one broker instance per drive on the same 3 nodes, and it found
adding brokers "more efficient": 32x needed 4x the drives but 8/3 the brokers. So an extra drive counts as
0.556 of a drive on its own broker node. With these, the model matches 10 of the 11 Fig. 15 rows (39 of 40
reported cells); `compare_fig15` names the one it misses (3 drives at 24x).

`aitax emulate` writes a `SweepResult` (runs.results, versioned); `load_emulation_results` reads it and
`calibrate_from_emulation` replaces the paper's 1x rate and u with measured ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from aitax.common.errors import UserError
from aitax.tco.catalog import Catalog, build_parameters
from aitax.telemetry.quantiles import quantile_key

if TYPE_CHECKING:  # the results model loads pydantic and numpy: only `--from-emulation` needs it
    from aitax.runs.results import FactorRuns, RunResult, SweepResult

# Factors of the paper's Fig. 15 runs (Sec. 7.1 starts at 8x, "the speedup that sent latency to infinity").
FIG15_FACTORS = (8, 12, 16, 24, 32)


@dataclass(frozen=True)
class CapacityParameters:
    reference_producers: int
    reference_brokers: int
    replication_factor: int
    face_bytes: float
    nominal_fps_per_stream: float
    write_utilisation_at_1x: float
    drive_write_bytes_per_s: float
    utilisation_ceiling: float
    unaccelerated_fraction: float
    extra_drive_efficiency: float
    streams_per_compute_node: int
    consumers_per_producer: int
    design_headroom: float


def capacity_parameters(catalog: Catalog) -> CapacityParameters:
    where = f"{catalog.path.name}: capacity"
    positive = (
        "face_bytes",
        "nominal_fps_per_stream",
        "write_utilisation_at_1x",
        "drive_write_bytes_per_s",
        "utilisation_ceiling",
        "design_headroom",
    )
    parameters = build_parameters(CapacityParameters, catalog.capacity, where, positive)
    if parameters.utilisation_ceiling > 1:
        raise UserError(
            f"{where} parameter 'utilisation_ceiling' must be at most 1, got {parameters.utilisation_ceiling}"
        )
    if parameters.unaccelerated_fraction >= 1:
        value = parameters.unaccelerated_fraction
        raise UserError(f"{where} parameter 'unaccelerated_fraction' must be below 1, got {value}")
    return parameters


def throughput_speedup(factor: float, parameters: CapacityParameters) -> float:
    """How much faster frames flow when AI runs `factor` times faster (Amdahl over the unaccelerated part)."""
    unaccelerated = parameters.unaccelerated_fraction
    return 1 / (unaccelerated + (1 - unaccelerated) / factor)


def faces_per_stream_at_1x(parameters: CapacityParameters) -> float:
    """The effective 1x rate implied by the measured 1x write utilisation."""
    written = (
        parameters.write_utilisation_at_1x * parameters.drive_write_bytes_per_s * parameters.reference_brokers
    )
    return written / (parameters.reference_producers * parameters.face_bytes * parameters.replication_factor)


def nominal_write_utilisation_at_1x(parameters: CapacityParameters) -> float:
    """What the paper's nominal parameters (streams x FPS x face bytes x RF) would write per broker at 1x."""
    written = (
        parameters.reference_producers
        * parameters.nominal_fps_per_stream
        * parameters.face_bytes
        * parameters.replication_factor
    )
    return written / parameters.reference_brokers / parameters.drive_write_bytes_per_s


def disk_write_bytes_per_s(
    factor: float, streams: int, parameters: CapacityParameters, face_fraction: float = 1.0
) -> float:
    """Bytes written to broker drives per second, summed over brokers (every replica is a write)."""
    face_rate = streams * faces_per_stream_at_1x(parameters) * throughput_speedup(factor, parameters)
    return face_rate * parameters.face_bytes * face_fraction * parameters.replication_factor


def effective_drives(drives_per_broker: int, parameters: CapacityParameters) -> float:
    return 1 + parameters.extra_drive_efficiency * (drives_per_broker - 1)


def drive_utilisation(
    factor: float,
    brokers: int,
    drives_per_broker: int,
    parameters: CapacityParameters,
    face_fraction: float = 1.0,
    streams: int | None = None,
) -> float:
    """Each broker's writes as a share of its drives' bandwidth (the paper's Fig. 11b measure)."""
    streams = parameters.reference_producers if streams is None else streams
    per_broker = disk_write_bytes_per_s(factor, streams, parameters, face_fraction) / brokers
    return per_broker / (parameters.drive_write_bytes_per_s * effective_drives(drives_per_broker, parameters))


def is_stable(
    factor: float,
    brokers: int,
    drives_per_broker: int,
    parameters: CapacityParameters,
    face_fraction: float = 1.0,
) -> bool:
    return (
        drive_utilisation(factor, brokers, drives_per_broker, parameters, face_fraction)
        < parameters.utilisation_ceiling
    )


def max_stable_factor(
    brokers: int, drives_per_broker: int, parameters: CapacityParameters, face_fraction: float = 1.0
) -> float:
    """The acceleration at which writes reach the ceiling (stable below it); inf when no factor gets there."""
    at_1x = drive_utilisation(1, brokers, drives_per_broker, parameters, face_fraction)
    max_speedup = parameters.utilisation_ceiling / at_1x
    unaccelerated = parameters.unaccelerated_fraction
    if max_speedup * unaccelerated >= 1:
        return math.inf
    return (1 - unaccelerated) / (1 / max_speedup - unaccelerated)


@dataclass(frozen=True)
class Fig15Row:
    """One configuration of Fig. 15 and what Sec. 7.1 says about it."""

    series: str
    brokers: int
    drives_per_broker: int
    face_fraction: float
    paper_max_stable: int | None  # highest of FIG15_FACTORS the paper saw stable; None: not even 8x
    paper_says: str
    cells_reported: bool = True  # False: the paper only says the limit rises (Fig. 15c has no numbers)


FIG15_ROWS = (
    Fig15Row("drives", 3, 1, 1.0, None, "infinite latency at 8x and above"),
    Fig15Row("drives", 3, 2, 1.0, 12, "8x and 12x unlocked"),
    Fig15Row("drives", 3, 3, 1.0, 24, "supports up to 24x"),
    Fig15Row("drives", 3, 4, 1.0, 32, "32x unlocked"),
    Fig15Row("brokers", 3, 1, 1.0, None, "any factor at or above 8x unstable"),
    Fig15Row("brokers", 4, 1, 1.0, 8, "handles 8x"),
    Fig15Row("brokers", 6, 1, 1.0, 16, "up to 16x"),
    Fig15Row("brokers", 8, 1, 1.0, 32, "handles 32x"),
    Fig15Row("face size", 3, 1, 1 / 2, None, "smaller faces raise the limit", cells_reported=False),
    Fig15Row("face size", 3, 1, 1 / 4, None, "smaller faces raise the limit", cells_reported=False),
    Fig15Row("face size", 3, 1, 1 / 8, None, "smaller faces raise the limit", cells_reported=False),
)


@dataclass(frozen=True)
class Fig15Cell:
    factor: int
    utilisation: float
    model_stable: bool
    paper_stable: bool | None  # None where the paper gives no per-factor result

    @property
    def matches(self) -> bool | None:
        return None if self.paper_stable is None else self.model_stable == self.paper_stable


@dataclass(frozen=True)
class Fig15Comparison:
    row: Fig15Row
    model_limit: float
    cells: tuple[Fig15Cell, ...]
    matches: bool
    explanation: str


def compare_fig15(parameters: CapacityParameters) -> list[Fig15Comparison]:
    baseline_limit = max_stable_factor(3, 1, parameters)
    return [_compare_row(row, parameters, baseline_limit) for row in FIG15_ROWS]


def _compare_row(row: Fig15Row, parameters: CapacityParameters, baseline_limit: float) -> Fig15Comparison:
    cells = tuple(
        Fig15Cell(
            factor=factor,
            utilisation=drive_utilisation(
                factor, row.brokers, row.drives_per_broker, parameters, row.face_fraction
            ),
            model_stable=is_stable(factor, row.brokers, row.drives_per_broker, parameters, row.face_fraction),
            paper_stable=(
                None
                if not row.cells_reported
                else row.paper_max_stable is not None and factor <= row.paper_max_stable
            ),
        )
        for factor in FIG15_FACTORS
    )
    limit = max_stable_factor(row.brokers, row.drives_per_broker, parameters, row.face_fraction)
    if row.cells_reported:
        wrong = [cell for cell in cells if not cell.matches]
        matches = not wrong
        explanation = "; ".join(_explain_cell(row, cell, parameters) for cell in wrong)
    else:
        matches = limit > baseline_limit
        explanation = (
            "" if matches else f"model limit {limit:.1f}x does not exceed full-size {baseline_limit:.1f}x"
        )
    return Fig15Comparison(row, limit, cells, matches, explanation)


def _explain_cell(row: Fig15Row, cell: Fig15Cell, parameters: CapacityParameters) -> str:
    verdict = "stable" if cell.model_stable else "unstable"
    relation = "below" if cell.model_stable else "above"
    paper = "stable" if cell.paper_stable else "unstable"
    explanation = (
        f"at {cell.factor}x the model writes {cell.utilisation:.1%} of the drives' bandwidth, {relation} the"
        f" {parameters.utilisation_ceiling:.0%} ceiling ({verdict}); the paper saw it {paper}"
    )
    if row.drives_per_broker > 1:
        # The efficiency at which this cell would flip: writes per broker / ceiling = 1 + e (drives - 1).
        one_drive_share = cell.utilisation * effective_drives(row.drives_per_broker, parameters)
        needed = (one_drive_share / parameters.utilisation_ceiling - 1) / (row.drives_per_broker - 1)
        bound = "at least" if cell.paper_stable else "below"
        explanation += (
            f"; it would match with extra_drive_efficiency {bound} {needed:.3f}"
            f" (the model uses {parameters.extra_drive_efficiency:.3f})"
        )
    return explanation


@dataclass(frozen=True)
class EmulationResults:
    """A sweep's results (`runs.results.SweepResult`, as `aitax emulate` writes them), checked for what the
    planner needs: every run's brokers' disk writes sampled. Repeats of a factor count by their median."""

    path: Path
    sweep: SweepResult

    def faces_per_stream(self, factor: FactorRuns) -> float:
        """Faces written per stream per second (replicas and write overhead included), from the disk writes."""
        def per_run(run: RunResult) -> float:
            written = run.resources.broker_disk_write_bytes_per_s * (run.brokers or self.sweep.brokers)
            return written / (run.workload.producers * run.face_bytes_mean * self.sweep.replication_factor)

        return factor.spread(per_run).median


def load_emulation_results(path: Path) -> EmulationResults:
    from aitax.runs.results import SweepResult, read_results

    sweep = read_results(path, SweepResult)
    if not sweep.runs:
        raise UserError(f"{path}: runs: empty, the sweep measured no factor")
    for index, run in enumerate(sweep.runs):
        if run.resources is None:
            raise UserError(f"{path}: runs.{index}.resources: missing (the run's brokers were not sampled)")
        if run.face_bytes_mean <= 0:
            raise UserError(f"{path}: runs.{index}.face_bytes_mean: no faces were produced")
    return EmulationResults(path, sweep)


@dataclass(frozen=True)
class Calibration:
    parameters: CapacityParameters
    note: str


def catalog_calibration(catalog: Catalog) -> Calibration:
    """The catalog's own 1x write utilisation and unaccelerated fraction (Fig. 11b for `paper`)."""
    parameters = capacity_parameters(catalog)
    return Calibration(
        parameters,
        f"catalog {catalog.name}: broker writes {parameters.write_utilisation_at_1x:.0%} of a drive at 1x,"
        f" unaccelerated fraction {parameters.unaccelerated_fraction:.3f}",
    )


def calibrate_from_emulation(parameters: CapacityParameters, results: EmulationResults) -> Calibration:
    """The paper's parameters with the 1x rate and the unaccelerated fraction measured by an emulation.

    The 1x rate (faces written per stream per second, replicas and write overhead included) is carried to the
    reference deployment as a 1x write utilisation. The unaccelerated fraction u is the least-squares fit of
    1/s - 1/f = u (1 - 1/f) over the stable factors above 1; unstable ones are capped by saturation.
    """
    factors = results.sweep.by_factor()
    native = next((factor for factor in factors if factor.factor == 1), None)
    if native is None or not native.stable:
        raise UserError(f"{results.path}: needs a stable run with factor 1 to calibrate from")
    rate_1x = results.faces_per_stream(native)
    if rate_1x <= 0:
        raise UserError(f"{results.path}: the factor-1 run has no broker writes to calibrate from")
    utilisation_1x = (
        rate_1x
        * parameters.reference_producers
        * parameters.face_bytes
        * parameters.replication_factor
        / (parameters.reference_brokers * parameters.drive_write_bytes_per_s)
    )
    fitted = [
        (1 - 1 / factor.factor, rate_1x / results.faces_per_stream(factor) - 1 / factor.factor)
        for factor in factors
        if factor.stable and factor.factor > 1 and results.faces_per_stream(factor) > 0
    ]
    unaccelerated = parameters.unaccelerated_fraction
    if fitted:
        fit = sum(x * y for x, y in fitted) / sum(x * x for x, _ in fitted)
        unaccelerated = min(max(fit, 0.0), 0.99)
    note = (
        f"emulation {results.path.name}: {rate_1x:.2f} faces/s per stream at 1x"
        f" ({utilisation_1x:.1%} of a drive in the paper's layout),"
        f" unaccelerated fraction {unaccelerated:.3f}"
        + (
            f" fitted on {len(fitted)} stable factor(s) above 1x"
            if fitted
            else " kept from the catalog (no stable factor above 1x)"
        )
    )
    if results.sweep.latency_bound is not None:
        # A latency-bounded search: its "stable" factors are those that also kept the bound.
        quantile, bound_ms = results.sweep.latency_bound
        highest = results.sweep.highest_stable_factor
        note += (
            f"; {quantile_key(quantile)} <= {bound_ms:g} ms held up to"
            f" {'no factor' if highest is None else f'{highest:.3g}x'} on {results.sweep.brokers} brokers"
        )
    calibrated = replace(
        parameters, write_utilisation_at_1x=utilisation_1x, unaccelerated_fraction=unaccelerated
    )
    return Calibration(calibrated, note)
