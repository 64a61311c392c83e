"""`aitax emulate`: one emulated run per acceleration factor against the local brokers, and the verdicts.

Per factor, through the load engine (`load.engine.run_load`): fresh topics (partitions = consumer
instances, RF 3, min.insync 2), consumer processes started and ready, producer processes offering
`instances x fps x factor x faces/frame` for the window, a drain, then the identities read back for latency and
throughput while broker CPU/disk and machine CPU/network were sampled.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from pydantic import ValidationError

from aitax.common.children import NotReadyError
from aitax.common.errors import UserError, invalid
from aitax.common.paper import HIGHEST_STABLE_FACTOR
from aitax.common.paths import aitax_home
from aitax.emulation.curves import BASELINE_CURVE
from aitax.emulation.profile import Profile
from aitax.load.engine import run_load
from aitax.load.local import LocalLoad
from aitax.pipeline.schema import Topics
from aitax.runs.results import (
    Driver,
    Resources,
    RunResult,
    ScalingResult,
    ScalingRow,
    SweepResult,
    Workload,
    write_results,
)
from aitax.stack import cpu_slices, kafka
from aitax.stack.config import StackConfig
from aitax.telemetry.latency import batch_size_p50
from aitax.telemetry.quantiles import DEFAULT_QUANTILES, window_for

DRAIN_S = 15.0  # after the window: enough for a stable run's queues to empty, not for an unstable one's


@dataclass(frozen=True)
class SweepPlan:
    """Which points a sweep runs and when it stops (the plan; the load at each point is the `SweepSpec`'s)."""

    factors: list[float]
    repeats: int = 1  # runs per factor: tables show their median and spread
    in_flight: tuple[int, ...] = ()  # closed loop: one point per frames-in-flight count (per factor)
    # Seconds of discarded 1x load before the first factor (on a testbed, the brokers out of their slices): freshly
    # started brokers spend their first half minute JIT-compiling on the same cores, charged to the first factors.
    warmup_s: float = 0.0
    # The sweep ends after this many factors in a row past the knee or unstable (0: run every factor): each one
    # further only queues more, and a machine driven far past saturation measures the machine.
    stop_after: int = 2

    def __post_init__(self) -> None:
        if not self.factors or any(f <= 0 for f in self.factors):
            raise UserError(f"--factors {self.factors}: every factor must be > 0")
        if self.warmup_s and self.warmup_s < 5:
            raise UserError(f"--warmup {self.warmup_s:g}: 0 (none) or at least 5 s")
        if self.repeats < 1:
            raise UserError(f"--repeat {self.repeats}: at least 1")
        if any(n < 1 for n in self.in_flight):
            raise UserError(f"--in-flight {','.join(map(str, self.in_flight))}: at least 1 frame per stream")
        if self.stop_after < 0:
            raise UserError(f"--stop-after {self.stop_after}: must not be negative")

    def points(self) -> list[tuple[float, int | None]]:
        """(factor, frames in flight) of each run of one repeat: open loop, or each closed-loop window."""
        return [(factor, n) for factor in self.factors for n in (self.in_flight or (None,))]


# A sweep's load fields as `aitax emulate` names them, for one-line errors.
LOAD_OPTIONS = {"producers": "--producers", "consumers": "--consumers", "producer_processes": "--processes",
                "duration_s": "--duration", "drain_s": "--drain", "ramp_up_s": "--ramp-up",
                "ramp_down_s": "--ramp-down", "latency_bound_ms": "--latency-bound",
                "latency_bound_quantile": "--quantile", "stages": "--stages"}


def emulated_workload(producers: int, consumers: int, processes: int, duration_s: float, profile: str,
                      **load: object) -> Workload:
    """The load at every point of a sweep (each point sets its factor): emulated stages, `processes` OS processes a
    side, measured after 2 s of ramp-up and drained for `DRAIN_S` unless `load` says otherwise; a latency bound's
    quantile among the quantiles."""
    fields = {"ramp_up_s": 2.0, "drain_s": DRAIN_S, "quantiles": list(DEFAULT_QUANTILES), **load}
    if fields.get("latency_bound_ms") is not None:
        fields["quantiles"] = sorted({*fields["quantiles"], fields.get("latency_bound_quantile", 0.99)})
    if duration_s < 5:
        raise UserError(f"--duration {duration_s:g}: at least 5 s per factor")
    try:
        return Workload(mode="emulated", producers=producers, consumers=consumers, producer_processes=processes,
                        consumer_processes=processes, duration_s=duration_s, profile=profile, **fields)
    except ValidationError as error:
        raise invalid(error, names=LOAD_OPTIONS) from None


@dataclass(frozen=True)
class SweepSpec:
    """A sweep: its plan, the load at each point (one `Workload`, its factor and frames in flight set per point),
    the Kafka clients' behaviour, and the profile the emulated stages sleep by."""

    plan: SweepPlan
    load: Workload
    driver: Driver
    profile: Profile
    events: str = "none"
    # The CPU curve a device curve's speed-up is read against, at the batch the load formed
    baseline: str = BASELINE_CURVE

    def __post_init__(self) -> None:
        if self.load.stages == 3 and self.plan.in_flight:
            raise UserError("--in-flight: a closed loop runs two stages, not --stages 3")
        # The profile says which application its stages emulate.
        object.__setattr__(self, "load", self.load.model_copy(update={"application": self.profile.application}))

    def at(self, factor: float, in_flight: int | None = None, drain_s: float | None = None) -> Workload:
        """The load of one point."""
        return self.load.model_copy(update={"factor": factor, "in_flight": in_flight,
                                            "drain_s": self.load.drain_s if drain_s is None else drain_s})

    def with_load(self, **changes: object) -> SweepSpec:
        return replace(self, load=self.load.model_copy(update=changes))

    def offered_faces_per_s(self, factor: float) -> float:
        return self.profile.offered_faces_per_s(self.load.producers, factor)


def emulated_load(spec: SweepSpec, config: StackConfig, factor: float, run_name: str, workdir: Path,
                  events: str | None = None, drain_s: float | None = None, in_flight: int | None = None) -> LocalLoad:
    """An emulated run on topics of its own (fresh, partitions enough for every consumer instance)."""
    workload = spec.at(factor, in_flight, drain_s)
    load = LocalLoad(workload, spec.driver, run_name, config.bootstrap_servers, workdir / run_name,
                     events or spec.events, topic_prefix=f"emu-{run_name}-", group=f"identify-emu-{run_name}")
    partitions = max(3, workload.consumers, workload.producers if workload.stages == 3 else 0)
    kafka.ensure_topics(config, replace(config, faces_partitions=partitions).topics(load.topics,
                                                                                   frames=workload.stages == 3))
    return load


class PointNotStartedError(UserError):
    """The brokers could not set a point up (create its topics): overload, as a full drive stalls their controller's
    writes. The sweep ends there with what it measured."""


def run_factor(spec: SweepSpec, config: StackConfig, factor: float, run_id: str, workdir: Path,
               repeat: int = 1, in_flight: int | None = None) -> RunResult:
    """One run at `factor` (closed loop with `in_flight` frames per stream: the load offers what completes). A
    stage process that failed is a condition of the result, not the end of the sweep; the run's topics (and any
    backlog in them) are deleted whatever happened, so the next run inherits nothing."""
    # Topic names allow no "+": a factor of 1e9 is named x1e09
    name = (f"{run_id}-x{factor:g}".replace("+", "") + (f"-f{in_flight}" if in_flight else "")
            + (f"-r{repeat}" if spec.plan.repeats > 1 else ""))
    try:
        load = emulated_load(spec, config, factor, name, workdir, in_flight=in_flight)
    except UserError as error:
        raise PointNotStartedError(f"{factor:g}x not started, the brokers did not set it up: {error}") from error
    try:
        return run_load(load, offered_faces_per_s=None if in_flight else spec.offered_faces_per_s(factor),
                        stack=config, repeat=repeat)
    except NotReadyError as error:  # e.g. brokers too busy to show the new topics to the stages in time
        raise PointNotStartedError(f"{factor:g}x not started, its stages were not ready: {error}") from error
    finally:
        delete_topics(config, load.topics)


def delete_topics(config: StackConfig, topics: Topics) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(kafka.admin_settings(config))
    existing = admin.list_topics(timeout=30).topics
    names = [name for name in (topics.faces, topics.identities, topics.dlq, topics.frames) if name in existing]
    for future in (admin.delete_topics(names).values() if names else ()):
        with contextlib.suppress(Exception):  # a topic that is already gone is fine
            future.result(30)


def run_sweep(spec: SweepSpec, config: StackConfig, progress=print, out: Path | None = None) -> SweepResult:
    """Every factor in turn; the results are written to `out` (default .aitax/emulation/RUN/results.json)."""
    sweep, workdir = _begin(spec, config, "emu", progress)
    run_id = sweep.run_id
    # Repeats go round the factors rather than one factor N times: a slow drift of the machine (another
    # tenant, a broker's log cleaner) then spreads over every factor instead of biasing one.
    for repeat in range(1, spec.plan.repeats + 1):
        for factor, in_flight in spec.plan.points():
            if factor in sweep.skipped_factors:
                continue
            progress(f"{factor:g}x{f', {in_flight} frames in flight per stream' if in_flight else ''}"
                     f"{f' (repeat {repeat}/{spec.plan.repeats})' if spec.plan.repeats > 1 else ''}: "
                     f"{spec.load.producers} producers, {spec.load.consumers} consumers, {spec.load.duration_s:.0f} s")
            try:
                result = run_factor(spec, config, factor, run_id, workdir, repeat, in_flight)
            except PointNotStartedError as error:
                sweep.stopped = str(error)
                sweep.skipped_factors = [f for f in spec.plan.factors if f >= factor]
                progress(f"  {error}; the sweep ends here")
                write_results(sweep, out or workdir / "results.json")
                return sweep
            sweep.runs.append(result)
            progress(_one_line(result, spec.baseline))
            if in_flight is None and repeat == 1 and _broken_in_a_row(sweep) >= spec.plan.stop_after > 0:
                sweep.skipped_factors = [f for f in spec.plan.factors if f > factor]
                if sweep.skipped_factors:
                    progress(f"  {spec.plan.stop_after} factors in a row past the knee or unstable: "
                             f"{', '.join(f'{f:g}x' for f in sweep.skipped_factors)} not run (--stop-after)")
            write_results(sweep, out or workdir / "results.json")  # after every run: an interrupted sweep keeps them
    if sweep.stopped and not sweep.runs:
        write_results(sweep, out or workdir / "results.json")
    return sweep


def _broken_in_a_row(sweep: SweepResult) -> int:
    """Open-loop factors at the end of the sweep so far that are past its knee or unstable."""
    knee = sweep.knee
    broken = 0
    for factor in reversed(sweep.open_loop()):
        if factor.stable and (knee is None or factor.factor < knee.factor):
            break
        broken += 1
    return broken


def search_latency_bound(spec: SweepSpec, config: StackConfig, progress=print, out: Path | None = None,
                         resolution: float = 1.1) -> SweepResult:
    """Latency-bounded throughput (MLPerf's server scenario, on the factor): the highest factor between the
    lowest and the highest of the plan's factors whose runs hold every condition, the bound on the chosen quantile
    included, found by bisection on a log scale until the bracket is narrower than `resolution` (a ratio).
    Assumes that a factor that breaks the bound is not followed by a higher one that keeps it. Each probe's
    duration grows, if it must, until its window holds the faces the quantile needs (10 / (1 - q))."""
    if spec.load.latency_bound_ms is None or spec.plan.in_flight:
        raise UserError("the latency-bound search needs --latency-bound and an open loop (no --in-flight)")
    sweep, workdir = _begin(spec, config, "emu-bound", progress)
    run_id = sweep.run_id

    def holds(factor: float) -> bool:
        load = spec.load
        needed_s = window_for(load.latency_bound_quantile, spec.offered_faces_per_s(factor))
        probe = spec.with_load(duration_s=max(load.duration_s, load.ramp_up_s + load.ramp_down_s + needed_s))
        runs = []
        repeats = spec.plan.repeats
        for repeat in range(1, repeats + 1):
            progress(f"probe {factor:.3g}x{f' (repeat {repeat}/{repeats})' if repeats > 1 else ''}: "
                     f"{probe.load.duration_s:.0f} s")
            runs.append(run_factor(probe, config, factor, f"{run_id}-{len(sweep.runs)}", workdir, repeat))
            sweep.runs.append(runs[-1])
            progress(_one_line(runs[-1], spec.baseline))
            write_results(sweep, out or workdir / "results.json")
        return all(run.stable for run in runs)

    lowest = min(spec.plan.factors)
    if highest_holding(holds, lowest, max(spec.plan.factors), resolution) is None:
        progress(f"{lowest:g}x already breaks a condition: no factor in range keeps the bound")
    return sweep


def highest_holding(holds: Callable[[float], bool], lowest: float, highest: float, resolution: float = 1.1
                    ) -> float | None:
    """The highest factor in [lowest, highest] that `holds`, by bisection on a log scale until the bracket is
    narrower than `resolution` (a ratio): `lowest` first, then `highest`, then the middles. None when `lowest`
    already fails. Assumes that a factor that fails is not followed by a higher one that holds."""
    if not holds(lowest):
        return None
    if holds(highest):
        return highest
    while highest / lowest > resolution:
        middle = math.sqrt(lowest * highest)
        lowest, highest = (middle, highest) if holds(middle) else (lowest, middle)
    return lowest


def _begin(spec: SweepSpec, config: StackConfig, prefix: str, progress) -> tuple[SweepResult, Path]:
    """A sweep's id, folder and empty results, after its unmeasured warm-up."""
    run_id = time.strftime(f"{prefix}-%Y%m%d-%H%M%S")
    workdir = aitax_home() / "emulation" / run_id
    workdir.mkdir(parents=True, exist_ok=True)
    sweep = SweepResult(run_id=run_id, profile=spec.profile.name, replication_factor=config.replication_factor,
                        brokers=config.brokers, drives_per_broker=config.log_dirs_per_broker,
                        duration_s=spec.load.duration_s, kafka_client=spec.driver.kafka_client,
                        repeats=spec.plan.repeats, quantiles=list(spec.load.quantiles), runs=[])
    warmup_s = spec.plan.warmup_s
    if warmup_s:
        # On a testbed the brokers warm out of their slices, as the real node's are warm. At 1x: a warm-up at the
        # plan's highest load compiled more (the compiler threads took 0.08 of the 1x point's 0.46 broker cores after
        # 8x, 0.18 of 0.58 after 1x) but left gigabytes of logs whose deletion and write-back fell on the first point.
        progress(f"warm-up: {warmup_s:.0f} s at 1x, not measured"
                 + (", the brokers out of their CPU slices (warm, as a real node's)" if config.testbed else ""))
        try:
            with cpu_slices.brokers_unlimited(config):
                warmup = replace(spec.with_load(duration_s=warmup_s, ramp_up_s=0, ramp_down_s=0),
                                 plan=replace(spec.plan, repeats=1))
                run_factor(warmup, config, 1.0, f"{run_id}-warmup", workdir)
        except PointNotStartedError as error:  # brokers that cannot serve even the warm-up: no factor runs
            sweep.stopped = f"the warm-up's {error}"
            sweep.skipped_factors = list(spec.plan.factors)
            progress(f"  {sweep.stopped}; the sweep ends here")
    return sweep, workdir


def device_speedup(run: RunResult, baseline: str) -> float | None:
    """With an identify curve: the `baseline` curve's time per face over the device's, both at the batch the median
    face was identified in (what acceleration the device actually gave at this load), else None."""
    from aitax.emulation.curves import load_curve

    curves = [load_curve(name) for name in run.workload.accelerators]
    device = next((curve for curve in curves if curve.stage == "identify"), None)
    batch = batch_size_p50(run.latency.batch_sizes) if run.latency else None
    if device is None or not batch:
        return None
    return load_curve(baseline).per_item_ms(round(batch)) / device.per_item_ms(round(batch))


def _one_line(r: RunResult, baseline: str = BASELINE_CURVE) -> str:
    speedup = device_speedup(r, baseline)
    latency = (f"e2e mean {r.latency.mean_ms:.0f} ms p99 {r.latency.p99_ms:.0f} ms, identify batch p50 "
               f"{batch_size_p50(r.latency.batch_sizes) or 0:g}"
               + ("" if speedup is None else f" (the device {speedup:.1f}x {baseline} at that batch)")
               if r.latency else "no faces")
    used = r.resources
    offered = "" if r.offered_faces_per_s is None else f"/{r.offered_faces_per_s:.0f}"
    point = f"{r.workload.factor:.3g}x" + (f" {r.workload.in_flight} in flight" if r.workload.in_flight else "")
    backlog = f", backlog {r.backlog_faces} faces" if r.backlog_faces else ""
    failed = f"; {r.process_failures[0]}" if r.process_failures else ""
    return (f"  {point} {'stable' if r.stable else 'UNSTABLE'}: {r.achieved_faces_per_s:.0f}{offered} faces/s, "
            f"{latency}{backlog}, broker writes {used.broker_disk_write_bytes_per_s / 1e6:.1f} MB/s each"
            f"{storage_note(used)}, cpu {used.machine_cpu_busy:.0%}; {used.saturated}{failed}")


def storage_note(used: Resources) -> str:
    """' (storage loop0 93% busy, ...)': each device under the log dirs, as the block layer read it."""
    devices = ", ".join(f"{d.device} {d.utilisation:.0%}" for d in used.storage)
    return f" (storage {devices} busy)" if devices else ""


def run_scaling(dimension: str, values: list[float], spec: SweepSpec, progress=print) -> ScalingResult:
    """One sweep per configuration along `dimension`; the table of highest stable factors (Fig. 15). With a
    latency bound in `spec`, a latency-bounded search per configuration instead."""
    from aitax.stack.stack import current_config, reshape_kafka, running_config

    original = running_config()
    scaling = ScalingResult(dimension=dimension, rows=[])
    try:
        for value in values:
            config, run_spec = original, spec
            if dimension == "brokers":
                config = reshape_kafka(original, int(value), original.log_dirs_per_broker, progress)
            elif dimension == "drives":
                config = reshape_kafka(original, original.brokers, int(value), progress)
            else:
                scaled = spec.profile.scaled_faces(value)
                run_spec = replace(spec, profile=scaled).with_load(profile=_write_profile(scaled))
            progress(f"== {dimension} {value:g}")
            sweep = (search_latency_bound(run_spec, config, progress) if run_spec.load.latency_bound_ms is not None
                     else run_sweep(run_spec, config, progress))
            scaling.rows.append(ScalingRow(value=value, paper=HIGHEST_STABLE_FACTOR[dimension].get(value),
                                           sweep=sweep))
    finally:
        if dimension in ("brokers", "drives"):
            reshape_kafka(current_config() or original, original.brokers, original.log_dirs_per_broker, progress)
    return scaling


def _write_profile(profile: Profile) -> str:
    path = aitax_home() / "emulation" / "profiles" / f"{profile.name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(profile.to_yaml())
    return str(path)
