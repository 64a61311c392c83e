"""The pipeline's event schema (the paper's Listing 1, extended), defined once and versioned.

One event per frame per stage (and per face where a stage works per face). Everything that writes or reads
events imports `Event` and `INDEX_MAPPING` from here; the Elasticsearch index template is built from them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from aitax.telemetry.camera_health import field_mapping as camera_mapping
from aitax.telemetry.latency import BROKER_WAIT

# 2: ingest events carry `scheduled_ns`, so a report's end to end starts at the schedule as the results' does.
# 3: identify events carry `precision`, the arithmetic FaceNet ran in (fp32, bf16, int8).
# 4: detect events of Object Detection carry `object_count` (not `face_count`) and sub-steps resize, centernet.
# 5: identify events carry `delivered_ns` (the identity's append: end to end ends there); broker_wait's sub-steps
#    are its parts by owner (produce, consumer_busy, in_kafka, client_queue) instead of before and after the append.
# 6: `camera` events: once a second per live camera, its health (telemetry.camera_health) in `camera`.
EVENT_SCHEMA_VERSION = 6
INDEX_PREFIX = "aitax-events"
TEMPLATE_NAME = "aitax-events"

# Stages a frame passes through, in order (the paper's Fig. 6).
STAGES = ("ingest", "detect", "broker_wait", "identify")
CAMERA_STAGE = "camera"  # not a stage a frame passes: a live camera's health, each second
# Where each stage's time goes (the paper's Fig. 8), in `Event.substeps_ms`. "other" is the stage's time not
# covered by a named sub-step. AI_SUBSTEPS are the neural-network kernels an accelerator would speed up.
# "emulated" is the emulator's sleep standing in for a stage's whole compute (measured time / speed-up factor).
SUBSTEPS = {
    # encode and kafka: the three-stage design's ingest process sends its frames through Kafka (as JPEG), and its
    # detect process decodes them (detect's decode)
    "ingest": ("decode", "resize", "encode", "kafka", "emulated", "other"),
    # resize and centernet: Object Detection's (the frame to the network's input, and the network); yunet: the
    # other face detector's network (pipeline.yunet)
    "detect": ("decode", "pnet", "rnet", "onet", "yunet", "tf_support", "numpy", "crop", "encode", "resize",
               "centernet", "kafka", "events", "emulated", "other"),
    # broker_wait by owner (telemetry.latency.BROKER_WAIT); producer_to_broker and broker_to_consumer: events of
    # schema 4 and before, split at the broker's append only
    "broker_wait": (*BROKER_WAIT, "producer_to_broker", "broker_to_consumer"),
    "identify": ("decode", "embed", "svm", "kafka", "events", "emulated", "other"),
}
AI_SUBSTEPS = {"detect": ("pnet", "rnet", "onet", "yunet", "centernet"), "identify": ("embed", "svm")}


@dataclass(frozen=True)
class Event:
    run_id: str
    stage: str
    stream_id: str
    frame_index: int
    wall_start_ns: int
    wall_end_ns: int
    compute_time_ms: float
    face_index: int | None = None
    face_count: int | None = None
    object_count: int | None = None  # Object Detection's detect events (v4)
    data_size_bytes: int | None = None
    process: str | None = None
    pod: str | None = None
    host: str | None = None
    acceleration_factor: float = 1.0
    kafka_client: str | None = None
    partition: int | None = None
    offset: int | None = None
    broker_append_ns: int | None = None
    consumer_lag: int | None = None
    substeps_ms: dict[str, float] | None = None
    scheduled_ns: int | None = None  # ingest: when the stream's schedule wanted the frame (v2; v1 events lack it)
    precision: str | None = None  # identify: FaceNet's arithmetic (v3)
    delivered_ns: int | None = None  # identify: the brokers appended the face's identity (v5)
    camera: dict[str, float | int | bool] | None = None  # camera events: telemetry.camera_health.CameraHealth (v6)
    schema_version: int = EVENT_SCHEMA_VERSION

    def to_document(self) -> dict[str, Any]:
        # vars, not asdict: asdict deep-copies every field, and this runs for every event of every stage
        document = {key: value for key, value in vars(self).items() if value is not None}
        document["@timestamp"] = self.wall_start_ns // 1_000_000  # epoch millis: Kibana's time axis
        return document


_KEYWORD = {"type": "keyword"}
_LONG = {"type": "long"}
_INTEGER = {"type": "integer"}
_DOUBLE = {"type": "double"}
_FIELD_TYPES = {
    "run_id": _KEYWORD,
    "stage": _KEYWORD,
    "stream_id": _KEYWORD,
    "frame_index": _LONG,
    # Epoch nanoseconds as longs (exact arithmetic) plus a date for Kibana time axes.
    "wall_start_ns": _LONG,
    "wall_end_ns": _LONG,
    "compute_time_ms": _DOUBLE,
    "face_index": _INTEGER,
    "face_count": _INTEGER,
    "object_count": _INTEGER,
    "data_size_bytes": _LONG,
    "process": _KEYWORD,
    "pod": _KEYWORD,
    "host": _KEYWORD,
    "acceleration_factor": _DOUBLE,
    "kafka_client": _KEYWORD,
    "partition": _INTEGER,
    "offset": _LONG,
    "broker_append_ns": _LONG,
    "consumer_lag": _LONG,
    "scheduled_ns": _LONG,
    "precision": _KEYWORD,
    "delivered_ns": _LONG,
    "camera": camera_mapping(),
    "schema_version": _INTEGER,
    "substeps_ms": {
        "dynamic": "strict",
        "properties": {name: _DOUBLE for name in sorted({step for steps in SUBSTEPS.values() for step in steps})},
    },
}
assert set(_FIELD_TYPES) == {f.name for f in fields(Event)}, "every Event field needs a mapping"

INDEX_MAPPING: dict[str, Any] = {
    "dynamic": "strict",  # a misspelt field is an error, not a silent new column
    "properties": {**_FIELD_TYPES, "@timestamp": {"type": "date_nanos"}},
}


def index_template() -> dict[str, Any]:
    return {
        "index_patterns": [f"{INDEX_PREFIX}-*"],
        "priority": 100,
        "template": {
            # One node: replicas could never be assigned, and the cluster would stay yellow.
            "settings": {"number_of_shards": 1, "number_of_replicas": 0, "refresh_interval": "1s"},
            "mappings": INDEX_MAPPING,
        },
        "_meta": {"event_schema_version": EVENT_SCHEMA_VERSION},
    }
