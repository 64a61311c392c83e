"""How each container kind's compute latency scales with cores (the paper's Fig. 5, Sec. 3.5, and Fig. 12, Sec. 6.1).

Each (kind, core count) point runs in a fresh process pinned to that many CPUs, with that many threads in
TensorFlow, OpenVINO and OpenCV (their thread pools are fixed once a process starts them), over the same frames of
a video: ingest-detect times decode + resize + MTCNN + thumbnails per frame; identify times thumbnail decoding +
FaceNet on each frame's faces as one batch (the thumbnails are made before timing); detect-objects (Object
Detection's detection container) times decoding the frame's JPEG, as it comes through Kafka, and CenterNet. Latency
is wall-clock, as a container with more cores would see it.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from aitax.common.errors import UserError
from aitax.common.paper import CORE_SCALING_NEAR_LINEAR, CORE_SCALING_TWO_CORES

KINDS = ("ingest-detect", "identify", "detect-objects")
WARMUP_FRAMES = 5  # traced graphs and caches settle before timing


@dataclass(frozen=True)
class CorePoint:
    kind: str
    cores: int
    latencies_ms: list[float]  # per frame (identify: per frame with faces)
    cpus_seen: int  # the CPUs the measuring process could run on: equal to `cores` when pinning worked

    @property
    def mean_ms(self) -> float:
        return statistics.fmean(self.latencies_ms)

    @property
    def p50_ms(self) -> float:
        return statistics.median(self.latencies_ms)


def usable_cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def check_request(kinds: list[str], cores: list[int]) -> None:
    """One-line errors for what cannot be measured here."""
    unknown = [kind for kind in kinds if kind not in KINDS]
    if unknown:
        raise UserError(f"--kinds {','.join(unknown)}: expected some of {', '.join(KINDS)}")
    available = len(usable_cpus())
    for count in cores:
        if not 1 <= count <= available:
            raise UserError(f"--cores {count}: this machine lets aitax use 1-{available} CPUs")
    if 1 not in cores:
        raise UserError("--cores must include 1: latencies are reported relative to one core")


def _pin(cores: int) -> None:
    import cv2

    os.sched_setaffinity(0, set(usable_cpus()[:cores]))
    cv2.setNumThreads(cores)


def measure(kind: str, cores: int, video: str, frames: int, min_face_size: int) -> CorePoint:
    """One point, in the calling process (run it in a fresh one: see `run_points`)."""
    from tqdm import tqdm

    from aitax.pipeline.frames import read_frames
    from aitax.pipeline.ingest_detect import FaceFinder
    from aitax.telemetry.timing import Stopwatch

    _pin(cores)
    size = (960, 540)
    if kind == "detect-objects":
        return CorePoint(kind, cores, _object_latencies(video, size, frames, cores), len(os.sched_getaffinity(0)))
    find_faces = FaceFinder(min_face_size, frame_size=size, threads=cores, detector="mtcnn")  # the paper's
    stream = read_frames(video, "core-scaling", size, pace="max", max_frames=frames + WARMUP_FRAMES)
    progress = tqdm(total=frames + WARMUP_FRAMES, desc=f"{kind} on {cores} core(s)", unit="frame", leave=False)
    latencies, thumbnails = [], []
    started = time.perf_counter()
    for frame in stream:  # the generator decodes and resizes: its time is ingest's
        faces = find_faces(frame.rgb, Stopwatch(), frame.full)
        finished = time.perf_counter()
        if frame.index >= WARMUP_FRAMES:
            latencies.append((finished - started) * 1000)
            thumbnails.append([face.thumbnail for face in faces])
        progress.update()
        started = time.perf_counter()
    progress.close()
    if kind == "identify":
        latencies = _identify_latencies([faces for faces in thumbnails if faces], cores)
    if not latencies:
        raise UserError(f"video {video}: no {'faces' if kind == 'identify' else 'frames'} to time")
    return CorePoint(kind, cores, latencies, len(os.sched_getaffinity(0)))


def _identify_latencies(frames_faces: list[list[bytes]], cores: int) -> list[float]:
    import cv2
    import numpy as np

    from aitax.pipeline.assets import ensure_assets
    from aitax.pipeline.facenet import FaceEmbedder

    embedder = FaceEmbedder(ensure_assets().facenet_weights, intra_op_threads=cores)
    latencies = []
    for index, encoded in enumerate(frames_faces):
        started = time.perf_counter()
        faces = np.stack([cv2.cvtColor(cv2.imdecode(np.frombuffer(face, np.uint8), cv2.IMREAD_COLOR),
                                       cv2.COLOR_BGR2RGB) for face in encoded])
        embedder.embed(faces)
        if index >= WARMUP_FRAMES or len(frames_faces) <= WARMUP_FRAMES:
            latencies.append((time.perf_counter() - started) * 1000)
    return latencies


def _object_latencies(video: str, size: tuple[int, int], frames: int, cores: int) -> list[float]:
    import cv2
    import numpy as np

    from aitax.pipeline.facenet_keras import set_tf_threads
    from aitax.pipeline.frames import read_frames

    set_tf_threads(cores, 1)
    from aitax.pipeline.objects import ObjectDetector

    detector = ObjectDetector()
    latencies = []
    for frame in read_frames(video, "core-scaling", size, pace="max", max_frames=frames + WARMUP_FRAMES):
        sent = cv2.imencode(".jpg", cv2.cvtColor(frame.rgb, cv2.COLOR_RGB2BGR))[1].tobytes()  # as ingest sends it
        started = time.perf_counter()
        detector(cv2.cvtColor(cv2.imdecode(np.frombuffer(sent, np.uint8), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB))
        if frame.index >= WARMUP_FRAMES:
            latencies.append((time.perf_counter() - started) * 1000)
    if not latencies:
        raise UserError(f"video {video}: no frames to time")
    return latencies


def paper_relative(kind: str, cores: int) -> float | None:
    """The paper's latency on `cores` relative to one core, where it gives one."""
    if kind in CORE_SCALING_NEAR_LINEAR:
        return 1.0 / cores
    return {1: 1.0, 2: CORE_SCALING_TWO_CORES[kind]}.get(cores)


def run_points(kinds: list[str], cores: list[int], video: str, frames: int, min_face_size: int) -> list[CorePoint]:
    """Every point in its own fresh process, one after another (they would share the CPUs otherwise)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    check_request(kinds, cores)
    points = []
    for kind in kinds:
        for count in sorted(cores):
            with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as child:
                points.append(child.submit(measure, kind, count, video, frames, min_face_size).result())
    return points


def relative(points: list[CorePoint]) -> dict[tuple[str, int], float]:
    """Each point's mean latency over its kind's on one core."""
    one_core = {p.kind: p.mean_ms for p in points if p.cores == 1}
    return {(p.kind, p.cores): p.mean_ms / one_core[p.kind] for p in points}


def format_table(points: list[CorePoint]) -> list[str]:
    ratios = relative(points)
    lines = [f"{'kind':<15}{'cores':>6}{'frames':>8}{'mean ms':>10}{'p50 ms':>9}{'relative':>10}{'paper':>8}"]
    for point in points:
        paper = paper_relative(point.kind, point.cores)
        lines.append(f"{point.kind:<15}{point.cores:>6}{len(point.latencies_ms):>8}{point.mean_ms:>10.1f}"
                     f"{point.p50_ms:>9.1f}{ratios[(point.kind, point.cores)]:>10.2f}"
                     f"{'' if paper is None else f'{paper:.2f}':>8}")
    lines.append("relative: mean latency over the same kind's on 1 core")
    if any(point.kind in CORE_SCALING_TWO_CORES for point in points):
        lines.append("paper: Fig. 5 / Sec. 3.5 (1 -> 2 cores: -16% ingest/detect, -36% identify; more cores made "
                     "both slower)")
    if any(point.kind in CORE_SCALING_NEAR_LINEAR for point in points):
        lines.append("detect-objects' paper: Fig. 12 / Sec. 6.1, \"near linear speedups\" to 14 cores a container; "
                     "the text gives no values, so 1/cores")
    return lines


def plot(points: list[CorePoint], path: Path) -> Path:
    """Relative compute latency against cores per container kind, the paper's two-core points beside them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ratios = relative(points)
    figure, axis = plt.subplots(figsize=(6, 4))
    for kind, colour in zip(KINDS, ("tab:blue", "tab:orange", "tab:green"), strict=True):
        mine = sorted((p.cores, ratios[(p.kind, p.cores)]) for p in points if p.kind == kind)
        if not mine:
            continue
        axis.plot(*zip(*mine, strict=True), marker="o", color=colour, label=f"{kind} (aitax)")
        paper = [(cores, paper_relative(kind, cores)) for cores in sorted({1, 2} | {c for c, _ in mine})]
        axis.plot(*zip(*[(c, r) for c, r in paper if r is not None], strict=True), marker="s", linestyle="--",
                  color=colour, alpha=0.6, label=f"{kind} (paper)")
    figures = "Fig. 12" if {p.kind for p in points} <= set(CORE_SCALING_NEAR_LINEAR) else "Fig. 5"
    axis.set(title=f"Relative compute latency with core scaling ({figures})", xlabel="cores per container",
             ylabel="mean latency / 1 core")
    axis.set_xticks(sorted({p.cores for p in points} | {1, 2}))
    axis.set_ylim(bottom=0)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
