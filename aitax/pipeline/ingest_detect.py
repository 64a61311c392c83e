"""The ingest/detect container: two processes joined by a bounded queue, as in the paper (Sec. 3.3).

Process 1 (ingest) decodes and resizes frames; process 2 (detect) finds faces, crops 160x160 thumbnails and
publishes one `faces` record per face. The detect loop takes its compute as a function (`FindFaces`): the
real one runs MTCNN, the emulator's sleeps. Everything else (queue, Kafka, events) is the same code. What it
publishes is a `Publication`: faces here, Object Detection's per-frame detections in `pipeline.objects`.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import queue
import signal
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import numpy as np

from aitax.common.errors import UserError
from aitax.pipeline.camera import CameraSource, SharedHealth
from aitax.pipeline.frame_slots import FrameSlots, InSlot, SlotQueue, frame_bytes
from aitax.pipeline.schema import (
    DEFAULT_KEYING,
    DEFAULT_TOPICS,
    TRACKED,
    UNTRACKED,
    FaceMessage,
    FaceMeta,
    Topics,
    encode_face,
)
from aitax.pipeline.stream import Frame, hand_off
from aitax.pipeline.tracking import Box, Sent, StreamTracks
from aitax.pipeline.transport import DeliveryReport, Producer
from aitax.telemetry.events import Event
from aitax.telemetry.metrics import StageMetrics
from aitax.telemetry.sinks import EventSink
from aitax.telemetry.timing import Stopwatch

END_OF_STREAM = None
# A face the detector missed, reported late from its track, has no index among its frame's detections: it takes
# this minus its track id (negative, and one per track in a frame, so never a detected face's key)
MISSED_FACE_INDEX = -1
CHECKPOINT_INTERVAL_S = 1.0


@dataclass(frozen=True)
class FoundFace:
    box: tuple[int, int, int, int]
    confidence: float
    thumbnail: bytes
    encoding: str
    track_id: int = UNTRACKED  # set by a compute that follows faces itself (the emulator's); else by FaceRecords
    hinted: bool = False  # found only where a track said to look (`pipeline.detect.Detection.hinted`)


class FindFaces(Protocol):
    """Detection's compute for one frame: the faces found in `rgb`, with its time recorded into the Stopwatch by
    sub-step; `full`, where given, is the same picture at its own resolution, to cut thumbnails from; `hints`, where
    given, the boxes in `rgb` where followed faces are expected (`Publication.hints`). The detect loop passes each
    only where there is one: a compute that takes neither (the emulator's, Object Detection's) need not name them."""

    def __call__(self, rgb: np.ndarray, watch: Stopwatch, full: np.ndarray | None = None,
                 hints: Sequence[Box] = ()) -> list[FoundFace]: ...


class Record(NamedTuple):
    """One record a detect loop sends."""

    key: bytes | None
    value: bytes
    headers: dict[str, bytes]
    partition: int | None = None  # None: the client's partitioner, by key


# The frames a face first found now is looked for in, before it (`EarlierFrames`): as many as a track survives unseen
LOOK_BACK_FRAMES = 10
LOOK_IOU = 0.3  # a face found where a later one was looked for is it when it overlaps the box looked at this much


class EarlierFrames:
    """Each stream's last frames, kept so that a face found for the first time can be looked for where it was
    before: MTCNN often finds a face confidently only a few frames after it came into view. `look(rgb, box, watch)`
    finds the face at `box` in an earlier frame (the finder's `look`: RNet and ONet at the box, no PNet)."""

    def __init__(self, look: Callable[[np.ndarray, Box, Stopwatch], Box | None],
                 frames: int = LOOK_BACK_FRAMES) -> None:
        self.look, self.frames = look, frames
        self._streams: dict[str, deque[tuple[int, np.ndarray]]] = {}

    def keep(self, frame: Frame) -> None:
        kept = self._streams.setdefault(frame.stream_id, deque(maxlen=self.frames))
        kept.append((frame.index, frame.rgb.copy()))  # a copy: the frame's shared-memory slot is reused

    def trace(self, stream_id: str, box: Box, watch: Stopwatch,
              stop: Callable[[int, Box], bool]) -> list[tuple[int, Box]]:
        """Where the face at `box` (in the stream's frame after the last kept) was, newest frame first: each frame
        looked at where the face was a frame later, until it is not found there or `stop(frame index, box)`."""
        path: list[tuple[int, Box]] = []
        for index, rgb in reversed(self._streams.get(stream_id, ())):
            found = self.look(rgb, box, watch)
            if found is None or stop(index, found):
                break
            path.append((index, found))
            box = found
        return path


@dataclass(frozen=True)
class Detected:
    """One frame's detection, as a publication turns it into records. `earlier`: the stream's frames before it,
    where the publication may look for a face it first found now (None: it cannot look back)."""

    frame: Frame
    found: Sequence[Any]  # FoundFace for faces, DetectedObject for objects
    run_id: str
    detect_start_ns: int
    detected_ns: int
    earlier: EarlierFrames | None = None
    watch: Stopwatch | None = None  # the frame's, which looking back times itself into


class Published(NamedTuple):
    """A frame's records, and how many faces (or objects) they report the frame to hold: the publication decides
    what is reported (a hinted face that continues no track is not), so every count downstream agrees with it."""

    records: list[Record]
    found: int


class Publication(Protocol):
    """What the detect loop sends for a frame, to which topic, and which event field counts what was found."""

    count_field: str

    def topic(self, topics: Topics) -> str: ...

    def hints(self, frame: Frame) -> Sequence[Box]: ...

    def looks_back(self) -> bool: ...

    def publish(self, detected: Detected) -> Published: ...


@dataclass(frozen=True)
class FaceRecords:
    """One `faces` record per face (none for a frame without faces), keyed by `keying`. With `tracks`, each face
    carries its track id, and a face whose thumbnail the send policy keeps back goes as a `tracked` record (its
    metadata only); without, each face goes as found (the paper's: untracked, every thumbnail sent)."""

    keying: str = DEFAULT_KEYING
    tracks: StreamTracks | None = None
    count_field: str = "face_count"

    def topic(self, topics: Topics) -> str:
        return topics.faces

    def hints(self, frame: Frame) -> Sequence[Box]:
        """Where the stream's tracks expect their faces (none without tracks: the paper's detection, unchanged)."""
        return self.tracks.hints(frame.stream_id, frame.index) if self.tracks is not None else ()

    def looks_back(self) -> bool:
        """Whether a face that starts a track is looked for in the frames before (with tracks)."""
        return self.tracks is not None

    def publish(self, detected: Detected) -> Published:
        frame, found = detected.frame, detected.found
        if self.tracks is None:
            followed = [Sent(face.track_id, True) for face in found]
        else:
            followed = self.tracks.follow(frame.stream_id, frame.index, [face.box for face in found],
                                          [face.hinted for face in found])
            self.tracks.remember(frame.stream_id, frame.index, (frame.scheduled_ns, frame.captured_ns,
                                                                frame.ingested_ns))
            # a hinted face that continues no track is not reported: only a track makes it a face
            kept = [(face, sent) for face, sent in zip(found, followed, strict=True)
                    if not face.hinted or sent.track_id != UNTRACKED]
            found, followed = [face for face, _ in kept], [sent for _, sent in kept]
            for face in found:
                self.tracks.report(frame.stream_id, frame.index, face.box)
        records = [self._record(detected, frame.index, face_index, len(found), face.box, face.confidence,
                                (frame.scheduled_ns, frame.captured_ns, frame.ingested_ns), sent.track_id,
                                face.thumbnail if sent.thumbnail else None, face.encoding)
                   for face_index, (face, sent) in enumerate(zip(found, followed, strict=True))]
        if self.tracks is not None:  # faces reported late, from their track: the gaps first, then looking back
            late = [(sent, missed) for sent in followed for missed in sent.missed]
            for _, (index, box) in late:
                self.tracks.report(frame.stream_id, index, box)
            for face, sent in zip(found, followed, strict=True):
                for index, box in self._looked_back(detected, face.box, sent):
                    self.tracks.report(frame.stream_id, index, box)
                    late.append((sent, (index, box)))
            for sent, (index, box) in late:
                stamps = self.tracks.stamps(frame.stream_id, index)
                if stamps is not None:
                    records.append(self._record(detected, index, MISSED_FACE_INDEX - sent.track_id, 0, box, 0.0,
                                                stamps, sent.track_id, None, TRACKED))
        return Published(records, len(found))

    def _looked_back(self, detected: Detected, box: Box, sent: Sent) -> list[tuple[int, Box]]:
        """The frames before a face that starts its track where it was already, looked for where it was a frame
        later; it stops at a face reported there (found in that frame, or late) that overlaps it."""
        tracks = self.tracks
        if not sent.started or detected.earlier is None or tracks is None:
            return []
        stream_id = detected.frame.stream_id
        return detected.earlier.trace(stream_id, box, detected.watch or Stopwatch(),
                                      lambda index, found: tracks.reported_near(stream_id, index, found))

    def _record(self, detected: Detected, frame_index: int, face_index: int, faces_in_frame: int,
                box: tuple[int, int, int, int], confidence: float, stamps: tuple[int, int, int], track_id: int,
                thumbnail: bytes | None, encoding: str) -> Record:
        """A face's record; `thumbnail` None: a `tracked` face, its metadata only."""
        scheduled_ns, captured_ns, ingested_ns = stamps
        lanes = self.tracks.lanes if self.tracks is not None and self.keying == "track" else None
        partition = None if lanes is None or track_id == UNTRACKED else lanes.partition(detected.frame.stream_id,
                                                                                         track_id)
        return Record(*encode_face(FaceMessage(FaceMeta(
            run_id=detected.run_id, stream_id=detected.frame.stream_id, frame_index=frame_index,
            face_index=face_index, faces_in_frame=faces_in_frame, box=box, confidence=round(confidence, 4),
            encoding=encoding if thumbnail is not None else TRACKED, scheduled_ns=scheduled_ns,
            captured_ns=captured_ns, ingested_ns=ingested_ns, detect_start_ns=detected.detect_start_ns,
            detected_ns=detected.detected_ns, produced_ns=time.time_ns(), track_id=track_id), thumbnail or b""),
            self.keying), partition)


# The paper's MTCNN (the default), or YuNet (pipeline.yunet: more of the hard faces for less CPU a frame, but a
# stranger who resembles an enrolled person crosses the threshold more often in its crops; docs/tracks.md).
DETECTORS = ("mtcnn", "yunet")


class FaceFinder:
    """The real detection compute: MTCNN (or YuNet), each face aligned on its landmarks to 160x160, PNG or JPEG."""

    def __init__(self, min_face_size: int, encoding: str = "png", jpeg_quality: int = 90,
                 frame_size: tuple[int, int] | None = None, threads: int = 1, runtime: str = "openvino",
                 conversions: Path | None = None, detector: str = "mtcnn") -> None:
        import cv2

        from aitax.pipeline.detect import FaceDetector

        if encoding not in ("png", "jpeg"):
            raise ValueError(f"encoding {encoding!r}: expected png or jpeg")
        if detector not in DETECTORS:
            raise UserError(f"--detector {detector!r}: expected one of {', '.join(DETECTORS)}")
        if detector == "yunet":
            if runtime != "openvino":
                raise UserError(f"--detector yunet runs on the CPU through OpenCV (--runtime {runtime} is MTCNN's)")
            from aitax.pipeline.assets import ensure_yunet
            from aitax.pipeline.yunet import YuNetDetector

            self.detector = YuNetDetector(ensure_yunet(), min_face_size=min_face_size, threads=threads)
        else:
            self.detector = FaceDetector(min_face_size=min_face_size, frame_size=frame_size, threads=threads,
                                         runtime=runtime, conversions=conversions)
        self.encoding = encoding
        self._encode_params = [cv2.IMWRITE_JPEG_QUALITY, jpeg_quality] if encoding == "jpeg" else []
        self._extension = ".jpg" if encoding == "jpeg" else ".png"

    def __call__(self, rgb: np.ndarray, watch: Stopwatch, full: np.ndarray | None = None,
                 hints: Sequence[Box] = ()) -> list[FoundFace]:
        import cv2

        from aitax.pipeline.crop import face_thumbnail

        faces = []
        scale = 1.0 if full is None else full.shape[1] / rgb.shape[1]
        for detection in self.detector.detect(rgb, watch, hints):
            with watch.time("crop"):  # from the full picture where there is one: more of the face's own pixels
                box = tuple(round(v * scale) for v in detection.box)
                landmarks = tuple((x * scale, y * scale) for x, y in detection.landmarks)
                aligned = face_thumbnail(rgb if full is None else full, box, landmarks)
                thumbnail = cv2.cvtColor(aligned, cv2.COLOR_RGB2BGR)
            with watch.time("encode"):
                ok, encoded = cv2.imencode(self._extension, thumbnail, self._encode_params)
            if not ok:
                raise RuntimeError("thumbnail encoding failed")
            faces.append(FoundFace(detection.box, detection.confidence, encoded.tobytes(), self.encoding,
                                   hinted=detection.hinted))
        return faces

    def look(self, rgb: np.ndarray, box: Box, watch: Stopwatch) -> Box | None:
        """The face at `box` in an earlier frame (`EarlierFrames`), judged as a hint is; None where there is none."""
        from aitax.pipeline.crop import iou

        best = max(self.detector.look(rgb, [box], watch), key=lambda found: iou(found.box, box), default=None)
        return best.box if best is not None and iou(best.box, box) >= LOOK_IOU else None


FrameKey = tuple[str, int]  # (stream id, frame index): a detect process reading `frames` sees several streams


@dataclass
class DetectStats:
    """What a detect loop sent and what the brokers acknowledged, per frame of each stream. Acknowledgements may
    be counted on another thread (instances sharing a producer poll each other's), hence the lock."""

    frames: int = 0
    faces: int = 0  # or objects, for Object Detection
    records: int = 0  # sent: what `acknowledged` must reach
    thumbnails: int = 0  # records that carry pixels (a `tracked` face's record carries none)
    bytes_sent: int = 0
    acknowledged: int = 0
    failed: list[str] = field(default_factory=list)  # delivery errors: the run must not report success
    first_frame: int = 0  # where the streams start (a resumed ingest-detect: its checkpoint's frame)
    _done_through: dict[str, int] = field(default_factory=dict)  # stream -> every frame up to here acknowledged
    _unacknowledged: dict[FrameKey, int] = field(default_factory=dict)  # frame -> records not yet acknowledged
    _done_out_of_order: dict[str, set[int]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def done_through(self, stream_id: str) -> int:
        """Every frame of the stream up to this index has all its records acknowledged: its resume point."""
        with self._lock:
            return self._done_through.get(stream_id, self.first_frame - 1)

    def frame_sent(self, stream_id: str, index: int, records: int) -> None:
        """Call before sending a frame's records (an acknowledgement may arrive while sending); the records are
        sent with opaque=(stream_id, index)."""
        with self._lock:
            if records:
                self._unacknowledged[stream_id, index] = records
            else:
                self._frame_done((stream_id, index))

    def on_delivery(self, report: DeliveryReport) -> None:
        with self._lock:
            if report.error is not None:
                self.failed.append(report.error)
                return
            self.acknowledged += 1
            if report.opaque is not None:
                self._unacknowledged[report.opaque] -= 1
                if not self._unacknowledged[report.opaque]:
                    del self._unacknowledged[report.opaque]
                    self._frame_done(report.opaque)

    def _frame_done(self, key: FrameKey) -> None:
        stream_id, index = key
        done = self._done_out_of_order.setdefault(stream_id, set())
        done.add(index)
        through = self._done_through.get(stream_id, self.first_frame - 1)
        while through + 1 in done:
            through += 1
            done.discard(through)
        self._done_through[stream_id] = through


@dataclass(frozen=True)
class Checkpoint:
    """Where a stream can resume after ingest-detect dies: the first frame not fully acknowledged."""

    path: Path
    source: str
    stream_id: str
    run_id: str

    def save(self, next_frame: int) -> None:
        partial = self.path.with_suffix(".partial")
        partial.write_text(json.dumps({"source": self.source, "stream_id": self.stream_id, "run_id": self.run_id,
                                       "next_frame": next_frame, "saved_ns": time.time_ns()}))
        partial.replace(self.path)  # atomic: a crash never leaves half a checkpoint

    @staticmethod
    def read(path: Path, source: str, stream_id: str) -> tuple[int, str] | None:
        """(next frame, run id) of a previous run of the same stream and source, or None."""
        try:
            saved = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as error:
            raise UserError(f"--checkpoint {path}: unreadable ({error})") from None
        if saved.get("source") != source or saved.get("stream_id") != stream_id:
            raise UserError(f"--checkpoint {path}: belongs to stream {saved.get('stream_id')!r} of "
                            f"{saved.get('source')!r}, not {stream_id!r} of {source!r}")
        return int(saved["next_frame"]), str(saved["run_id"])


def identity_of_process() -> dict[str, str]:
    return {"process": f"{os.getpid()}", "host": socket.gethostname(), "pod": os.environ.get("POD_NAME", "")}


def detect_loop(frames: Iterable[Frame], find_faces: FindFaces, producer: Producer, sink: EventSink, run_id: str,
                acceleration_factor: float = 1.0, stats: DetectStats | None = None,
                topics: Topics = DEFAULT_TOPICS, publication: Publication | None = None,
                checkpoint: Checkpoint | None = None, ingest_events: bool = True) -> DetectStats:
    """For each frame: find faces (or objects), publish the `publication`'s records (acks=all; by default one
    per face, keyed by face), log ingest and detect events (`ingest_events` False: the three-stage design's
    ingest process logs its own). A frame that carries its run (through Kafka) keeps it; others are `run_id`'s.

    The detect event's wall window is the paper's (detection only: sending counts as broker wait); its
    sub-steps cover all the process did for the frame, Kafka sends and event logging included."""
    stats = stats or DetectStats()
    publication = publication or FaceRecords()
    topic = publication.topic(topics)
    look = getattr(find_faces, "look", None)  # a compute that can look at a box alone (MTCNN's RNet and ONet)
    earlier = EarlierFrames(look) if look is not None and publication.looks_back() else None
    where = identity_of_process()
    logging_ms = 0.0  # the previous frame's event logging, reported with this frame (it cannot time itself)
    next_checkpoint = time.monotonic() + CHECKPOINT_INTERVAL_S
    for frame in frames:
        watch = Stopwatch()
        watch.add("events", logging_ms)
        if frame.received_decode_ms:
            watch.add("decode", frame.received_decode_ms)
        detect_start_ns = time.time_ns()
        started = time.perf_counter()
        hints = publication.hints(frame)
        inputs: dict[str, Any] = {} if frame.full is None else {"full": frame.full}
        if hints:
            inputs["hints"] = hints
        found = find_faces(frame.rgb, watch, **inputs)
        compute_ms = (time.perf_counter() - started) * 1000
        detected_ns = time.time_ns()
        payload = 0
        # Publishing follows the faces and may look back for a new one (the frame's sub-steps take that time)
        records, found_count = publication.publish(Detected(frame, found, frame.run_id or run_id, detect_start_ns,
                                                            detected_ns, earlier, watch))
        if earlier is not None:
            earlier.keep(frame)
        with watch.time("kafka"):
            stats.frame_sent(frame.stream_id, frame.index, len(records))
            for record in records:
                producer.send(topic, record.value, key=record.key, headers=record.headers, partition=record.partition,
                              on_delivery=stats.on_delivery, opaque=(frame.stream_id, frame.index))
                payload += len(record.value)
            producer.poll(0)
        substeps = watch.with_other((time.perf_counter() - started) * 1000 + logging_ms)
        stats.frames += 1
        stats.faces += found_count
        stats.records += len(records)
        stats.thumbnails += sum(1 for record in records if record.value)
        stats.bytes_sent += payload
        if checkpoint is not None and time.monotonic() >= next_checkpoint:
            checkpoint.save(stats.done_through(checkpoint.stream_id) + 1)
            next_checkpoint = time.monotonic() + CHECKPOINT_INTERVAL_S
        if not sink.enabled:
            continue
        logging_started = time.perf_counter()
        common = dict(run_id=frame.run_id or run_id, stream_id=frame.stream_id, frame_index=frame.index,
                      acceleration_factor=acceleration_factor, kafka_client=producer.client_name, **where)
        ingest_ms = frame.decode_ms + frame.resize_ms
        if ingest_events:
            sink.emit(Event(stage="ingest", wall_start_ns=frame.captured_ns, wall_end_ns=frame.ingested_ns,
                            scheduled_ns=frame.scheduled_ns, compute_time_ms=ingest_ms,
                            data_size_bytes=frame.rgb.nbytes,
                            substeps_ms={"decode": round(frame.decode_ms, 3), "resize": round(frame.resize_ms, 3),
                                         "other": round(max(0.0, (frame.ingested_ns - frame.captured_ns) / 1e6
                                                            - ingest_ms), 3)}, **common))
        sink.emit(Event(stage="detect", wall_start_ns=detect_start_ns, wall_end_ns=detected_ns,
                        compute_time_ms=compute_ms, data_size_bytes=payload, substeps_ms=substeps,
                        **{publication.count_field: found_count}, **common))
        logging_ms = (time.perf_counter() - logging_started) * 1000
    producer.flush(300)
    producer.poll(0)
    if checkpoint is not None:
        checkpoint.save(stats.done_through(checkpoint.stream_id) + 1)
    return stats


def _video_size(source: str) -> tuple[int, int]:
    """A video file's frame size (width, height); a one-line error, in this process, when it cannot be read."""
    import cv2

    from aitax.pipeline.frames import open_video

    capture = open_video(source)
    try:
        return int(capture.get(cv2.CAP_PROP_FRAME_WIDTH)), int(capture.get(cv2.CAP_PROP_FRAME_HEIGHT))
    finally:
        capture.release()


@dataclass(frozen=True)
class StreamReading:
    """Ingest's half of ingest-detect: which stream, and how its frames are read (a file at `pace`, looped or
    from `start_frame`, or a camera) into a queue of `queue_size` frames of `size`."""

    source: str | CameraSource
    stream_id: str
    size: tuple[int, int] = (960, 540)
    pace: str = "native"
    loop: bool = False
    max_frames: int | None = None
    start_frame: int = 0
    queue_size: int = 8


# -- the two processes ---------------------------------------------------------------------------------------

def _ingest_process(reading: StreamReading, frames: multiprocessing.Queue, stop: multiprocessing.Event,
                    health: SharedHealth | None, slots: tuple[str, ...]) -> None:
    """Process 1: decode + resize into the bounded queue. A file's frames wait when detection falls behind (the
    paper's back-pressure); a camera's do not: frames that find no room are dropped, and counted, the newest kept."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop, and drains
    parent = os.getppid()

    def stopping() -> bool:
        # A SIGKILLed detection process cannot set `stop`: notice being orphaned instead of blocking forever.
        return stop.is_set() or os.getppid() != parent

    try:
        if isinstance(reading.source, CameraSource):
            from aitax.pipeline.camera import NewestFrame, camera_frames

            assert health is not None
            newest = NewestFrame(frames, health)
            try:
                for frame in camera_frames(reading.source, reading.stream_id, reading.size, health, stopping,
                                           reading.max_frames):
                    newest.offer(frame)
            except UserError as error:  # credentials refused since the start: the stream ends, and says why
                print(f"aitax: {error}", file=sys.stderr, flush=True)
            newest.finish(stopping)
        else:
            from aitax.pipeline.frames import read_frames

            ring = SlotQueue(frames, FrameSlots.attach(slots)) if slots else frames
            for frame in read_frames(reading.source, reading.stream_id, reading.size, pace=reading.pace,
                                     loop=reading.loop, max_frames=reading.max_frames,
                                     start_frame=reading.start_frame):
                if not hand_off(ring, frame, stopping):
                    break
    finally:
        if os.getppid() == parent:
            frames.put(END_OF_STREAM)
        else:
            frames.cancel_join_thread()  # nobody reads the queue any more: exit without flushing it


@dataclass
class CameraReporter:
    """A `camera` event with the camera's health each second (from shared memory, so a camera that is down
    still reports), and one more at the end."""

    stream_id: str
    run_id: str
    health: SharedHealth
    sink: EventSink
    detected: int = 0
    last_frame: int = -1
    _since_ns: int = field(default_factory=time.time_ns)

    def tick(self, final: bool = False) -> None:
        now = time.time_ns()
        if not final and now - self._since_ns < 1_000_000_000:
            return
        self.health.set(detected=self.detected)
        if self.sink.enabled:
            self.sink.emit(Event(run_id=self.run_id, stage="camera", stream_id=self.stream_id,
                                 frame_index=max(0, self.last_frame), wall_start_ns=self._since_ns, wall_end_ns=now,
                                 compute_time_ms=0.0, camera=self.health.snapshot().to_document(),
                                 **identity_of_process()))
        self._since_ns = now


def frames_from_queue(frames: multiprocessing.Queue, ingest: multiprocessing.Process,
                      metrics: StageMetrics | None = None,
                      on_first_frame: Callable[[], None] | None = None,
                      camera: CameraReporter | None = None, slots: FrameSlots | None = None) -> Iterable[Frame]:
    while True:
        if metrics is not None:
            metrics.queue_depth.set(frames.qsize())
        if camera is not None:
            camera.tick()
        try:
            frame = frames.get(timeout=1.0)
        except queue.Empty:
            if not ingest.is_alive():
                if ingest.exitcode:
                    raise RuntimeError(f"ingest process exited with status {ingest.exitcode}") from None
                break
            continue
        if frame is END_OF_STREAM:
            break
        if isinstance(frame, InSlot) and slots is not None:
            frame = slots.read(frame)
        if on_first_frame is not None:
            on_first_frame()
            on_first_frame = None
        yield frame
        if camera is not None:  # detection asks for the next frame once it finished this one
            camera.detected += 1
            camera.last_frame = frame.index
    if camera is not None:
        camera.tick(final=True)


def run_ingest_detect(reading: StreamReading, find_faces: FindFaces, producer: Producer, sink: EventSink,
                      run_id: str, publication: Publication | None = None, metrics: StageMetrics | None = None,
                      checkpoint: Checkpoint | None = None,
                      on_first_frame: Callable[[], None] | None = None) -> DetectStats:
    """Start ingestion as a child process and run detection here until the stream ends or SIGINT/SIGTERM.
    `on_first_frame` is called as the first frame reaches detection (the stream is flowing). A camera's stream
    does not end when the camera drops: it is read again as the camera comes back (`pipeline.camera`).

    On a stop signal, ingestion stops reading, detection finishes the frames already queued and flushes
    the producer: no frame that was ingested is dropped."""
    context = multiprocessing.get_context("spawn")  # no fork: TensorFlow's threads do not survive it
    health, camera, slots = None, None, None
    if isinstance(reading.source, CameraSource):
        from aitax.pipeline.camera import check_access

        check_access(reading.source)  # credentials refused: one line, now (an unreachable camera is waited for)
        health = SharedHealth(context)
        camera = CameraReporter(reading.stream_id, run_id, health, sink)
    else:
        slots = FrameSlots.create(reading.queue_size, frame_bytes(reading.size, _video_size(reading.source)))
    frames: multiprocessing.Queue = context.Queue(maxsize=reading.queue_size)
    stop = context.Event()
    ingest = context.Process(target=_ingest_process, name=f"ingest-{reading.stream_id}",
                             args=(reading, frames, stop, health, slots.names if slots else ()), daemon=True)
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    ingest.start()
    try:
        stats = detect_loop(frames_from_queue(frames, ingest, metrics, on_first_frame, camera, slots), find_faces,
                            producer, sink, run_id, stats=DetectStats(first_frame=reading.start_frame),
                            publication=publication, checkpoint=checkpoint)
        if metrics is not None:
            metrics.delivery_failures.inc(len(stats.failed))
        return stats
    finally:
        stop.set()
        ingest.join(10)
        if ingest.is_alive():
            ingest.kill()
        if slots is not None:
            slots.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
