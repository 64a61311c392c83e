"""The AI-tax report of one run: the paper's Fig. 6-9 computed from the pipeline's events.

Pure functions over event documents (`Event.to_document()` dicts, all of one run); loading lives in
`report_sources`, drawing in `report_render`. Sums use `math.fsum`, so the report does not depend on the order
the events arrive in (a JSONL folder and Elasticsearch give the same report).
"""

from __future__ import annotations

import json
import math
import types
import typing
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from typing import Any

import numpy as np

from aitax.common.paper import PAPER, PaperNumbers
from aitax.telemetry.camera_health import CameraHealth
from aitax.telemetry.events import AI_SUBSTEPS, CAMERA_STAGE, STAGES, SUBSTEPS
from aitax.telemetry.latency import BROKER_WAIT, NS_PER_MS, Distribution, distribution, dominant_wait, end_to_end_ms

NS_PER_S = 1_000_000_000
BUCKET_NS = NS_PER_S  # Fig. 7 buckets
FRAME_QUEUE = "frame_queue"  # the wait between ingest and detection: a stage of latency with no event of its own
# A frame's start past its schedule (the paper's "Delay", Sec. 6.3), from the ingest event's `scheduled_ns`.
SCHEDULE_DELAY = "schedule_delay"
DELIVER = "deliver"  # identified to the identity's append: the results' linger, send and acknowledgement
# Fig. 6's stages: the events' stages with broker wait split by owner (telemetry.latency), and the delivery.
BREAKDOWN_STAGES = (SCHEDULE_DELAY, "ingest", FRAME_QUEUE, "detect", *BROKER_WAIT, "identify", DELIVER)
PROCESS_KINDS = tuple(stage for stage in STAGES if stage != "broker_wait")  # broker_wait is time in Kafka, no CPU
AI_SPEEDUPS = (1, 2, 4, 8, 16, 32)  # Fig. 9's x axis

FrameKey = tuple[str, int]  # stream_id, frame_index
FaceKey = tuple[str, int, int]  # stream_id, frame_index, face_index
Document = dict[str, Any]


@dataclass(frozen=True)
class StageLatency:
    stage: str
    mean_ms: float  # over the breakdown's faces: the stage means add up to the e2e mean
    share: float  # of the e2e mean
    tail_mean_ms: float  # over the faces whose e2e is >= the e2e p99
    tail_share: float
    standalone: Distribution | None  # over every event of the stage (frames up to detect, faces after)


@dataclass(frozen=True)
class LatencyBreakdown:
    """Fig. 6 and the tail: over the faces that reached identification and whose frame's events are present."""

    faces: int
    e2e: Distribution
    tail_faces: int
    tail_e2e_mean_ms: float
    stages: list[StageLatency]  # BREAKDOWN_STAGES: they tile end to end
    broker_wait: StageLatency  # its parts by owner taken together: the paper's broker wait


@dataclass(frozen=True)
class BrokerWaitOwners:
    """The broker wait's mean parts by owner (telemetry.latency.BROKER_WAIT) over the breakdown's faces."""

    faces: int
    parts_ms: dict[str, float]
    dominant: str  # the largest part
    clock: str


@dataclass(frozen=True)
class LoadBucket:
    start_s: float  # since the run's first event
    faces_finished: int
    mean_e2e_ms: float | None  # of the faces identified in this bucket
    faces_in_system: float  # detected but not yet identified, averaged over the bucket
    frames_detected: int = 0  # frames whose detection ended in this bucket
    faces_detected: int = 0  # ... and their faces: what the cameras offered the brokers
    p50_e2e_ms: float | None = None  # of the faces identified in this bucket
    p99_e2e_ms: float | None = None
    stages_ms: dict[str, float] = field(default_factory=dict)  # their mean per BREAKDOWN_STAGES (Fig. 6 over time)
    width_s: float = 1.0  # the last bucket ends with the run's last event: per-second rates divide by this


@dataclass(frozen=True)
class LoadOverTime:
    """Fig. 7."""

    bucket_s: float
    buckets: list[LoadBucket]
    correlation: float | None  # Pearson, latency vs faces in system, over buckets where faces finished


@dataclass(frozen=True)
class ProcessCpu:
    kind: str
    events: int  # events with sub-steps
    total_ms: dict[str, float]
    share: dict[str, float]
    ai_ms: float
    ai_share: float


@dataclass(frozen=True)
class CpuBreakdown:
    """Fig. 8."""

    processes: list[ProcessCpu]
    application_ai_share: float | None
    events_without_substeps: int  # older runs: their time cannot be split


@dataclass(frozen=True)
class AmdahlProjection:
    """Fig. 9: overall speed-up of one process when only its AI sub-steps get faster."""

    kind: str
    ai_share: float
    factors: list[int]
    speedups: list[float]
    asymptote: float | None  # None: all AI, unbounded


@dataclass(frozen=True)
class StreamThroughput:
    stream_id: str
    frames: int  # frames through detection
    faces: int  # faces identified
    frames_per_s: float | None
    faces_per_s: float | None


@dataclass(frozen=True)
class Throughput:
    span_s: float  # first event's start to last event's end
    streams: list[StreamThroughput]
    total: StreamThroughput


@dataclass(frozen=True)
class CameraReport:
    """A live camera's health at the end of the run (its last `camera` event)."""

    stream_id: str
    health: CameraHealth


@dataclass(frozen=True)
class Report:
    run_id: str
    events: dict[str, int]  # per stage, after dropping duplicates
    ignored_events: int  # stages the report does not use
    duplicate_events: int  # the same stage of the same frame or face again (redelivery): first one kept
    malformed_lines: int  # JSONL lines that were not events
    faces_detected: int
    faces_identified: int
    faces_unmatched: int  # identified, but their frame's ingest or detect event is missing: not in the breakdown
    acceleration_factors: list[float]
    kafka_clients: list[str]
    latency: LatencyBreakdown | None
    broker: BrokerWaitOwners | None
    load: LoadOverTime
    cpu: CpuBreakdown
    amdahl: list[AmdahlProjection]
    throughput: Throughput
    cameras: list[CameraReport] = field(default_factory=list)  # live cameras only
    # identified faces whose thumbnail crossed Kafka; the rest were `tracked` faces named from their track
    thumbnails_identified: int = 0
    paper: PaperNumbers = field(default=PAPER)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Report:
        return _from_plain(cls, data)

    @classmethod
    def from_json(cls, text: str) -> Report:
        return cls.from_dict(json.loads(text))


def _from_plain(kind: Any, value: Any) -> Any:
    """Rebuild a value of type `kind` (dataclasses, lists, dicts, optionals) from its JSON form."""
    if value is None:
        return None
    if is_dataclass(kind):
        hints = typing.get_type_hints(kind)
        # A field missing from older JSON takes its default.
        return kind(**{f.name: _from_plain(hints[f.name], value[f.name]) for f in fields(kind) if f.name in value})
    origin, arguments = typing.get_origin(kind), typing.get_args(kind)
    if origin in (types.UnionType, typing.Union):
        (inner,) = [argument for argument in arguments if argument is not type(None)]
        return _from_plain(inner, value)
    if origin is list:
        return [_from_plain(arguments[0], item) for item in value]
    if origin is dict:
        return {key: _from_plain(arguments[1], item) for key, item in value.items()}
    if kind is float:
        return float(value)  # JSON writes 2.0 as 2.0, but a hand-written file may say 2
    return value


# -- indexing the events -----------------------------------------------------------------------------------------

@dataclass
class _RunEvents:
    """The run's events by stage and key, first occurrence kept."""

    ingest: dict[FrameKey, Document]
    detect: dict[FrameKey, Document]
    broker_wait: dict[FaceKey, Document]
    identify: dict[FaceKey, Document]
    ignored: int
    duplicates: int
    cameras: dict[str, Document] = field(default_factory=dict)  # each camera's last health


def _index(documents: Iterable[Document]) -> _RunEvents:
    run = _RunEvents({}, {}, {}, {}, ignored=0, duplicates=0)
    # A total order, so "first occurrence" does not depend on the source's order.
    ordered = sorted(documents, key=lambda d: (d["wall_start_ns"], d["wall_end_ns"], d["stage"], d.get("process", "")))
    for document in ordered:
        stage = document["stage"]
        if stage == CAMERA_STAGE and document.get("camera"):
            run.cameras[document["stream_id"]] = document  # in time order: the last one stays
            continue
        if stage not in STAGES:
            run.ignored += 1
            continue
        by_key: dict = getattr(run, stage)
        key = (document["stream_id"], document["frame_index"])
        if stage in ("broker_wait", "identify"):
            key = (*key, document.get("face_index"))
        if key in by_key:
            run.duplicates += 1
        else:
            by_key[key] = document
    return run


def _duration_ms(document: Document) -> float:
    return (document["wall_end_ns"] - document["wall_start_ns"]) / NS_PER_MS


def _mean(values: list[float]) -> float:
    return math.fsum(values) / len(values)


# -- Fig. 6 and the tail ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Face:
    """One face's path through the pipeline, stage by stage (ms); the stages add up to `e2e_ms` exactly."""

    stages_ms: dict[str, float]
    e2e_ms: float
    delivered_ns: int
    detect_host: str | None
    identify_host: str | None


def _faces(run: _RunEvents) -> list[_Face]:
    """Faces with their frame's ingest and detect events. End to end starts at the frame's schedule
    (`telemetry.latency`; an event of schema 1 has none, so it starts at capture) and ends at the identity's append
    (schema 5; before, at identification). Broker wait is identify start minus detect end (the paper's definition,
    and what the broker_wait event spans), split by owner as its event says, so the stages tile the face's
    lifetime."""
    faces = []
    for key, identify in run.identify.items():
        stream_id, frame_index, _ = key
        ingest, detect = run.ingest.get((stream_id, frame_index)), run.detect.get((stream_id, frame_index))
        if ingest is None or detect is None:
            continue
        delivered_ns = _delivered_ns(identify)
        marks = (_scheduled_ns(ingest), ingest["wall_start_ns"], ingest["wall_end_ns"], detect["wall_start_ns"],
                 detect["wall_end_ns"])
        stages_ms = {stage: (end - start) / NS_PER_MS
                     for stage, start, end in zip(BREAKDOWN_STAGES, marks, marks[1:], strict=False)}
        wait_ms = (identify["wall_start_ns"] - detect["wall_end_ns"]) / NS_PER_MS
        stages_ms |= _owners_ms(run.broker_wait.get(key), wait_ms)
        stages_ms["identify"] = _duration_ms(identify)
        stages_ms[DELIVER] = (delivered_ns - identify["wall_end_ns"]) / NS_PER_MS
        faces.append(_Face(stages_ms, end_to_end_ms(marks[0], delivered_ns), delivered_ns, detect.get("host"),
                           identify.get("host")))
    return faces


def _owners_ms(broker_wait: Document | None, wait_ms: float) -> dict[str, float]:
    """A face's broker wait by owner, from its event's sub-steps; events of schema 4 and before split it only at the
    append (before it: produce; after it: in Kafka). The parts are scaled to `wait_ms` so that the stages tile end
    to end exactly (the sub-steps are rounded to the microsecond)."""
    steps = (broker_wait or {}).get("substeps_ms") or {}
    if "producer_to_broker" in steps:
        steps = {"produce": steps["producer_to_broker"], "in_kafka": steps["broker_to_consumer"]}
    elif not steps and broker_wait and broker_wait.get("broker_append_ns"):  # schema 1: the append time alone
        produce = (broker_wait["broker_append_ns"] - broker_wait["wall_start_ns"]) / NS_PER_MS
        steps = {"produce": produce, "in_kafka": _duration_ms(broker_wait) - produce}
    parts = {part: float(steps.get(part, 0.0)) for part in BROKER_WAIT}
    total = math.fsum(parts.values())
    if total <= 0:
        return {**parts, "produce": wait_ms}  # not split: all of it before the consumer could have asked
    return {part: ms * wait_ms / total for part, ms in parts.items()}


def _delivered_ns(identify: Document) -> int:
    return identify.get("delivered_ns", identify["wall_end_ns"])


def _scheduled_ns(ingest: dict) -> int:
    return ingest.get("scheduled_ns", ingest["wall_start_ns"])


def _standalone(run: _RunEvents) -> dict[str, Distribution | None]:
    queued = [(detect["wall_start_ns"] - run.ingest[key]["wall_end_ns"]) / NS_PER_MS
              for key, detect in run.detect.items() if key in run.ingest]
    return {
        SCHEDULE_DELAY: distribution([(d["wall_start_ns"] - _scheduled_ns(d)) / NS_PER_MS
                                      for d in run.ingest.values()]),
        "ingest": distribution([_duration_ms(d) for d in run.ingest.values()]),
        FRAME_QUEUE: distribution(queued),
        "detect": distribution([_duration_ms(d) for d in run.detect.values()]),
        **{part: distribution([_owners_ms(d, _duration_ms(d))[part] for d in run.broker_wait.values()])
           for part in BROKER_WAIT},
        "broker_wait": distribution([_duration_ms(d) for d in run.broker_wait.values()]),
        "identify": distribution([_duration_ms(d) for d in run.identify.values()]),
        DELIVER: distribution([(_delivered_ns(d) - d["wall_end_ns"]) / NS_PER_MS for d in run.identify.values()]),
    }


def _latency_breakdown(run: _RunEvents, faces: list[_Face]) -> LatencyBreakdown | None:
    if not faces:
        return None
    e2e = distribution([face.e2e_ms for face in faces])
    tail = [face for face in faces if face.e2e_ms >= e2e.p99_ms]
    tail_e2e_mean = _mean([face.e2e_ms for face in tail])
    standalone = _standalone(run)

    def latency(name: str, parts: tuple[str, ...]) -> StageLatency:
        mean = _mean([math.fsum(face.stages_ms[part] for part in parts) for face in faces])
        tail_mean = _mean([math.fsum(face.stages_ms[part] for part in parts) for face in tail])
        return StageLatency(name, mean, mean / e2e.mean_ms if e2e.mean_ms else 0.0, tail_mean,
                            tail_mean / tail_e2e_mean if tail_e2e_mean else 0.0, standalone[name])

    stages = [latency(stage, (stage,)) for stage in BREAKDOWN_STAGES]
    return LatencyBreakdown(len(faces), e2e, len(tail), tail_e2e_mean, stages, latency("broker_wait", BROKER_WAIT))


def _broker_owners(faces: list[_Face]) -> BrokerWaitOwners | None:
    if not faces:
        return None
    parts = {part: _mean([face.stages_ms[part] for face in faces]) for part in BROKER_WAIT}
    same_host = all(face.detect_host == face.identify_host for face in faces)
    clock = "one clock" if same_host else "several clocks: cross-host differences include clock offset"
    return BrokerWaitOwners(len(faces), parts, dominant_wait(parts), clock)


# -- Fig. 7 ------------------------------------------------------------------------------------------------------

def _load_over_time(run: _RunEvents, faces: list[_Face], start_ns: int, end_ns: int) -> LoadOverTime:
    count = max(1, math.ceil((end_ns - start_ns) / BUCKET_NS))

    def bucket_of(ns: int) -> int:
        return max(0, min(count - 1, (ns - start_ns) // BUCKET_NS))

    finished: list[list[_Face]] = [[] for _ in range(count)]
    for face in faces:
        finished[bucket_of(face.delivered_ns)].append(face)
    frames, detected = [0] * count, [0] * count
    # Each detected face is in the system from its frame's detection end until identified (or the run's end).
    in_system_ns = [0] * count
    for (stream_id, frame_index), detect in run.detect.items():
        frames[bucket_of(detect["wall_end_ns"])] += 1
        detected[bucket_of(detect["wall_end_ns"])] += detect.get("face_count") or 0
        for face_index in range(detect.get("face_count") or 0):
            identify = run.identify.get((stream_id, frame_index, face_index))
            entered, left = detect["wall_end_ns"], _delivered_ns(identify) if identify else end_ns
            for bucket in range((entered - start_ns) // BUCKET_NS, min(count, (left - start_ns) // BUCKET_NS + 1)):
                bucket_start = start_ns + bucket * BUCKET_NS
                in_system_ns[bucket] += max(0, min(left, bucket_start + BUCKET_NS) - max(entered, bucket_start))
    buckets = []
    for bucket in range(count):
        bucket_start = start_ns + bucket * BUCKET_NS
        width_ns = min(end_ns, bucket_start + BUCKET_NS) - bucket_start  # the last bucket may be partial
        done = finished[bucket]
        e2e = distribution([face.e2e_ms for face in done])
        buckets.append(LoadBucket(
            start_s=bucket * BUCKET_NS / NS_PER_S, faces_finished=len(done),
            mean_e2e_ms=e2e.mean_ms if e2e else None,
            faces_in_system=in_system_ns[bucket] / width_ns if width_ns > 0 else 0.0,
            frames_detected=frames[bucket], faces_detected=detected[bucket], width_s=width_ns / NS_PER_S,
            p50_e2e_ms=e2e.p50_ms if e2e else None, p99_e2e_ms=e2e.p99_ms if e2e else None,
            stages_ms={stage: _mean([face.stages_ms[stage] for face in done]) for stage in BREAKDOWN_STAGES}
            if done else {}))
    return LoadOverTime(BUCKET_NS / NS_PER_S, buckets, _correlation(buckets))


def _correlation(buckets: list[LoadBucket]) -> float | None:
    pairs = [(b.mean_e2e_ms, b.faces_in_system) for b in buckets if b.mean_e2e_ms is not None]
    if len(pairs) < 2:
        return None
    latency, in_system = np.array(pairs).T
    if latency.std() == 0 or in_system.std() == 0:
        return None  # undefined for a constant series
    return float(np.corrcoef(latency, in_system)[0, 1])


# -- Fig. 8 and Fig. 9 -------------------------------------------------------------------------------------------

def _cpu_breakdown(run: _RunEvents) -> CpuBreakdown:
    processes, without = [], 0
    for kind in PROCESS_KINDS:
        documents = list(getattr(run, kind).values())
        steps = [d["substeps_ms"] for d in documents if d.get("substeps_ms")]
        without += len(documents) - len(steps)
        if not steps:
            continue
        seen = {name for step in steps for name in step}  # in the schema's order, then any the schema lacks
        names = [name for name in SUBSTEPS[kind] if name in seen] + sorted(seen - set(SUBSTEPS[kind]))
        total_ms = {name: math.fsum(step.get(name, 0.0) for step in steps) for name in names}
        overall = math.fsum(total_ms.values())
        ai_ms = math.fsum(total_ms.get(name, 0.0) for name in AI_SUBSTEPS.get(kind, ()))
        processes.append(ProcessCpu(kind, len(steps), total_ms,
                                    {name: ms / overall if overall else 0.0 for name, ms in total_ms.items()},
                                    ai_ms, ai_ms / overall if overall else 0.0))
    application_ms = math.fsum(math.fsum(p.total_ms.values()) for p in processes)
    application_ai = math.fsum(p.ai_ms for p in processes) / application_ms if application_ms else None
    return CpuBreakdown(processes, application_ai, without)


def amdahl_speedup(ai_share: float, factor: float) -> float:
    """Overall speed-up when the AI share of the time runs `factor` times faster (Amdahl's law)."""
    return 1.0 / ((1.0 - ai_share) + ai_share / factor)


def _amdahl_projections(cpu: CpuBreakdown) -> list[AmdahlProjection]:
    return [AmdahlProjection(p.kind, p.ai_share, list(AI_SPEEDUPS),
                             [amdahl_speedup(p.ai_share, factor) for factor in AI_SPEEDUPS],
                             1.0 / (1.0 - p.ai_share) if p.ai_share < 1.0 else None)
            for p in cpu.processes]


# -- throughput and the whole report ---------------------------------------------------------------------------

def _throughput(run: _RunEvents, span_ns: int) -> Throughput:
    span_s = span_ns / NS_PER_S

    def rates(stream_id: str, frames: int, faces: int) -> StreamThroughput:
        return StreamThroughput(stream_id, frames, faces, frames / span_s if span_s else None,
                                faces / span_s if span_s else None)

    frames, faces = Counter(key[0] for key in run.detect), Counter(key[0] for key in run.identify)
    per_stream = [rates(stream_id, frames[stream_id], faces[stream_id]) for stream_id in sorted(frames | faces)]
    return Throughput(span_s, per_stream, rates("all", len(run.detect), len(run.identify)))


def build_report(run_id: str, documents: Iterable[Document], malformed_lines: int = 0) -> Report:
    """The report of one run from its event documents (all with this `run_id`)."""
    documents = list(documents)
    run = _index(documents)
    used = [d for stage in STAGES for d in getattr(run, stage).values()]
    start_ns = min((d["wall_start_ns"] for d in used), default=0)
    end_ns = max((d["wall_end_ns"] for d in used), default=0)
    faces = _faces(run)
    cpu = _cpu_breakdown(run)
    return Report(
        run_id=run_id,
        events={stage: len(getattr(run, stage)) for stage in STAGES},
        ignored_events=run.ignored,
        duplicate_events=run.duplicates,
        malformed_lines=malformed_lines,
        faces_detected=sum(d.get("face_count") or 0 for d in run.detect.values()),
        faces_identified=len(run.identify),
        faces_unmatched=len(run.identify) - len(faces),
        acceleration_factors=sorted({float(d.get("acceleration_factor", 1.0)) for d in used}),
        kafka_clients=sorted({d["kafka_client"] for d in used if d.get("kafka_client")}),
        latency=_latency_breakdown(run, faces),
        broker=_broker_owners(faces),
        load=_load_over_time(run, faces, start_ns, end_ns),
        cpu=cpu,
        amdahl=_amdahl_projections(cpu),
        throughput=_throughput(run, end_ns - start_ns),
        cameras=[CameraReport(stream_id, CameraHealth.from_document(document["camera"]))
                 for stream_id, document in sorted(run.cameras.items())],
        thumbnails_identified=sum(1 for d in run.identify.values() if d.get("data_size_bytes")),
    )
