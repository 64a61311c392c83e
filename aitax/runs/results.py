"""What a load run measured, and a sweep of runs: the one versioned results model that every reader imports.

A run is described by its workload (what load, as an OpenMessaging Benchmark workload file) and its driver (how
the Kafka clients behave, as its driver file), and judged by a verdict that lists each condition, what was
measured and whether it held (as MLPerf LoadGen prints them). `aitax run`, the emulation sweep, the scaling
study, experiment phases and the fault scenarios all produce `RunResult`s; the sweep table, the plots, the
experiment results and `aitax tco plan --from-emulation` read them back through `read_results`.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from aitax.common.errors import UserError, invalid
from aitax.runs.applications import application
from aitax.telemetry.latency import LatencySummary, Tail
from aitax.telemetry.quantiles import DEFAULT_QUANTILES, min_samples, quantile_key

RESULTS_SCHEMA_VERSION = 1
THROUGHPUT_FLOOR = 0.9  # identified below 90% of offered during the window: faces pile up somewhere
LATENCY_GROWTH = 1.5  # second half of the run slower than 1.5x the first: queues are growing
LATENCY_GROWTH_MIN_MS = 100.0  # ... by at least this much (noise on a small machine)
# The knee of a sweep: the first factor whose end-to-end p50 is above this multiple of the lowest p50 of the factors
# below it. Faster compute should lower latency; once it rises this much instead, faces queue for a resource.
KNEE_P50_MULTIPLE = 2.0


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Camera(_Model):
    """A live camera a producer reads (pipeline.camera). Its password never sits here, where results are saved: a
    file holds it (a mounted Secret), or the environment's AITAX_CAMERA_PASSWORD."""

    url: str  # rtsp:// or rtsps://, without credentials
    user: str | None = None
    password_file: str | None = None
    transport: Literal["tcp", "udp"] = "tcp"
    declared_fps: float = Field(0.0, ge=0)  # 0: what the stream says
    stall_s: float = Field(5.0, gt=0)

    @field_validator("url")
    @classmethod
    def _no_password(cls, url: str) -> str:
        from urllib.parse import urlsplit

        parts = urlsplit(url)
        if parts.scheme not in ("rtsp", "rtsps") or not parts.hostname:
            raise ValueError("expected rtsp://HOST[:PORT]/PATH or rtsps://")
        if parts.password is not None:
            raise ValueError("holds a password: give user and password_file instead (results are saved)")
        return url

    def source(self):
        """The camera as ingestion reads it (`pipeline.camera.CameraSource`), its password read from its file."""
        from aitax.pipeline.camera import CameraSource

        try:
            password = Path(self.password_file).read_text().strip() if self.password_file else None
        except OSError as error:
            raise UserError(f"camera {self.url}: password_file {self.password_file}: {error.strerror}") from None
        return CameraSource.parse(self.url, self.user, password, transport=self.transport,
                                  declared_fps=self.declared_fps, stall_s=self.stall_s)

    def arguments(self) -> list[str]:
        """The ingest-detect options that read this camera."""
        return ["--video", self.url, "--transport", self.transport, "--declared-fps", f"{self.declared_fps:g}",
                "--stall-timeout", f"{self.stall_s:g}",
                *(["--camera-user", self.user] if self.user else []),
                *(["--camera-password-file", self.password_file] if self.password_file else [])]


class Workload(_Model):
    """What load ran: the same description for real and emulated stages, local processes or pods."""

    mode: Literal["real", "emulated"]
    producers: int = Field(ge=1)  # ingest-detect instances (streams)
    consumers: int = Field(ge=1)  # identify instances
    producer_processes: int = Field(1, ge=1)  # OS processes the producer instances share (emulated)
    consumer_processes: int = Field(1, ge=1)
    duration_s: float = Field(gt=0)  # of offered load
    factor: float = Field(1.0, gt=0)  # AI acceleration (emulated: compute sleeps divided by it)
    profile: str | None = None  # emulated: built-in profile name or YAML path
    # emulated: per-batch device curves (shipped names or files, emulation.curves) in place of the profile's
    # per-item times of the stages they name; the factor still raises the load and divides the other stages
    accelerators: list[str] = Field(default_factory=list)
    # emulated: what the profile's compute does for its time: sleep (the host's cores stay free, as with an
    # accelerator; the paper's emulator) or cpu (it takes that much CPU time on a host core, as the CPU pipeline the
    # profile was measured on did). A curve says it itself (`host_cpu`).
    compute: Literal["sleep", "cpu"] = "sleep"
    video: str | None = None  # real: every producer's video (looped)
    cameras: list[Camera] = Field(default_factory=list)  # real: in place of the video, one producer per camera
    gallery: str | None = None  # real
    pace: Literal["native", "max"] = "native"
    # real: 2, ingest-detect containers (frames pass in-process); 3, separate ingest and detect processes, one of
    # each per producer, frames through the `frames` topic (the paper's Fig. 3a)
    stages: Literal[2, 3] = 2
    # runs.applications: face-recognition, or object-detection (the paper's Sec. 6), whose results' "faces"
    # are frames, each answered by one detections record (its detection where identification stands)
    application: str = "face-recognition"
    drain_s: float = Field(15.0, ge=0)  # after the load, how long consumers may take to finish the backlog
    # The measurement window (ramp-up, window, ramp-down): latency counts the faces captured in it, throughput
    # the faces identified in it, after `ramp_up_s` of the schedule and before its last `ramp_down_s`.
    ramp_up_s: float = Field(0.0, ge=0)
    ramp_down_s: float = Field(0.0, ge=0)
    quantiles: list[float] = Field(default_factory=lambda: list(DEFAULT_QUANTILES))
    # Closed loop (emulated): each stream keeps this many frames between ingest and their last identity and
    # takes the next frame when one completes, instead of following the fps x factor schedule. None: open loop.
    in_flight: int | None = Field(None, ge=1)
    # A latency bound the run is also judged by: the `latency_bound_quantile` of end to end within it.
    latency_bound_ms: float | None = Field(None, gt=0)
    latency_bound_quantile: float = Field(0.99, gt=0, lt=1)

    @field_validator("application")
    @classmethod
    def _known_application(cls, name: str) -> str:
        application(name)
        return name

    @model_validator(mode="after")
    def _window_left(self) -> Workload:
        if self.ramp_up_s + self.ramp_down_s >= self.duration_s:
            raise ValueError(f"ramp-up {self.ramp_up_s:g} s + ramp-down {self.ramp_down_s:g} s leave no "
                             f"measurement window in {self.duration_s:g} s")
        if self.latency_bound_ms is not None and self.latency_bound_quantile not in self.quantiles:
            raise ValueError(f"the bound's quantile {self.latency_bound_quantile:g} is not among the quantiles "
                             f"{self.quantiles}")
        if self.stages == 3:
            application(self.application).stages(3)
        if self.in_flight is not None and self.stages == 3:
            raise ValueError("a closed loop (in_flight) runs two stages")
        if self.in_flight is not None and self.mode != "emulated":
            raise ValueError("a closed loop (in_flight) is for emulated stages")
        if self.cameras and (self.mode != "real" or self.stages != 2 or self.producers != len(self.cameras)):
            raise ValueError(f"{len(self.cameras)} camera(s): real stages, two of them, one producer per camera")
        return self

    @property
    def window_s(self) -> float:
        return self.duration_s - self.ramp_up_s - self.ramp_down_s


class Driver(_Model):
    """How the Kafka clients behave."""

    kafka_client: Literal["confluent-kafka", "kafka-python"] = "confluent-kafka"
    keying: str = "track"  # of the `faces` records (pipeline.schema.KEYINGS)
    # Which faces of a track send their thumbnail (pipeline.tracking.SendPolicy): every (the paper's) or sample:N
    send: str = Field(default="every", pattern=r"^(every|sample:[1-9][0-9]{0,3})$")
    acks: Literal["all"] = "all"
    # The consuming stages' dynamic batcher (pipeline.transport.batcher): how long after a first arrival it may
    # wait for a fuller batch. 0 (the default) never waits.
    max_queue_delay_ms: float = Field(default=0.0, ge=0.0, le=60_000.0)
    # How long identify's results producer holds an identity to fill a produce request. End to end runs to the
    # identity's append, so this is counted (as `deliver`). 5 ms by measurement (docs/latency.md): 100 ms added
    # 100 ms to every face for no gain the brokers showed at these rates.
    results_linger_ms: float = Field(default=5.0, ge=0.0, le=10_000.0)
    # The emulated identify's largest batch (None: the stage's default, one face as the paper's identify).
    max_batch: int | None = Field(default=None, ge=1, le=4096)


class Condition(_Model):
    name: str
    held: bool
    measured: str
    required: str


class Verdict(_Model):
    conditions: list[Condition]

    @property
    def held(self) -> bool:
        return all(condition.held for condition in self.conditions)

    @property
    def reasons(self) -> list[str]:
        """One line per condition that did not hold."""
        return [f"{c.name}: {c.measured} (required: {c.required})" for c in self.conditions if not c.held]


class StorageDevice(_Model):
    """One block device under the brokers' log dirs over the window, as the block layer counted it."""

    device: str  # e.g. vda, loop2
    node: str | None = None  # on a cluster, the node it is on (read there by the broker's disk meter)
    brokers: list[int]  # whose log dirs it holds (all of them where the brokers share the machine's disk)
    write_bytes_per_s: float
    read_bytes_per_s: float
    write_iops: float
    read_iops: float
    busy_share: float  # iostat's %util: time with a request in flight
    # iostat's %util, or on a drive of declared bandwidth (a testbed's) the busier way's share of that rate
    utilisation: float
    declared_bytes_per_s: float | None = None  # a testbed drive's bandwidth
    # what `aitax stack calibrate` measured this device to write (None: not calibrated), and the window's share of it
    calibrated_write_bytes_per_s: float | None = None
    write_share: float | None = None


class Resources(_Model):
    """What the brokers, the machine and the load's own processes spent during the window."""

    broker_disk_write_bytes_per_s: float  # mean per broker (the TCO planner's input)
    broker_disk_read_bytes_per_s: float
    broker_write_bytes_per_s: dict[int, float] = Field(default_factory=dict)
    broker_cpu_cores: dict[int, float] = Field(default_factory=dict)
    machine_cpu_busy: float = 0.0  # share of all cores
    loopback_bytes_per_s: float = 0.0
    broker_network_bytes_per_s: dict[int, float] = Field(default_factory=dict)  # in + out, pods (locally: loopback)
    broker_handler_busy: dict[int, float] = Field(default_factory=dict)
    broker_network_busy: dict[int, float] = Field(default_factory=dict)
    # Each broker's shaped link (`aitax cluster`), its busier way as a share of the rate; empty: not shaped.
    broker_link_busy: dict[int, float] = Field(default_factory=dict)
    under_min_isr_partitions: int = 0
    produce_p99_ms: float = 0.0
    fetch_p99_ms: float = 0.0
    client_cpu_cores: dict[str, float] = Field(default_factory=dict)  # the load's producers and consumers
    # The devices under the brokers' log dirs (empty: not read, e.g. a release's pods), and each broker's busiest
    storage: list[StorageDevice] = Field(default_factory=list)
    broker_storage_utilisation: dict[int, float] = Field(default_factory=dict)
    # On a testbed, each broker's CPU as a share of its slice, and the load's of its own
    broker_cpu_slice_busy: dict[int, float] = Field(default_factory=dict)
    client_cpu_slice_busy: float | None = None
    busiest_utilisation: float = 0.0  # of the resource nearest its capacity, which `saturated` names
    saturated: str = ""  # which resource ran out first, and the brokers' own signals


class Startup(_Model):
    """What a run spent before its measurement window, reported apart and never in its latency: each role's time
    to ready (from its start until every process of it reported ready: models loaded and warmed, partitions
    assigned, producers connected), the first durable result after the load began, and the warm-up's latency (the
    faces captured in the ramp-up)."""

    ready_s: dict[str, float]  # role (the stage commands it runs) -> seconds, in the order they started
    first_result_s: float | None  # None: no result
    warmup: LatencySummary | None  # None: no ramp-up, or no face in it


RESULT_FILE = "result.json"  # a run's RunResult, beside its events (load.engine.run_local_pipeline)


class RunResult(_Model):
    schema_version: Literal[1] = RESULTS_SCHEMA_VERSION
    run_id: str
    workload: Workload
    driver: Driver
    brokers: int | None = None  # None: brokers the run did not manage (an external bootstrap)
    drives_per_broker: int | None = None
    testbed: str | None = None  # the declared design the brokers ran on, scaled ("paper at 1/168"); None: none
    repeat: int = 1  # which repeat of the same workload (1..N)
    load_started_ns: int  # the producers' schedule began (the first face's scheduled time)
    load_ended_ns: int  # the producers stopped
    window_start_ns: int  # the measurement window, after the warm-up
    window_end_ns: int  # ... and before the cool-down
    offered_faces_per_s: float | None  # None: a real video offers what its frames hold
    achieved_faces_per_s: float  # identified during the measurement window, over its length
    produced_faces: int  # acknowledged by the brokers
    identified_faces: int  # distinct faces with an identity
    duplicates: int = 0  # identities published more than once (redelivery after a crash or rebalance)
    backlog_faces: int  # still queued when the drain ended
    face_bytes_mean: float
    latency: LatencySummary | None
    verdict: Verdict
    startup: Startup | None = None  # None: a result written before start-up was reported apart
    resources: Resources | None = None  # None: not sampled (brokers not local)
    process_failures: list[str] = Field(default_factory=list)  # "name: exit N, log PATH"
    interrupted: bool = False  # Ctrl-C ended the load early
    notes: list[str] = Field(default_factory=list)

    @property
    def stable(self) -> bool:
        return self.verdict.held


@dataclass(frozen=True)
class FactorRuns:
    """The repeats of one point of a sweep (a factor, and in a closed loop the frames in flight), read
    together: medians, spreads and the merged tail."""

    factor: float
    in_flight: int | None
    runs: list[RunResult]

    @property
    def label(self) -> str:
        return f"{self.factor:g}x" + ("" if self.in_flight is None else f" {self.in_flight} in flight")

    @property
    def stable_repeats(self) -> int:
        return sum(run.stable for run in self.runs)

    @property
    def stable(self) -> bool:
        """Every repeat held: one unstable repeat is enough to doubt a factor."""
        return self.stable_repeats == len(self.runs)

    def spread(self, value: Callable[[RunResult], float | None]) -> Spread | None:
        values = [v for v in map(value, self.runs) if v is not None]
        return Spread(statistics.median(values), min(values), max(values)) if values else None

    def tail(self, quantiles: Sequence[float]) -> Tail | None:
        return Tail.merged([run.latency.tail for run in self.runs if run.latency is not None], quantiles)


@dataclass(frozen=True)
class Spread:
    median: float
    low: float
    high: float


def format_spread(spread: Spread | None, digits: int = 0) -> str:
    """"7 (4-10)": the median and, where repeats differ, their min-max."""
    if spread is None:
        return "-"
    if spread.low == spread.high:
        return f"{spread.median:.{digits}f}"
    return f"{spread.median:.{digits}f} ({spread.low:.{digits}f}-{spread.high:.{digits}f})"


class SweepResult(_Model):
    """One run per acceleration factor and repeat, on one broker layout (the paper's Fig. 10 and 11)."""

    schema_version: Literal[1] = RESULTS_SCHEMA_VERSION
    run_id: str
    profile: str
    replication_factor: int = Field(ge=1)
    brokers: int = Field(ge=1)
    drives_per_broker: int = Field(ge=1)
    duration_s: float
    kafka_client: str
    repeats: int = Field(1, ge=1)
    quantiles: list[float] = Field(default_factory=lambda: list(DEFAULT_QUANTILES))
    runs: list[RunResult]

    def by_factor(self) -> list[FactorRuns]:
        """The runs grouped by point: open-loop factors in order, then closed-loop ones by frames in flight."""
        points = sorted({(run.workload.in_flight or 0, run.workload.factor) for run in self.runs})
        return [FactorRuns(factor, in_flight or None,
                           [run for run in self.runs if (run.workload.in_flight or 0, run.workload.factor)
                            == (in_flight, factor)])
                for in_flight, factor in points]

    @property
    def latency_bound(self) -> tuple[float, float] | None:
        """(quantile, ms) the runs were also judged by, if any."""
        workload = self.runs[0].workload if self.runs else None
        if workload is None or workload.latency_bound_ms is None:
            return None
        return workload.latency_bound_quantile, workload.latency_bound_ms

    skipped_factors: list[float] = Field(default_factory=list)  # not run: the sweep's stop rule ended it first
    stopped: str | None = None  # the brokers could not set the next point up: overload, measured, ends the sweep

    def open_loop(self) -> list[FactorRuns]:
        return [factor for factor in self.by_factor() if factor.in_flight is None]

    @property
    def knee(self) -> Knee | None:
        """The first open-loop factor where latency left its low-load level (see `Knee`), if any."""
        lowest: tuple[float, float] | None = None  # (p50 ms, factor): the lowest median p50 so far
        for factor in self.open_loop():
            p50 = factor.spread(lambda run: run.latency.p50_ms if run.latency else None)
            if p50 is None:
                continue  # no face identified in the window: the throughput condition already fails it
            if lowest is not None and p50.median > KNEE_P50_MULTIPLE * lowest[0]:
                return Knee(factor=factor.factor,
                            reason=f"p50 {p50.median:.0f} ms is {p50.median / lowest[0]:.1f}x the {lowest[0]:.0f} ms "
                                   f"at {lowest[1]:g}x (the knee: above {KNEE_P50_MULTIPLE:g}x the lowest p50 below)")
            if lowest is None or p50.median < lowest[0]:
                lowest = (p50.median, factor.factor)
        return None

    @property
    def highest_stable_by_runaway(self) -> float | None:
        """The paper's reading of Fig. 10 and 15: the highest open-loop factor below the first whose runs broke a
        condition (latency growing within the window, throughput, a failed process); with a latency bound, the
        latency-bounded throughput's factor. A point well past saturation can pass it."""
        best = None
        for factor in self.open_loop():
            if not factor.stable:
                break
            best = factor.factor
        return best

    @property
    def highest_stable_factor(self) -> float | None:
        """The highest open-loop factor below both the first unstable one and the knee: no point a user would
        call saturated."""
        knee = self.knee
        best = self.highest_stable_by_runaway
        if knee is None or best is None or best < knee.factor:
            return best
        below = [factor.factor for factor in self.open_loop() if factor.factor < knee.factor]
        return max(below, default=None)


@dataclass(frozen=True)
class Knee:
    """Where a sweep's latency left its low-load level: the first factor whose end-to-end p50 is above
    KNEE_P50_MULTIPLE times the lowest p50 of the factors below it."""

    factor: float
    reason: str


class ScalingRow(_Model):
    value: float
    paper: float | None  # the paper's Fig. 15 highest stable factor for this configuration
    sweep: SweepResult


class ScalingResult(_Model):
    """One sweep per configuration along a dimension (the paper's Fig. 15)."""

    schema_version: Literal[1] = RESULTS_SCHEMA_VERSION
    dimension: Literal["brokers", "drives", "face-size"]
    rows: list[ScalingRow]

    def table(self, highest: str = "below the knee") -> list[str]:
        """Per configuration: the highest factor whose latency did not run away (the paper's reading of Fig. 15),
        the highest also below the knee (`highest`: what that column was judged by), and the paper's."""
        def factor(value: float | None) -> str:
            return "none" if value is None else format(value, ".3g") + "x"

        lines = [f"{'configuration':<22}{'no runaway':>12}{highest:>16}{'paper (Fig. 15)':>17}"]
        for row in self.rows:
            lines.append(f"{self.dimension + ' ' + format(row.value, 'g'):<22}"
                         f"{factor(row.sweep.highest_stable_by_runaway):>12}{factor(row.sweep.highest_stable_factor):>16}"
                         f"{'-' if row.paper is None else format(row.paper, 'g') + 'x':>17}")
        return lines


def judge(latency: LatencySummary | None, *, offered_faces: int | None, identified_in_window: int,
          produced_faces: int, identified_faces: int, backlog_faces: int, drained: bool,
          latency_bound: tuple[float, float] | None = None, process_failures: Sequence[str] = ()) -> Verdict:
    """The conditions a run is held to. Every stage process ran to its end; throughput during the window against
    the offered load (or, for a real video whose load is what its frames hold, every acknowledged face
    identified); latency not growing over the run (queueing theory's "infinite latency": faces enter faster than
    they leave); and, where the workload drains, no backlog left."""
    conditions = []
    if offered_faces is not None:
        ratio = identified_in_window / offered_faces if offered_faces else 0.0
        conditions.append(Condition(
            name="throughput", held=ratio >= THROUGHPUT_FLOOR,
            measured=f"identified {identified_in_window} of {offered_faces} offered faces during the window "
                     f"({ratio:.0%}; produced {produced_faces})",
            required=f">= {THROUGHPUT_FLOOR:.0%} of offered"))
    else:
        conditions.append(Condition(name="every acknowledged face identified",
                                    held=identified_faces >= produced_faces,
                                    measured=f"{identified_faces} of {produced_faces}",
                                    required="all of them"))
    if latency is not None and latency.first_half_ms:
        first, second = latency.first_half_ms, latency.second_half_ms
        conditions.append(Condition(
            name="latency bounded",
            held=not (second > first * LATENCY_GROWTH and second - first > LATENCY_GROWTH_MIN_MS),
            measured=f"mean end to end {first:.0f} ms -> {second:.0f} ms from the first half to the second",
            required=f"second half <= {LATENCY_GROWTH:g}x the first or within {LATENCY_GROWTH_MIN_MS:.0f} ms"))
    if latency_bound is not None:
        conditions.append(_within_bound(latency, *latency_bound))
    if drained:
        conditions.append(Condition(name="backlog drained", held=backlog_faces == 0,
                                    measured=f"{backlog_faces} faces still queued", required="0"))
    conditions.append(_processes_ran(process_failures))
    return Verdict(conditions=conditions)


def _processes_ran(process_failures: Sequence[str]) -> Condition:
    return Condition(name="stage processes ran", held=not process_failures,
                     measured=process_failures[0] if process_failures else "every one to its end",
                     required="none failed")


def _within_bound(latency: LatencySummary | None, quantile: float, bound_ms: float) -> Condition:
    key = quantile_key(quantile)
    if latency is None:
        return Condition(name=f"{key} within bound", held=False, measured="no faces in the window",
                         required=f"<= {bound_ms:g} ms")
    value = latency.tail.quantiles_ms[key]
    few = (f" (only {latency.tail.count} faces: {key} wants {min_samples(quantile)})"
           if key in latency.tail.too_few_samples else "")
    return Condition(name=f"{key} within bound", held=value <= bound_ms, measured=f"{key} {value:.0f} ms{few}",
                     required=f"<= {bound_ms:g} ms")


class StageSummary(_Model):
    """One stage's events in an experiment phase, from Elasticsearch."""

    events: int
    compute_ms: dict[str, float]  # "p50", "p90", "p99"
    events_per_s: float | None


class PhaseResult(_Model):
    """One experiment phase: the replicas it ran and what the load engine measured (its verdict is the run's)."""

    phase: str
    run_id: str
    started_at: float  # epoch seconds
    ended_at: float
    factor: float
    replicas: dict[str, int]  # of each stage the phase ran (its producers end it at zero)
    run: RunResult
    stages: dict[str, StageSummary] = Field(default_factory=dict)
    note: str | None = None
    repeat: int = 1  # which pass over the phases (`--repeat`)


class BoundSearchResult(_Model):
    """A phase's latency-bound search (its probes are the experiment's phases of that name): the highest factor whose
    run held every condition and the bound, or None when the lowest already broke one."""

    phase: str
    repeat: int = 1
    quantile: float
    within_ms: float
    factors: tuple[float, float]  # the range searched
    probes: list[float]  # the factors run, in order
    highest_factor: float | None
    faces_per_s: float | None  # achieved at the highest factor

    def line(self) -> str:
        found = ("no factor in range keeps it" if self.highest_factor is None else
                 f"highest factor {self.highest_factor:.3g}x, {self.faces_per_s or 0:.1f} faces/s")
        return (f"{self.phase}: {quantile_key(self.quantile)} within {self.within_ms:g} ms: {found} "
                f"({len(self.probes)} probes: {', '.join(f'{f:.3g}x' for f in self.probes)})")


class ExperimentResult(_Model):
    """What `aitax experiment run` writes, rewritten after every phase: an interrupted experiment keeps the phases
    it finished."""

    schema_version: Literal[1] = RESULTS_SCHEMA_VERSION
    experiment: str
    mode: str
    source: str  # the spec file
    phases: list[PhaseResult]
    searches: list[BoundSearchResult] = Field(default_factory=list)


class FaultResult(_Model):
    """A fault under load (`aitax faults`): the run it disrupted, every face accounted for from the topics, and a
    verdict whose conditions say what held (`judge_fault`)."""

    schema_version: Literal[1] = RESULTS_SCHEMA_VERSION
    scenario: str
    offered_faces_per_s: float
    acknowledged: int  # faces the producers had acknowledged
    in_topic: int  # distinct faces of the run in `faces`
    identified: int  # of those, how many have an identity
    duplicates: int  # identities published more than once, removed
    lost: int  # in `faces` (so acknowledged) but never identified
    stall_s: float  # the longest gap between consecutive appends to `faces`
    isr_restored: bool | None  # None: the scenario leaves the brokers alone
    recovery_s: float | None = None  # from the failed part's return until every ISR was complete; None: not timed
    dead_letters: int = 0
    process_failures: list[str] = Field(default_factory=list)  # "name: exit N, log PATH", except those killed
    events_in_elasticsearch: dict[str, int] | None = None  # per stage, where the scenario disrupts Elasticsearch
    notes: list[str] = Field(default_factory=list)
    verdict: Verdict


class FaultResults(_Model):
    """What `aitax faults --json` writes: each scenario's result."""

    schema_version: Literal[1] = RESULTS_SCHEMA_VERSION
    results: list[FaultResult]


def judge_fault(*, acknowledged: int | None, in_topic: int, lost: int, isr_restored: bool | None,
                process_failures: Sequence[str], events: dict[str, int] | None = None,
                expected_events: dict[str, int] | None = None) -> Verdict:
    """The conditions a fault is held to: nothing acknowledged is lost, whatever broke. `acknowledged` None: the
    producers' own count is not known (a cluster's pods), so that condition is not claimed."""
    conditions = [] if acknowledged is None else [
        Condition(name="acknowledged faces kept", held=in_topic >= acknowledged,
                  measured=f"{in_topic} of {acknowledged} acknowledged faces in the topic",
                  required="all of them")]
    conditions.append(Condition(name="no acknowledged face lost", held=lost == 0,
                                measured=f"{lost} faces in the topic never identified", required="0"))
    if isr_restored is not None:
        conditions.append(Condition(name="replicas back in sync", held=isr_restored,
                                    measured="every partition's ISR complete" if isr_restored
                                    else "partitions still under-replicated", required="every ISR complete"))
    if expected_events is not None:
        arrived = {stage: (events or {}).get(stage, 0) for stage in expected_events}
        conditions.append(Condition(name="every event reached Elasticsearch", held=arrived == expected_events,
                                    measured=f"{events}", required=f"{expected_events}"))
    conditions.append(_processes_ran(process_failures))
    return Verdict(conditions=conditions)


Result = TypeVar("Result", RunResult, SweepResult, ScalingResult, FaultResults, ExperimentResult)


def write_results(result: BaseModel, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(result.model_dump_json(indent=2) + "\n", encoding="utf-8")
    return path


def read_results(path: Path, kind: type[Result]) -> Result:
    """A results file, validated: a wrong one is one line naming the file, the field and what is wrong."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise UserError(f"{path}: cannot read results: {error.strerror}") from None
    except json.JSONDecodeError as error:
        raise UserError(f"{path}: not JSON: {error}") from None
    if isinstance(raw, dict) and raw.get("schema_version") not in (None, RESULTS_SCHEMA_VERSION):
        raise UserError(f"{path}: schema_version {raw['schema_version']!r}: this aitax reads version "
                        f"{RESULTS_SCHEMA_VERSION}")
    try:
        return kind.model_validate(raw)
    except ValidationError as error:
        raise invalid(error, str(path)) from None
