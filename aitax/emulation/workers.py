"""Emulated stage instances: the pipeline's own loops and Kafka code, with compute replaced by sleeps.

An emulated ingest/detect instance is the real `detect_loop` fed by an ingest thread through a bounded queue
(the real container's two processes, as threads); its `FindFaces` sleeps for a sampled detection time divided
by the acceleration factor and returns faces of random bytes of sampled sizes. An emulated identify instance
is the real `identify_loop` whose `IdentifyFaces` sleeps for the sampled per-face times / factor. Many
instances share one OS process (threads: they mostly sleep), so the paper's counts can be scaled down.

Every ingest thread keeps its own schedule (`fps` x factor); a frame's `scheduled_ns` is when the schedule wanted it,
so a producer that falls behind shows up as lateness instead of silently offering less load. In a closed loop
(`in_flight`), a stream instead keeps a fixed number of frames between ingest and their last identity and takes
the next frame as one completes (its `scheduled_ns` is then when it was admitted): the load adapts to the
pipeline, as a concurrency sweep does.

In the three-stage design (`stages=3`) an instance's ingest thread publishes each frame to the `frames` topic as
random bytes of a measured JPEG's size (the real `ingest_loop`), and emulated detect instances consume them in a
group through the real `frames_from_topic` and `detect_loop`.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import queue
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from aitax.emulation.curves import BatchCurve
from aitax.emulation.profile import Distribution, Profile, frame_jpeg_bytes
from aitax.pipeline.identify import IdentifyResult, IdentifyStats, identify_loop
from aitax.pipeline.ingest_detect import DetectStats, FaceRecords, FoundFace, detect_loop, identity_of_process
from aitax.pipeline.schema import (
    DEFAULT_KEYING,
    TRACKED,
    FaceMessage,
    MalformedRecordError,
    Match,
    Topics,
    decode_identity,
)
from aitax.pipeline.stream import Frame, hand_off, schedule
from aitax.pipeline.three_stage import FRAME_BATCHING, IngestStats, frames_from_topic, ingest_loop
from aitax.pipeline.transport import Consumer, Producer
from aitax.pipeline.transport.batcher import BatchPolicy, DynamicBatcher
from aitax.telemetry.sinks import EventSink
from aitax.telemetry.timing import Stopwatch

# Thumbnails are slices of one random buffer: "meaningless data of the measured size" at no CPU cost per face.
_RANDOM_POOL = os.urandom(4 * 1024 * 1024)
_BURN_CHUNK = _RANDOM_POOL[:128 * 1024]  # ~75 us of hashing per GIL release (measured): fine, little GIL churn
_TINY_FRAME = np.zeros((1, 1, 3), np.uint8)  # frames stay inside the container: only their timing matters
END_OF_STREAM = None


# The paper's identify took one face at a time (its 131.5 ms is per face): the emulator's default batching.
PER_FACE = BatchPolicy(max_batch=1)
MIN_SLEEP_S = 50e-6  # below the kernel's sleep granularity (a "zero" sleep still costs ~0.5 ms here): skip it


def emulated_compute(seconds: float, on_cpu: bool = False) -> None:
    """Stand in for compute that took `seconds` (already divided by the acceleration factor): a sleep, as an
    accelerator leaves the host's CPU free; `on_cpu`, that much of this thread's CPU time, as compute on the host's
    cores takes it (competing with the brokers and the other stages, and slower when they take the cores)."""
    if seconds < MIN_SLEEP_S:
        return
    if not on_cpu:
        time.sleep(seconds)
        return
    deadline = time.thread_time() + seconds
    while time.thread_time() < deadline:
        hashlib.sha256(_BURN_CHUNK).digest()  # hashing a buffer this size releases the GIL: other instances run


def random_payload(size: int, rng: random.Random) -> bytes:
    size = max(1, min(size, len(_RANDOM_POOL)))
    start = rng.randrange(0, len(_RANDOM_POOL) - size + 1)
    return _RANDOM_POOL[start:start + size]


class EmulatedFaceFinder:
    """Detection's compute as a sleep or CPU time (the profile's sampled time / factor, or a device curve's time for
    one frame); faces of sampled size, as many as the profile's sequence gives the frame, else a sampled count.

    One finder per stream sees that stream's frames in order from its first (`in_order`), so it counts frame indices
    itself; a three-stage detector reads frames of any stream and draws counts instead."""

    def __init__(self, profile: Profile, factor: float, rng: random.Random, curve: BatchCurve | None = None,
                 on_cpu: bool = False, in_order: bool = True) -> None:
        self.profile, self.factor, self.rng, self.curve = profile, factor, rng, curve
        self.on_cpu = curve.host_cpu if curve else on_cpu
        self.frame_indices = itertools.count() if in_order else None
        self.track_ids = itertools.count()

    def __call__(self, rgb: np.ndarray, watch: Stopwatch, full: np.ndarray | None = None) -> list[FoundFace]:
        with watch.time("emulated"):
            emulated_compute((self.curve.ms(1, self.rng) if self.curve else
                              self.profile.compute_ms["detect"].sample(self.rng) / self.factor) / 1000, self.on_cpu)
        faces = (self.profile.faces_of_frame(next(self.frame_indices), self.rng) if self.frame_indices is not None
                 else self.profile.sample_faces(self.rng))
        if self.profile.thumbnail_share >= 1:  # the paper's: every face's thumbnail, untracked
            return [FoundFace((0, 0, 160, 160), 1.0,
                              random_payload(round(self.profile.thumbnail_bytes.sample(self.rng)), self.rng),
                              "synthetic") for _ in range(faces)]
        # a sampled share of the faces carry a thumbnail; the rest are `tracked` faces of tracks of their own
        return [FoundFace((0, 0, 160, 160), 1.0,
                          random_payload(round(self.profile.thumbnail_bytes.sample(self.rng)), self.rng), "synthetic",
                          track_id=next(self.track_ids))
                if self.rng.random() < self.profile.thumbnail_share else
                FoundFace((0, 0, 160, 160), 1.0, b"", TRACKED, track_id=next(self.track_ids))
                for _ in range(faces)]


class SyntheticFrames:
    """The three-stage ingest's frame encoding, emulated: random bytes of a sampled JPEG size, at no CPU cost."""

    def __init__(self, sizes: Distribution, rng: random.Random) -> None:
        self.sizes, self.rng = sizes, rng

    def __call__(self, rgb: np.ndarray) -> tuple[bytes, str]:
        return random_payload(round(self.sizes.sample(self.rng)), self.rng), "synthetic"


class EmulatedIdentifier:
    """Identification's compute as one sleep (or CPU time) for the whole batch: the profile's sampled per-face
    times summed and divided by the factor, or a device curve's time for a batch of this size."""

    def __init__(self, profile: Profile, factor: float, rng: random.Random, curve: BatchCurve | None = None,
                 on_cpu: bool = False) -> None:
        self.profile, self.factor, self.rng, self.curve = profile, factor, rng, curve
        self.on_cpu = curve.host_cpu if curve else on_cpu

    def batch_ms(self, faces: int) -> float:
        if self.curve is not None:
            return self.curve.ms(faces, self.rng)
        return sum(self.profile.compute_ms["identify"].sample(self.rng) for _ in range(faces)) / self.factor

    def __call__(self, faces: Sequence[FaceMessage], watch: Stopwatch) -> list[IdentifyResult]:
        thumbnails = sum(1 for face in faces if face.meta.encoding != TRACKED)  # a tracked face costs no inference
        if thumbnails:
            with watch.time("emulated"):
                emulated_compute(self.batch_ms(thumbnails) / 1000, self.on_cpu)
        return [Match("emulated", 1.0, "emulated") for _ in faces]


@dataclass(frozen=True)
class EmulatedCompute:
    """What the emulator swaps in for the stages' compute, and nothing else: the profile's times divided by `factor`
    (or a device's batch `curves`, by stage), slept or spent on this host's CPU (`on_cpu`), each instance drawing
    from a random stream of its own, named from `seed`."""

    profile: Profile
    factor: float
    curves: Mapping[str, BatchCurve] = field(default_factory=dict)
    on_cpu: bool = False
    seed: int = 0

    def rng(self, name: str) -> random.Random:
        return random.Random(f"{self.seed}-{name}")

    def face_finder(self, name: str, in_order: bool = True) -> EmulatedFaceFinder:
        return EmulatedFaceFinder(self.profile, self.factor, self.rng(name), self.curves.get("detect"), self.on_cpu,
                                  in_order)

    def identifier(self, name: str) -> EmulatedIdentifier:
        return EmulatedIdentifier(self.profile, self.factor, self.rng(name), self.curves.get("identify"), self.on_cpu)


class FramesInFlight:
    """One stream's closed-loop window: at most `limit` frames between ingest and their last identity."""

    def __init__(self, limit: int) -> None:
        self._slots = threading.BoundedSemaphore(limit)
        self._lock = threading.Lock()
        self._faces_left: dict[int, set[int]] = {}  # frame index -> faces not yet identified

    def admissions(self, should_stop: Callable[[], bool]) -> Iterator[tuple[int, int]]:
        """Frame indices with the time each was admitted, as slots free up, until stopped: the loop, not a
        clock, sets the pace (the same shape as `schedule`)."""
        for index in itertools.count():
            while not self._slots.acquire(timeout=0.2):
                if should_stop():
                    return
            yield index, time.time_ns()

    def detected(self, frame_index: int, faces: int) -> None:
        """Called before the frame's faces are sent, so no identity of theirs can come first."""
        if not faces:
            self._slots.release()  # nothing to identify: the frame is done
            return
        with self._lock:
            self._faces_left[frame_index] = set(range(faces))

    def identified(self, frame_index: int, face_index: int) -> None:
        with self._lock:
            left = self._faces_left.get(frame_index)
            if left is None:  # a redelivered face of a frame already done
                return
            left.discard(face_index)
            if left:
                return
            del self._faces_left[frame_index]
        self._slots.release()


@dataclass
class ClosedLoopStats(DetectStats):
    """The detect loop's counts, also telling the stream's window how many faces each frame holds."""

    window: FramesInFlight | None = None

    def frame_sent(self, stream_id: str, index: int, faces: int) -> None:
        super().frame_sent(stream_id, index, faces)
        if self.window is not None:
            self.window.detected(index, faces)


def close_the_loop(consumer: Consumer, run_id: str, windows: Mapping[str, FramesInFlight],
                   should_stop: Callable[[], bool]) -> None:
    """Free each stream's slots as its frames' identities arrive (a thread beside the instances)."""
    batcher = DynamicBatcher(consumer, BatchPolicy(max_batch=500))
    while not should_stop():
        for record in batcher.next_batch().records:
            try:
                identity = decode_identity(record.value or b"")
            except MalformedRecordError:
                continue  # not this loop's business: identify dead-letters what it cannot read
            window = windows.get(identity.stream_id)
            if window is not None and identity.run_id == run_id:
                window.identified(identity.frame_index, identity.face_index)


def emulated_ingest(stream_id: str, compute: EmulatedCompute, rng: random.Random, frames: queue.Queue,
                    should_stop: Callable[[], bool], window: FramesInFlight | None = None) -> None:
    """The ingest side of one instance: a frame every 1/(fps x factor) seconds, each after a sleep for its
    ingestion. The paper's streams were compute-bound at about 10 FPS: an accelerated pipeline takes frames
    `factor` times as fast (its Fig. 10 throughput grows with the factor). With a `window`, a frame whenever
    the window has a free slot instead."""
    profile, factor = compute.profile, compute.factor
    slots = schedule(profile.fps * factor) if window is None else window.admissions(should_stop)
    try:
        for index, scheduled_ns in slots:
            if should_stop():
                break
            captured_ns = time.time_ns()
            ingest_ms = profile.compute_ms["ingest"].sample(rng) / factor
            emulated_compute(ingest_ms / 1000, compute.on_cpu)
            frame = Frame(stream_id, index, _TINY_FRAME, captured_ns, time.time_ns(), ingest_ms, 0.0, scheduled_ns)
            hand_off(frames, frame, should_stop)  # blocks when detection falls behind, as the real queue does
    finally:
        frames.put(END_OF_STREAM)


def _drain(frames: queue.Queue) -> Iterator[Frame]:
    while (frame := frames.get()) is not END_OF_STREAM:
        yield frame


def run_producer_instances(instances: int, stream_prefix: str, compute: EmulatedCompute, producer: Producer,
                           sink: EventSink, run_id: str, topics: Topics, should_stop: Callable[[], bool],
                           keying: str = DEFAULT_KEYING, in_flight: int | None = None,
                           identities: Consumer | None = None, stages: int = 2) -> list[DetectStats | IngestStats]:
    """Run `instances` emulated ingest/detect instances (`stages` 3: ingest instances publishing frames) until
    `should_stop()`, then drain and flush. With `in_flight`, each runs a closed loop whose completions `identities`
    (a consumer of the run's identities) reports."""
    if in_flight is not None and identities is None:
        raise ValueError("a closed loop needs a consumer of the identities")
    if in_flight is not None and stages == 3:
        raise ValueError("a closed loop runs two stages")
    stream_ids = [f"{stream_prefix}-{i}" for i in range(instances)]
    windows = {stream_id: FramesInFlight(in_flight) for stream_id in stream_ids} if in_flight else {}
    stats: list[DetectStats | IngestStats] = [ClosedLoopStats(window=windows.get(stream_id)) if stages == 2
                                              else IngestStats() for stream_id in stream_ids]
    instances_done = threading.Event()
    threads = []
    for i, stream_id in enumerate(stream_ids):
        frames: queue.Queue = queue.Queue(maxsize=8)
        threads.append(threading.Thread(target=emulated_ingest, name=f"ingest-{stream_id}", daemon=True,
                                        args=(stream_id, compute, compute.rng(f"{stream_prefix}-{i}"), frames,
                                              should_stop, windows.get(stream_id))))
        if stages == 3:  # the frames go to Kafka; emulated detect instances elsewhere read them
            threads.append(threading.Thread(
                target=ingest_loop, name=f"publish-{stream_id}", daemon=True,
                args=(_drain(frames), producer, sink, run_id, identity_of_process(), topics,
                      SyntheticFrames(frame_jpeg_bytes(), compute.rng(f"{stream_id}-f")), compute.factor,
                      stats[i])))
            continue
        threads.append(threading.Thread(
            target=detect_loop, name=f"detect-{stream_id}", daemon=True,
            args=(_drain(frames), compute.face_finder(f"{stream_id}-d"), producer, sink, run_id, compute.factor,
                  stats[i], topics, FaceRecords(keying))))
    loop = (threading.Thread(target=close_the_loop, name="closed-loop", daemon=True,
                             args=(identities, run_id, windows, instances_done.is_set))
            if windows and identities is not None else None)
    for thread in [*threads, *([loop] if loop else [])]:
        thread.start()
    for thread in threads:
        thread.join()
    instances_done.set()
    if loop is not None:
        loop.join()
    producer.flush(300)
    return stats


def _countdown(instances: int, on_ready: Callable[[], None] | None) -> Callable[[], None]:
    """A callback each instance calls once it has partitions; `on_ready` runs when the last one did."""
    left, lock = [instances], threading.Lock()

    def instance_ready() -> None:
        with lock:
            left[0] -= 1
            if not left[0] and on_ready is not None:
                on_ready()

    return instance_ready


def run_detector_instances(consumers: list[Consumer], producer: Producer, compute: EmulatedCompute,
                           sink: EventSink, run_id: str, topics: Topics, should_stop: Callable[[], bool],
                           keying: str = DEFAULT_KEYING, on_ready: Callable[[], None] | None = None,
                           batching: BatchPolicy = FRAME_BATCHING) -> list[DetectStats]:
    """The three-stage design's detection, emulated: one instance per consumer of the `frames` topic, each the real
    `frames_from_topic` into the real `detect_loop` with detection's compute emulated, until stopped."""
    stats = [DetectStats() for _ in consumers]
    instance_ready = _countdown(len(consumers), on_ready)
    threads = [threading.Thread(
        target=detect_loop, name=f"detect-{i}", daemon=True,
        args=(frames_from_topic(consumer, producer, should_stop, topics, on_ready=instance_ready, batching=batching),
              compute.face_finder(f"detect-{i}", in_order=False), producer, sink, run_id, compute.factor, stats[i],
              topics, FaceRecords(keying)), kwargs={"ingest_events": False})
        for i, consumer in enumerate(consumers)]
    _start_and_join(threads)
    return stats


def _start_and_join(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def run_consumer_instances(consumers: list[Consumer], producer: Producer, compute: EmulatedCompute,
                           sink: EventSink, topics: Topics, should_stop: Callable[[], bool],
                           batching: BatchPolicy = PER_FACE, stats_out: list[IdentifyStats] | None = None,
                           on_ready: Callable[[], None] | None = None,
                           only_run: str | None = None) -> list[IdentifyStats]:
    """One emulated identify instance per consumer, each in its own thread, sharing one results producer,
    until stopped. Each forms its batches with the real identify's dynamic batcher.

    A maximum batch of 1 identifies one face at a time, as the paper's identify did (its 131.5 ms is per face); a
    larger batch makes every face wait for the batch's summed time (a device curve's: its time for the batch's
    size). `stats_out` sees the counts while they run; `on_ready` is called once every instance has partitions;
    with `only_run`, other runs' faces are skipped."""
    stats = [IdentifyStats() for _ in consumers]
    if stats_out is not None:
        stats_out.extend(stats)
    instance_ready = _countdown(len(consumers), on_ready)

    threads = [threading.Thread(
        target=identify_loop, name=f"identify-{i}", daemon=True,
        args=(consumer, producer, compute.identifier(f"identify-{i}"), sink, should_stop, batching, compute.factor,
              stats[i], topics),
        kwargs={"on_ready": instance_ready, "run_id": only_run})
        for i, consumer in enumerate(consumers)]
    _start_and_join(threads)
    return stats
