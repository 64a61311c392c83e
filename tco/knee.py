"""Where a design breaks, predicted from what a sweep on another design measured per face.

From one sweep (`aitax emulate` on a testbed, `stack.design`): per face, what the brokers spent together (CPU
seconds, bytes appended to their logs, bytes on the wire) and what the load generator spent, read at the
sweep's busiest point below its knee (the most faces, so fixed costs are spread the thinnest). For another design,
each resource's utilisation at each factor is then

    brokers' CPU      cpu_s x R / brokers / cores per broker
    storage           write_bytes x R / brokers / (drives per broker x drive bandwidth)
    links             network_bytes x R / brokers / link rate
    the load's CPU    load_cpu_s x R / the load's cores

with R the faces/s the sweep offers at that factor. The predicted knee is the first factor where a resource passes
`load.resources.SATURATION` (85%, the verdict's), and that resource is the one predicted to run out. Kafka spreads
a broker's partitions over its log dirs, so a broker's writes divide among its drives; RF 3 copies every face to
three brokers whatever their number, so the brokers' total per face stays.

Assumed, and what a validation tests: per-face costs do not change with the load (batching lowers them as the
load grows, so a cost read below the knee over-predicts at higher loads), and the page cache absorbs nothing in
steady state (a drive takes every byte its broker appends).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from common.errors import UserError
from load.resources import SATURATION
from stack.config import Testbed
from telemetry.results import RunResult, SweepResult, read_results

BITS_PER_BYTE = 8


@dataclass(frozen=True)
class FaceCosts:
    """What one face cost, all brokers together and the load generator, at the point it was read."""

    broker_cpu_s: float
    broker_write_bytes: float  # appended to the brokers' logs (every replica): what their drives must absorb
    network_bytes: float  # every byte on loopback (clients and replication): an upper bound of the brokers' links
    load_cpu_s: float
    offered_per_factor: float  # faces/s the sweep offers per unit of factor
    read_at: str  # "8x: 146 faces/s"


@dataclass(frozen=True)
class Prediction:
    factor: float
    offered_faces_per_s: float
    utilisation: dict[str, float]  # resource -> share of its capacity

    @property
    def busiest(self) -> tuple[str, float]:
        return max(self.utilisation.items(), key=lambda item: item[1])


def read_sweep(path: Path) -> SweepResult:
    sweep = read_results(path, SweepResult)
    if not any(run.resources is not None and run.achieved_faces_per_s > 0 for run in sweep.runs):
        raise UserError(f"{path}: runs: none with faces and resources, nothing to read costs from")
    return sweep


def face_costs(sweep: SweepResult) -> FaceCosts:
    """Per-face costs at the sweep's busiest point below its knee (its lowest factor if every one is past it)."""
    knee = sweep.knee
    measured = [run for run in sweep.runs if run.resources is not None and run.achieved_faces_per_s > 0
                and run.workload.in_flight is None]
    below = [run for run in measured if run.stable and (knee is None or run.workload.factor < knee.factor)]
    run = max(below, key=lambda r: r.achieved_faces_per_s) if below else min(measured, key=lambda r: r.workload.factor)
    return _costs(run)


def _costs(run: RunResult) -> FaceCosts:
    used, rate = run.resources, run.achieved_faces_per_s
    written = sum(used.broker_write_bytes_per_s.values())
    return FaceCosts(
        broker_cpu_s=sum(used.broker_cpu_cores.values()) / rate,
        broker_write_bytes=written / rate,
        network_bytes=(sum(used.broker_network_bytes_per_s.values()) or used.loopback_bytes_per_s) / rate,
        load_cpu_s=sum(used.client_cpu_cores.values()) / rate,
        offered_per_factor=(run.offered_faces_per_s or rate) / run.workload.factor,
        read_at=f"{run.workload.factor:g}x: {rate:.0f} faces/s")


def predict(costs: FaceCosts, testbed: Testbed, brokers: int, drives_per_broker: int,
            factors: list[float]) -> list[Prediction]:
    predictions = []
    for factor in factors:
        rate = costs.offered_per_factor * factor
        utilisation = {
            "the brokers' CPU slices": costs.broker_cpu_s * rate / brokers / testbed.broker_cpu_cores,
            "the load's CPU slice": costs.load_cpu_s * rate / testbed.client_cpu_cores,
            "the brokers' links": costs.network_bytes * rate / brokers / (testbed.link_mbit * 1e6 / BITS_PER_BYTE),
        }
        if testbed.drive_bytes_per_s:
            utilisation["broker storage"] = (costs.broker_write_bytes * rate / brokers
                                             / (drives_per_broker * testbed.drive_bytes_per_s))
        predictions.append(Prediction(factor, rate, utilisation))
    return predictions


def predicted_knee(predictions: list[Prediction]) -> Prediction | None:
    """The first factor where a resource passes the verdict's saturation (None: none within the factors)."""
    return next((p for p in predictions if p.busiest[1] >= SATURATION), None)


def measured_knee(sweep: SweepResult) -> float | None:
    """The sweep's own: the first factor past the latency knee, unstable, or that the brokers could not even set up
    (None: every factor held)."""
    knee = sweep.knee
    unstable = [f.factor for f in sweep.open_loop() if not f.stable]
    not_started = [min(sweep.skipped_factors)] if sweep.stopped and sweep.skipped_factors else []
    return min([*([knee.factor] if knee else []), *unstable, *not_started], default=None)


def first_saturated(sweep: SweepResult) -> tuple[float, str] | None:
    """The first factor whose verdict named a resource past 85%, and that verdict: a drive's page cache can hide
    a saturated drive from latency for minutes (its utilisation shows it at once), while a CPU slice can run at its
    quota for a while with latency intact."""
    for run in sorted(sweep.runs, key=lambda r: r.workload.factor):
        if run.resources is not None and run.resources.busiest_utilisation >= SATURATION:
            return run.workload.factor, run.resources.saturated.split(" [")[0]
    return None


def within_one_step(predicted: float | None, measured: float | None, factors: list[float]) -> bool:
    """The prediction lands on the measured knee or a neighbouring factor of the sweep (None: beyond them)."""
    steps = [*sorted(factors), float("inf")]

    def index(value: float | None) -> int:
        return len(steps) - 1 if value is None else steps.index(value)

    return abs(index(predicted) - index(measured)) <= 1
