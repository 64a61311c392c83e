"""The message schema between stages, defined once and versioned.

`faces` records: key = what spreads faces over partitions (see KEYINGS), value = the encoded thumbnail,
headers = the schema version and the face's metadata as compact JSON.
`frames` records (the three-stage design and Object Detection): key = stream id and frame index (or the stream id
alone: FRAME_KEYINGS), value = the resized frame as JPEG, headers = the schema version and the frame's metadata as
compact JSON.
`identities` records: key = stream id, value = JSON.
`detections` records (Object Detection, the paper's Sec. 6): one per frame, key = stream id, value = JSON of the
objects found (class, box, score) and the frame's timestamps. Anything that does not decode is a `MalformedRecordError`
and goes to the dead-letter topic with the reason; it never stops a consumer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields, replace
from typing import Any, NamedTuple

from aitax.telemetry.latency import Timeline, delivered_ns

# 2: identities carry `candidate`, the enrolled identity a face resembled most even when it was not named.
# Faces are unchanged since 1, and an identity of version 1 reads with no candidate: readers take both.
# 3: `frames` records, for the three-stage design (frames through Kafka); faces and identities unchanged.
# 4: `detections` records, Object Detection's results; faces, frames and identities unchanged.
# 5: identities carry where the face's broker wait went (`appended_ns`, `requested_ns`, `fetched_ns`) and the size
#    of the batch it was identified in; detections carry their frame's wait the same way. An older identity or
#    detections record reads with its whole broker wait as `produce`.
# 6: faces carry `track_id`, the face's track in its stream (`pipeline.tracking`), and may be `tracked` (no
#    thumbnail: the track's name answers it); identities carry `track_id`, `evidence_frames`, the faces the
#    name rests on, and `track_stretch`, the times the track changed person before the face. Older faces and
#    identities read as untracked (-1) and named from one frame.
SCHEMA_VERSION = 6
READABLE_VERSIONS = (1, 2, 3, 4, 5, 6)
SCHEMA_HEADER = "aitax.schema"
META_HEADER = "aitax.meta"
DLQ_REASON_HEADER = "aitax.dlq.reason"
DLQ_SOURCE_HEADER = "aitax.dlq.source"
FACES_TOPIC = "faces"
IDENTITIES_TOPIC = "identities"
DLQ_TOPIC = "faces.dlq"  # every record a stage cannot read, with the reason and the topic it came from
FRAMES_TOPIC = "frames"
DETECTIONS_TOPIC = "detections"
FRAME_ENCODINGS = ("jpeg", "synthetic")
MAX_FRAME_BYTES = 900 * 1024  # under Kafka's default 1 MB message limit, with room for the headers
# synthetic: the emulator's random bytes of a measured size; tracked: no thumbnail (a face of a track whose thumbnail
# the send policy kept back: identify answers it with its track's name, at no compute)
TRACKED = "tracked"
ENCODINGS = ("png", "jpeg", "synthetic", TRACKED)
UNTRACKED = -1  # the track id of a face no tracker followed (the emulator's, a three-stage detector's, schema < 6)
MAX_THUMBNAIL_BYTES = 1024 * 1024
# How `faces` records are keyed, so which partition (and so which identify consumer) a face goes to:
#   face:   each face hashed on its own (the default: faces detected together, in one frame or in streams on
#           the same schedule, go to different consumers, which keeps every identify consumer busy)
#   none:   no key: the producer's sticky partitioner fills one partition's batch before moving on (the
#           fewest, fullest produce requests, so the least broker work at high rates; but faces produced
#           together queue behind each other at one consumer)
#   frame:  a frame's faces together, frames spread over every partition
#   stream: one camera on one partition and one consumer (affinity; a busy camera can leave consumers idle)
#   track:  a track's faces together, so one identify consumer holds the track's evidence (the default); a face
#           with no track is keyed as `face` (so the emulator's and the paper's faces spread as they always did)
KEYINGS = ("track", "face", "none", "frame", "stream")
DEFAULT_KEYING = "track"


@dataclass(frozen=True)
class Topics:
    """The topics one pipeline uses; experiments and tests may run on a prefixed set of their own."""

    faces: str = FACES_TOPIC
    identities: str = IDENTITIES_TOPIC
    dlq: str = DLQ_TOPIC
    frames: str = FRAMES_TOPIC  # the three-stage design and Object Detection
    detections: str = DETECTIONS_TOPIC  # Object Detection only

    @classmethod
    def with_prefix(cls, prefix: str) -> Topics:
        return cls(f"{prefix}{FACES_TOPIC}", f"{prefix}{IDENTITIES_TOPIC}", f"{prefix}{DLQ_TOPIC}",
                   f"{prefix}{FRAMES_TOPIC}", f"{prefix}{DETECTIONS_TOPIC}")


DEFAULT_TOPICS = Topics()


class MalformedRecordError(ValueError):
    """A record that cannot be decoded; its message is the dead-letter reason."""


@dataclass(frozen=True)
class FaceMeta:
    run_id: str
    stream_id: str
    frame_index: int
    face_index: int
    faces_in_frame: int
    box: tuple[int, int, int, int]  # x, y, width, height in the resized frame
    confidence: float
    encoding: str
    scheduled_ns: int  # when the stream's schedule wanted the frame: lateness shows instead of hiding
    captured_ns: int  # when ingestion read the frame
    ingested_ns: int  # when the resized frame entered the queue to detection
    detect_start_ns: int
    detected_ns: int  # detection of the frame finished
    produced_ns: int  # this face was handed to the producer
    track_id: int = UNTRACKED  # the face's track in its stream (v6)


@dataclass(frozen=True)
class FaceMessage:
    meta: FaceMeta
    thumbnail: bytes

    @property
    def key(self) -> tuple[str, str, int, int]:
        """What identifies a face across redeliveries."""
        return (self.meta.run_id, self.meta.stream_id, self.meta.frame_index, self.meta.face_index)


def face_key(meta: FaceMeta, keying: str = DEFAULT_KEYING) -> bytes | None:
    if keying == "none":
        return None
    if keying == "track" and meta.track_id != UNTRACKED:
        return f"{meta.stream_id}/track/{meta.track_id}".encode()
    if keying in ("face", "track"):
        return f"{meta.stream_id}/{meta.frame_index}/{meta.face_index}".encode()
    if keying == "frame":
        return f"{meta.stream_id}/{meta.frame_index}".encode()
    if keying == "stream":
        return meta.stream_id.encode()
    raise ValueError(f"keying {keying!r}: expected one of {', '.join(KEYINGS)}")


_VERSION_BYTES = str(SCHEMA_VERSION).encode()
_READABLE_VERSION_BYTES = tuple(str(version).encode() for version in READABLE_VERSIONS)


def encode_face(message: FaceMessage, keying: str = DEFAULT_KEYING) -> tuple[bytes | None, bytes, dict[str, bytes]]:
    """(key, value, headers) of the Kafka record."""
    meta = json.dumps(vars(message.meta), separators=(",", ":")).encode()  # vars: asdict deep-copies, 10x slower
    headers = {SCHEMA_HEADER: _VERSION_BYTES, META_HEADER: meta}
    return face_key(message.meta, keying), message.thumbnail, headers


_META_TYPES: dict[str, type | tuple[type, ...]] = {
    "run_id": str, "stream_id": str, "frame_index": int, "face_index": int, "faces_in_frame": int, "box": list,
    "confidence": (int, float), "encoding": str, "scheduled_ns": int, "captured_ns": int, "ingested_ns": int,
    "detect_start_ns": int,
    "detected_ns": int, "produced_ns": int,
}
_OPTIONAL_META_TYPES: dict[str, type | tuple[type, ...]] = {"track_id": int}  # absent before version 6
assert set(_META_TYPES) | set(_OPTIONAL_META_TYPES) == {f.name for f in fields(FaceMeta)}


def _read_meta(headers: dict[str, bytes], types: dict[str, type | tuple[type, ...]],
               optional: dict[str, type | tuple[type, ...]] | None = None) -> dict[str, Any]:
    """The metadata header of a record of this schema, every field present and of its type (`optional`'s, of its
    type where present)."""
    version = headers.get(SCHEMA_HEADER)
    if version is None:
        raise MalformedRecordError(f"missing header {SCHEMA_HEADER}")
    if version not in _READABLE_VERSION_BYTES:
        raise MalformedRecordError(f"schema version {version[:16]!r}, expected one of {READABLE_VERSIONS}")
    try:
        raw = json.loads(headers[META_HEADER])
    except KeyError:
        raise MalformedRecordError(f"missing header {META_HEADER}") from None
    except ValueError as error:
        raise MalformedRecordError(f"header {META_HEADER} is not JSON: {error}") from None
    if not isinstance(raw, dict):
        raise MalformedRecordError(f"header {META_HEADER} is not a JSON object")
    for name, expected in {**types, **(optional or {})}.items():
        if name not in raw:
            if name in types:
                raise MalformedRecordError(f"field {name} missing")
            continue
        if not isinstance(raw[name], expected) or isinstance(raw[name], bool):
            raise MalformedRecordError(f"field {name}={str(raw[name])[:40]!r} has the wrong type")
    return raw


def decode_face(value: bytes | None, headers: dict[str, bytes]) -> FaceMessage:
    """Validate and decode a `faces` record; raises MalformedRecordError naming what is wrong."""
    raw = _read_meta(headers, _META_TYPES, _OPTIONAL_META_TYPES)
    box = raw["box"]
    if len(box) != 4 or not all(isinstance(v, int) for v in box) or box[2] <= 0 or box[3] <= 0:
        raise MalformedRecordError(f"field box={str(box)[:40]} is not [x, y, width, height] with positive size")
    if raw["encoding"] not in ENCODINGS:
        raise MalformedRecordError(f"field encoding={raw['encoding'][:20]!r} is not one of {ENCODINGS}")
    track_id = raw.get("track_id", UNTRACKED)
    if raw["encoding"] == TRACKED:
        if value:
            raise MalformedRecordError(f"a {TRACKED} face carries no thumbnail, got {len(value)} bytes")
        if track_id == UNTRACKED:
            raise MalformedRecordError(f"a {TRACKED} face needs its track_id")
    elif not value:
        raise MalformedRecordError("empty thumbnail")
    if value and len(value) > MAX_THUMBNAIL_BYTES:
        raise MalformedRecordError(f"thumbnail of {len(value)} bytes exceeds {MAX_THUMBNAIL_BYTES}")
    meta = FaceMeta(**{**{k: raw[k] for k in _META_TYPES}, "box": tuple(box)}, track_id=track_id)
    return FaceMessage(meta, value or b"")


@dataclass(frozen=True, kw_only=True)
class FrameMeta:
    """A resized frame on its way from ingestion to detection through Kafka (the three-stage design)."""

    run_id: str
    stream_id: str
    frame_index: int
    width: int
    height: int
    encoding: str  # FRAME_ENCODINGS
    scheduled_ns: int
    captured_ns: int
    ingested_ns: int  # handed to the producer
    decode_ms: float  # ingestion's own measurements, for its event
    resize_ms: float


@dataclass(frozen=True)
class FrameMessage:
    meta: FrameMeta
    pixels: bytes


_FRAME_META_TYPES: dict[str, type | tuple[type, ...]] = {
    "run_id": str, "stream_id": str, "frame_index": int, "width": int, "height": int, "encoding": str,
    "scheduled_ns": int, "captured_ns": int, "ingested_ns": int, "decode_ms": (int, float), "resize_ms": (int, float),
}
assert set(_FRAME_META_TYPES) == {f.name for f in fields(FrameMeta)}


# How `frames` records are keyed: frame (the default: a stream's frames spread over every partition; detection
# takes each frame on its own, so the detect processes share the load evenly whatever the streams) or stream (a
# stream's frames in order on one partition, for a consumer that needs their order; streams hashed to the same
# consumer then queue behind each other).
FRAME_KEYINGS = ("frame", "stream")


def encode_frame(message: FrameMessage, keying: str = "frame") -> tuple[bytes, bytes, dict[str, bytes]]:
    """(key, value, headers), keyed as FRAME_KEYINGS says."""
    meta = json.dumps(vars(message.meta), separators=(",", ":")).encode()
    key = message.meta.stream_id if keying == "stream" else f"{message.meta.stream_id}/{message.meta.frame_index}"
    return key.encode(), message.pixels, {SCHEMA_HEADER: _VERSION_BYTES, META_HEADER: meta}


def decode_frame(value: bytes | None, headers: dict[str, bytes]) -> FrameMessage:
    """Validate and decode a `frames` record; raises MalformedRecordError naming what is wrong."""
    raw = _read_meta(headers, _FRAME_META_TYPES)
    if raw["encoding"] not in FRAME_ENCODINGS:
        raise MalformedRecordError(f"field encoding={raw['encoding'][:20]!r} is not one of {FRAME_ENCODINGS}")
    if raw["width"] <= 0 or raw["height"] <= 0:
        raise MalformedRecordError(f"field width x height={raw['width']}x{raw['height']} is not a frame size")
    if not value:
        raise MalformedRecordError("empty frame")
    if len(value) > MAX_FRAME_BYTES:
        raise MalformedRecordError(f"frame of {len(value)} bytes exceeds {MAX_FRAME_BYTES}")
    return FrameMessage(FrameMeta(**{k: raw[k] for k in _FRAME_META_TYPES}), value)


UNKNOWN = "unknown"  # the name given to a face that matches no enrolled identity well enough


class Match(NamedTuple):
    """What identification answers for one face."""

    identity: str  # the name given: an enrolled identity, or UNKNOWN
    score: float  # similarity to `candidate`: the open-set decision compares it with a threshold
    candidate: str  # the enrolled identity it resembled most, kept when the name is UNKNOWN (for DET curves)
    evidence_frames: int = 1  # faces the decision rests on: its track's so far, or this face alone
    track_stretch: int = 0  # times the track changed person before this face (pipeline.track_names)


@dataclass(frozen=True, kw_only=True)  # many fields: built by name, never by position
class IdentityMessage:
    run_id: str
    stream_id: str
    frame_index: int
    face_index: int
    identity: str
    score: float
    box: tuple[int, int, int, int]
    scheduled_ns: int
    captured_ns: int
    ingested_ns: int
    detect_start_ns: int
    detected_ns: int
    # The broker wait's edges (v5), split by owner in `telemetry.latency.BREAKDOWN`:
    appended_ns: int  # the brokers appended the face (LogAppendTime)
    requested_ns: int  # its consumer was free and asking for work (the append, if it was already asking)
    fetched_ns: int  # the consumer client handed the face to the batcher
    identify_start_ns: int
    identified_ns: int
    batch_size: int = 1  # faces identified together with this one (v5)
    candidate: str = ""  # absent from version 1 identities
    # v6: the face's track (UNTRACKED: none) and how many of its faces the name rests on. A track's name may change
    # as its evidence grows: a reader that wants one name per track takes its identity with the most evidence.
    track_id: int = UNTRACKED
    evidence_frames: int = 1
    track_stretch: int = 0  # times the track changed person before this face: each stretch is named on its own
    # When the brokers took this identity, from its record's append time: set by whoever reads it, never sent
    # (0 until then). End to end ends here, when the identity is durable and any application can read it.
    delivered_ns: int = 0
    schema_version: int = SCHEMA_VERSION

    @property
    def key(self) -> tuple[str, str, int, int]:
        return (self.run_id, self.stream_id, self.frame_index, self.face_index)

    @property
    def timeline(self) -> Timeline:
        return Timeline.of(self)

    @classmethod
    def answering(cls, meta: FaceMeta, match: Match, *, appended_ns: int, requested_ns: int, fetched_ns: int,
                  identify_start_ns: int, identified_ns: int, batch_size: int) -> IdentityMessage:
        """The identity of the face `meta` describes, carrying its timestamps on."""
        return cls(run_id=meta.run_id, stream_id=meta.stream_id, frame_index=meta.frame_index,
                   face_index=meta.face_index, identity=match.identity, score=round(match.score, 4),
                   candidate=match.candidate, box=meta.box, track_id=meta.track_id,
                   evidence_frames=match.evidence_frames, track_stretch=match.track_stretch,
                   scheduled_ns=meta.scheduled_ns, captured_ns=meta.captured_ns, ingested_ns=meta.ingested_ns,
                   detect_start_ns=meta.detect_start_ns, detected_ns=meta.detected_ns, appended_ns=appended_ns,
                   requested_ns=requested_ns, fetched_ns=fetched_ns, identify_start_ns=identify_start_ns,
                   identified_ns=identified_ns, batch_size=batch_size)


def encode_identity(message: IdentityMessage) -> tuple[bytes, bytes]:
    document = {k: v for k, v in vars(message).items() if k != "delivered_ns"}
    return message.stream_id.encode(), json.dumps(document, separators=(",", ":")).encode()


def decode_identity(value: bytes, appended_ms: int = 0) -> IdentityMessage:
    """An `identities` record; `appended_ms` is the record's append time, which sets `delivered_ns`."""
    try:
        raw: dict[str, Any] = json.loads(value)
        if raw.get("schema_version") not in READABLE_VERSIONS:
            raise MalformedRecordError(f"identity schema version {raw.get('schema_version')!r}, expected one of "
                                       f"{READABLE_VERSIONS}")
        raw.pop("delivered_ns", None)
        if raw["schema_version"] < 5:  # no split recorded: the whole broker wait reads as produce
            raw.update(dict.fromkeys(("appended_ns", "requested_ns", "fetched_ns"), raw["identify_start_ns"]))
        identity = IdentityMessage(**{**raw, "box": tuple(raw["box"])})
    except (ValueError, TypeError, KeyError) as error:
        raise MalformedRecordError(f"identity record: {error}") from None
    return replace(identity, delivered_ns=delivered_ns(identity.identified_ns, appended_ms))


@dataclass(frozen=True)
class DetectedObject:
    label: str  # a COCO class name
    score: float
    box: tuple[int, int, int, int]  # x, y, width, height in the frame's pixels


@dataclass(frozen=True, kw_only=True)
class DetectionsMessage:
    """Everything Object Detection found in one frame (possibly nothing: the frame is still answered)."""

    run_id: str
    stream_id: str
    frame_index: int
    objects: tuple[DetectedObject, ...]
    scheduled_ns: int
    captured_ns: int
    ingested_ns: int
    # The frame's wait in Kafka by owner (v5, as IdentityMessage's); older records read with all of it as produce
    appended_ns: int = 0
    requested_ns: int = 0
    fetched_ns: int = 0
    detect_start_ns: int
    detected_ns: int
    delivered_ns: int = 0  # as IdentityMessage's: set by whoever reads the record, never sent
    schema_version: int = SCHEMA_VERSION

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.run_id, self.stream_id, self.frame_index)


def encode_detections(message: DetectionsMessage) -> tuple[bytes, bytes]:
    document = {**vars(message), "objects": [vars(found) for found in message.objects]}
    del document["delivered_ns"]
    return message.stream_id.encode(), json.dumps(document, separators=(",", ":")).encode()


def decode_detections(value: bytes | None, appended_ms: int = 0) -> DetectionsMessage:
    """Validate and decode a `detections` record (`appended_ms`: its append time, as `decode_identity`'s); raises
    MalformedRecordError naming what is wrong."""
    try:
        raw: dict[str, Any] = json.loads(value or b"")
        if raw.get("schema_version") not in READABLE_VERSIONS:
            raise MalformedRecordError(f"detections schema version {raw.get('schema_version')!r}, expected one "
                                       f"of {READABLE_VERSIONS}")
        objects = tuple(DetectedObject(str(found["label"]), float(found["score"]),
                                       tuple(int(v) for v in found["box"]))  # type: ignore[arg-type]
                        for found in raw["objects"])
        raw.pop("delivered_ns", None)
        if raw["schema_version"] < 5:
            raw.update(dict.fromkeys(("appended_ns", "requested_ns", "fetched_ns"), raw["detect_start_ns"]))
        message = DetectionsMessage(**{**raw, "objects": objects})
    except (ValueError, TypeError, KeyError) as error:
        raise MalformedRecordError(f"detections record: {error}") from None
    return replace(message, delivered_ns=delivered_ns(message.detected_ns, appended_ms))


def dead_letter_headers(headers: dict[str, bytes], reason: str, topic: str, partition: int,
                        offset: int) -> dict[str, bytes]:
    """The original headers plus why and where from, so a dead letter can be inspected and replayed."""
    return {**headers, DLQ_REASON_HEADER: reason.encode()[:1000],
            DLQ_SOURCE_HEADER: f"{topic}/{partition}/{offset}".encode()}
