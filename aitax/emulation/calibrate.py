"""`aitax calibrate`: this machine's own device curve, in the format `--accelerator FILE` reads.

identify: the real identify compute (thumbnail decode + FaceNet, through the runtime and precision asked for) on
batches of 1..64 encoded 160x160 thumbnails; detect: the real MTCNN face finder (detection, alignment, thumbnail
encoding) one frame per call, as the detect stage runs it, on a video's frames. Each batch size is timed `repeats`
times after a warm-up; the curve is the medians, and its spread the pooled ratios of each run to its median. On a GPU
machine without TensorFlow or the weights, the cuda runtime runs a GPU bundle's conversions (`emulation.device_bundle`).
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable, Sequence
from datetime import date
from functools import partial
from pathlib import Path

import numpy as np

from aitax.emulation.curves import write_curve
from aitax.emulation.profile import Distribution

DEFAULT_BATCHES = (1, 2, 4, 8, 16, 32, 64)
WARMUP_RUNS = 3


def time_batches(run: Callable[[int], None], batches: Sequence[int], repeats: int,
                 progress: Callable[[int], None] = lambda _: None) -> tuple[list[tuple[int, float]], Distribution]:
    """(batch size, median ms) per batch size, and the spread: every run's time over its batch size's median."""
    points, ratios = [], []
    for batch in batches:
        for _ in range(WARMUP_RUNS):
            run(batch)
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            run(batch)
            times.append((time.perf_counter() - started) * 1000)
        median = float(np.median(times))
        points.append((batch, median))
        ratios += [t / median for t in times]
        progress(batch)
    return points, Distribution.from_samples(ratios)


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _bundle_note(conversions: Path | None) -> str:
    if conversions is None:
        return ""
    from aitax.emulation.device_bundle import read_manifest

    manifest = read_manifest(conversions)
    return (f" Networks from a GPU bundle written {manifest['written']} by aitax {manifest['aitax']} (tf2onnx "
            f"{manifest['tf2onnx']}, onnx2torch {manifest['onnx2torch']}; FaceNet's weights carried in fp16 and "
            "computed in FP32, the same work as the full weights).")


def calibrate_identify(out: Path, runtime: str, precision: str, threads: int, batches: Sequence[int],
                       repeats: int, progress: Callable[[int], None] = lambda _: None,
                       conversions: Path | None = None, name: str | None = None) -> Path:
    import cv2

    from aitax.pipeline.assets import ensure_assets
    from aitax.pipeline.facenet import FaceEmbedder, facenet_on_torch
    from aitax.pipeline.identify import decode_thumbnail_bytes
    from aitax.pipeline.onnx_models import bundled_conversion

    if conversions is not None:  # as FaceEmbedder's cuda runtime runs it, from the bundle's conversion
        embed = facenet_on_torch(partial(bundled_conversion, conversions, "facenet"), "cuda", threads)
        runtime, precision = "cuda", "fp32"
    else:
        embedder = FaceEmbedder(ensure_assets().facenet_weights, intra_op_threads=threads, precision=precision,
                                runtime=runtime)
        embed, runtime, precision = embedder.embed, embedder.runtime, embedder.precision
    rng = np.random.default_rng(0)
    # Smooth random images, PNG-encoded as detection sends them: decoding costs what a real thumbnail's does.
    thumbnails = [cv2.imencode(".png", cv2.GaussianBlur(rng.integers(0, 255, (160, 160, 3), np.uint8), (9, 9), 0))[1]
                  .tobytes() for _ in range(max(batches))]

    def identify(batch: int) -> None:
        embed(np.stack([decode_thumbnail_bytes(thumbnail, "png") for thumbnail in thumbnails[:batch]]))

    points, spread = time_batches(identify, batches, repeats, progress)
    provenance = (f"aitax calibrate identify on {cpu_name()} ({threads} thread(s)), FaceNet through "
                  f"{runtime} in {precision}, {date.today().isoformat()}: thumbnail decode and "
                  f"FaceNet per batch of PNG thumbnails, median of {repeats} runs after {WARMUP_RUNS} warm-up runs "
                  "per batch size; spread: each run over its median, pooled. Not measured: the SVM and open-set "
                  "decision (tens of microseconds per face), other work on the same cores." + _bundle_note(conversions))
    return write_curve(out, name or f"{runtime}-{precision}-{threads}t", "identify", provenance, points,
                       spread, host_cpu=runtime != "cuda")


def calibrate_detect(out: Path, video: str, min_face_size: int, frames: int, repeats: int,
                     progress: Callable[[int], None] = lambda _: None, size: tuple[int, int] = (960, 540),
                     runtime: str = "openvino", conversions: Path | None = None, name: str | None = None) -> Path:
    from aitax.pipeline.frames import read_frames
    from aitax.pipeline.ingest_detect import FaceFinder
    from aitax.telemetry.timing import Stopwatch

    # MTCNN, the paper's: the emulator's detect curves and profiles are its (pipeline.detect)
    finder = FaceFinder(min_face_size, frame_size=size, runtime=runtime, conversions=conversions,
                        detector="mtcnn")
    images = [frame.rgb for frame in read_frames(video, "calibrate", size, pace="max", max_frames=frames)]
    cycle = iter(range(10**9))

    def detect(batch: int) -> None:
        for _ in range(batch):
            finder(images[next(cycle) % len(images)], Stopwatch())

    points, spread = time_batches(detect, (1,), repeats * len(images), progress)
    provenance = (f"aitax calibrate detect on {cpu_name()}, MTCNN's networks through {runtime}, at a minimum face of "
                  f"{min_face_size} px with "
                  f"alignment and PNG thumbnails, one frame per call as the detect stage runs it, "
                  f"{date.today().isoformat()}: median of {repeats * len(images)} calls over {len(images)} "
                  f"frames of {Path(video).name}; spread: each call over the median. Not measured: decoding and "
                  "resizing the frames (ingest's), batches of frames (the detect stage takes one)."
                  + _bundle_note(conversions))
    name = name or (f"mtcnn-{min_face_size}px" if runtime == "openvino" else f"mtcnn-{runtime}-{min_face_size}px")
    return write_curve(out, name, "detect", provenance, points, spread, host_cpu=runtime != "cuda")
