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

That is the steady state: a drive takes every byte its broker appends. Two knees are predicted from it:

- **in steady state**, the first factor where a resource passes 85%, storage included: where a design breaks when
  the load lasts;
- **in the sweep**, the knee a sweep of short points measures (`make emulate-design`: a minute a point, each
  point's topics deleted at its end). There the page cache hides a saturated drive: the kernel writes a dirty page
  back only once it is `dirty_expire` old, or at the drive's rate once the backlog passes the background
  threshold, and writers wait only past the midpoint of the background and hard limits (`balance_dirty_pages`'
  freerun). A point's backlog starts clean (deleting its topics drops what was not yet written) and grows by
  what the drive could not take; storage breaks the point when that backlog reaches the freerun within it. The
  other resources break a point as in steady state.

Assumed, and what a validation tests: per-face costs do not change with the load (batching lowers them as the
load grows, so a cost read below the knee over-predicts at higher loads).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, replace
from pathlib import Path

from aitax.common.errors import UserError
from aitax.load.resources import SATURATION
from aitax.runs.results import RunResult, SweepResult, read_results
from aitax.stack.config import Testbed

BITS_PER_BYTE = 8
STORAGE = "broker storage"
VM = Path("/proc/sys/vm")


@dataclass(frozen=True)
class FaceCosts:
    """What one face cost, all brokers together and the load generator, at the point it was read."""

    broker_cpu_s: float
    broker_write_bytes: float  # appended to the brokers' logs (every replica): what their drives must absorb
    network_bytes: float  # every byte on loopback (clients and replication): an upper bound of the brokers' links
    load_cpu_s: float
    offered_per_factor: float  # faces/s the sweep offers per unit of factor
    read_at: str  # "8x: 146 faces/s"
    thumbnail_bytes: float  # the face's thumbnail: one copy of it in each replica's append and each trip on the wire
    replicas: int  # copies of each record the brokers append (the sweep's replication factor)


def with_thumbnails(costs: FaceCosts, scale: float) -> FaceCosts:
    """The same faces with thumbnails `scale` times the size (the paper's Fig. 15c). Every replica appends a
    thumbnail, and the wire carries it once from the producer, once to each follower and once to the consumer; the
    rest of a face's bytes (record headers, its identity, fetches) and its CPU stay as measured."""
    if scale <= 0:
        raise UserError(f"--face-scale {scale:g}: must be above 0")
    shrink = (1 - scale) * costs.thumbnail_bytes
    return replace(costs, broker_write_bytes=costs.broker_write_bytes - costs.replicas * shrink,
                   network_bytes=costs.network_bytes - (costs.replicas + 1) * shrink,
                   thumbnail_bytes=costs.thumbnail_bytes * scale)


@dataclass(frozen=True)
class PageCache:
    """A drive's part of the page cache as the kernel writes it back: its dirty budget (a testbed's bdi
    `max_bytes`), the background threshold's share of it, and how old a page must be to go below that."""

    dirty_bytes: float
    background_share: float = 0.5  # vm.dirty_background_ratio / vm.dirty_ratio (10 / 20 by default)
    expire_s: float = 30.0  # vm.dirty_expire_centisecs / 100

    @classmethod
    def of_this_machine(cls, dirty_bytes: float, vm: Path = VM) -> PageCache:
        ratio = int((vm / "dirty_ratio").read_text()) or 20
        return cls(dirty_bytes, int((vm / "dirty_background_ratio").read_text()) / ratio,
                   int((vm / "dirty_expire_centisecs").read_text()) / 100)

    @property
    def freerun_bytes(self) -> float:
        """Past this backlog the brokers' writes start to wait (midway between the background and hard limits)."""
        return self.dirty_bytes * (1 + self.background_share) / 2


def point_backlog(append_bytes_per_s: float, drive_bytes_per_s: float, seconds: float, cache: PageCache) -> float:
    """The most dirty bytes a drive holds during a point of `seconds` that began with a clean cache, second by
    second: below the background threshold only expired pages are written, above it the oldest, at the drive's
    rate."""
    dirty: deque[float] = deque()  # bytes appended each second and not yet written, oldest first
    backlog = peak = 0.0
    for _ in range(math.ceil(seconds)):
        dirty.append(append_bytes_per_s)
        backlog += append_bytes_per_s
        expired = sum(list(dirty)[:max(0, len(dirty) - math.ceil(cache.expire_s))])
        budget = min(drive_bytes_per_s, backlog if backlog > cache.dirty_bytes * cache.background_share else expired)
        backlog -= budget
        while budget > 0 and dirty:
            taken = min(budget, dirty[0])
            budget -= taken
            if taken < dirty[0]:
                dirty[0] -= taken
            else:
                dirty.popleft()
        peak = max(peak, backlog)
    return peak


@dataclass(frozen=True)
class Prediction:
    factor: float
    offered_faces_per_s: float
    utilisation: dict[str, float]  # resource -> share of its capacity, in steady state
    page_cache: float | None = None  # a sweep point's peak backlog, as a share of its drive's freerun

    @property
    def busiest(self) -> tuple[str, float]:
        return max(self.utilisation.items(), key=lambda item: item[1])

    @property
    def breaks_point(self) -> str | None:
        """What breaks a sweep's point of this factor: a resource other than storage past 85%, or the drive's
        backlog past its freerun within the point (None: the point holds)."""
        others = {name: used for name, used in self.utilisation.items() if name != STORAGE}
        name, used = max(others.items(), key=lambda item: item[1])
        if used >= SATURATION:
            return f"{name} at {used:.0%}"
        if self.page_cache is not None and self.page_cache >= 1:
            return f"{STORAGE}: its page cache fills within the point ({self.utilisation[STORAGE]:.0%} of the drive)"
        return None


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
    return _costs(run, sweep.replication_factor)


def _costs(run: RunResult, replicas: int) -> FaceCosts:
    used, rate = run.resources, run.achieved_faces_per_s
    written = sum(used.broker_write_bytes_per_s.values())
    return FaceCosts(
        broker_cpu_s=sum(used.broker_cpu_cores.values()) / rate,
        broker_write_bytes=written / rate,
        network_bytes=(sum(used.broker_network_bytes_per_s.values()) or used.loopback_bytes_per_s) / rate,
        load_cpu_s=sum(used.client_cpu_cores.values()) / rate,
        offered_per_factor=(run.offered_faces_per_s or rate) / run.workload.factor,
        read_at=f"{run.workload.factor:g}x: {rate:.0f} faces/s", thumbnail_bytes=run.face_bytes_mean,
        replicas=replicas)


def predict(costs: FaceCosts, testbed: Testbed, brokers: int, drives_per_broker: int, factors: list[float],
            point_s: float | None = None, cache: PageCache | None = None) -> list[Prediction]:
    """Each resource's steady-state utilisation per factor; with `point_s`, also each drive's backlog within a sweep
    point of that length (`cache`: the drive's page cache, by default the testbed's budget on this kernel)."""
    if point_s and testbed.drive_bytes_per_s and cache is None:
        cache = PageCache.of_this_machine(testbed.dirty_bytes_per_drive)
    predictions = []
    for factor in factors:
        rate = costs.offered_per_factor * factor
        utilisation = {
            "the brokers' CPU slices": costs.broker_cpu_s * rate / brokers / testbed.broker_cpu_cores,
            "the load's CPU slice": costs.load_cpu_s * rate / testbed.client_cpu_cores,
            "the brokers' links": costs.network_bytes * rate / brokers / (testbed.link_mbit * 1e6 / BITS_PER_BYTE),
        }
        backlog = None
        if testbed.drive_bytes_per_s:
            append = costs.broker_write_bytes * rate / brokers / drives_per_broker
            utilisation[STORAGE] = append / testbed.drive_bytes_per_s
            if point_s and cache is not None and cache.freerun_bytes > 0:  # no budget declared: no model
                backlog = point_backlog(append, testbed.drive_bytes_per_s, point_s, cache) / cache.freerun_bytes
        predictions.append(Prediction(factor, rate, utilisation, backlog))
    return predictions


def predicted_knee(predictions: list[Prediction]) -> Prediction | None:
    """The steady state's: the first factor where a resource passes the verdict's saturation (None: none within
    the factors)."""
    return next((p for p in predictions if p.busiest[1] >= SATURATION), None)


def predicted_sweep_knee(predictions: list[Prediction]) -> Prediction | None:
    """A sweep of short points': the first factor whose point breaks (`Prediction.breaks_point`)."""
    return next((p for p in predictions if p.breaks_point is not None), None)


def point_seconds(sweep: SweepResult) -> float:
    """How long a point of the sweep offers load (its schedule, ramps included: they are cut from its start and end)."""
    return sweep.runs[0].workload.duration_s


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
