"""Pipeline compute costs on one thread, side by side with stock MTCNN and the paper (Xeon 8176, one core).

    .venv/bin/python benchmarks/pipeline_bench.py [--video V.mp4] [--frames 40]

Prints per-frame ingest (decode + resize) and detect CPU ms, our detector vs `mtcnn.MTCNN().detect_faces` on
the same frames (boxes must agree within IoU 0.9; the ratio is printed), identify CPU ms per face at batch 1
and 8 in TensorFlow fp32 (the reference) and through the default runtime, OpenVINO, in the fastest precision this
CPU has (bf16 on AVX-512 BF16 / AMX), FaceNet's GFLOP per face against the thread's fp32 matmul rate, thumbnail
bytes per encoding, and this process's RSS. Not a test: the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aitax.common.paper import OBJECT_DETECTION, PAPER


def cpu_ms(function, *args):
    started = time.process_time()
    result = function(*args)
    return (time.process_time() - started) * 1000, result


def read_frames(video: Path, count: int) -> tuple[list, list[float]]:
    """Decode and resize up to `count` frames: the frames and each one's ingest CPU ms."""
    import cv2

    from aitax.pipeline.crop import resize_frame

    capture = cv2.VideoCapture(str(video))
    frames, ingest_ms = [], []
    for _ in range(count):
        started = time.process_time()
        ok, bgr = capture.read()
        if not ok:
            break
        frames.append(resize_frame(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB), 960, 540))
        ingest_ms.append((time.process_time() - started) * 1000)
    capture.release()
    return frames, ingest_ms


def time_detectors(frames: list) -> tuple[dict[str, list[float]], int, int, list]:
    """Our detector at min face 20 and 40 against stock MTCNN, interleaved frame by frame so machine noise hits
    them alike: CPU ms per detector, stock boxes agreeing with ours (IoU 0.9) of those compared, and the
    thumbnails of the faces ours finds at 40."""
    from mtcnn import MTCNN
    from tqdm import tqdm

    from aitax.pipeline.crop import face_thumbnail, iou
    from aitax.pipeline.detect import FaceDetector

    size = (frames[0].shape[1], frames[0].shape[0])
    ours20, ours40 = FaceDetector(min_face_size=20, frame_size=size), FaceDetector(min_face_size=40, frame_size=size)
    stock = MTCNN()
    for detector in (ours20.detect, ours40.detect, stock.detect_faces):
        detector(frames[0])  # trace the tf.functions before timing
    timings: dict[str, list[float]] = {"ours@20": [], "ours@40": [], "stock@20": []}
    agree, compared, faces = 0, 0, []
    for frame in tqdm(frames, desc="detect", unit="frame"):
        ms, ours = cpu_ms(ours20.detect, frame)
        timings["ours@20"].append(ms)
        ms, ours_40 = cpu_ms(ours40.detect, frame)
        timings["ours@40"].append(ms)
        ms, theirs = cpu_ms(stock.detect_faces, frame)
        timings["stock@20"].append(ms)
        for theirs_face in theirs:
            compared += 1
            box = tuple(int(v) for v in theirs_face["box"])
            agree += any(iou(box, d.box) >= 0.9 for d in ours)
        faces += [face_thumbnail(frame, d.box, d.landmarks) for d in ours_40 if d.confidence >= 0.9]
    return timings, agree, compared, faces


def time_identify(assets, faces: list) -> dict:
    """FaceNet per face at batch 1 and 8, TensorFlow fp32 against the fastest runtime here, their agreement, and
    the network's GFLOP per face against this thread's fp32 matmul rate."""
    import numpy as np

    from aitax.pipeline.facenet import FaceEmbedder

    embedder = FaceEmbedder(assets.facenet_weights, precision="fp32", runtime="tensorflow")
    batch = np.stack((faces * 8)[:8]) if faces else np.zeros((8, 160, 160, 3), np.uint8)
    fastest = FaceEmbedder(assets.facenet_weights, precision="auto")  # OpenVINO, bf16 where the CPU has it
    timed = {}
    for name, model in (("reference", embedder), ("fastest", fastest)):
        model.embed(batch[:1])  # both batch sizes traced or compiled before timing
        model.embed(batch)
        timed[name] = ([cpu_ms(model.embed, batch[i % 8:i % 8 + 1])[0] for i in range(16)],
                       [cpu_ms(model.embed, batch)[0] / 8 for _ in range(6)])
    return {"batch1": timed["reference"][0], "batch8": timed["reference"][1], "fastest1": timed["fastest"][0],
            "fastest8": timed["fastest"][1], "fastest": f"{fastest.runtime} {fastest.precision}",
            "agreement": float((embedder.embed(batch) * fastest.embed(batch)).sum(axis=1).min()),
            "gflop_per_face": facenet_gflop(embedder.graph.model), "matmul_gflops": matmul_rate()}


def time_objects(assets, frames: list) -> tuple[list[float], float, int, int]:
    """Object Detection (the paper's Sec. 6): CenterNet's CPU ms per frame, its network's share, and in how many
    labelled portraits it finds a person."""
    import cv2

    from aitax.pipeline.objects import ObjectDetector
    from aitax.telemetry.timing import Stopwatch

    objects = ObjectDetector()
    objects(frames[0])
    watch = Stopwatch()
    object_ms = [cpu_ms(objects, frame, watch)[0] for frame in frames]
    portraits = sorted([*assets.faces_train_dir.glob("*/*.jpg"), *assets.faces_val_dir.glob("*/*.jpg")])
    people = sum(any(found.label == "person" for found in objects(cv2.cvtColor(cv2.imread(str(path)),
                                                                             cv2.COLOR_BGR2RGB)))
                 for path in portraits)
    return object_ms, watch.ms["centernet"] / sum(watch.ms.values()), people, len(portraits)


def thumbnail_sizes(faces: list) -> dict[str, list[int]]:
    import cv2

    sizes: dict[str, list[int]] = {"png": [], "jpeg q90": [], "jpeg q75": []}
    for face in faces:
        bgr = cv2.cvtColor(face, cv2.COLOR_RGB2BGR)
        sizes["png"].append(len(cv2.imencode(".png", bgr)[1]))
        sizes["jpeg q90"].append(len(cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, 90])[1]))
        sizes["jpeg q75"].append(len(cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, 75])[1]))
    return sizes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--video", type=Path, help="a 1920x1080 video (default: generate 20 s with make-video)")
    parser.add_argument("--frames", type=int, default=40, help="frames to time (default 40)")
    args = parser.parse_args()

    from aitax.pipeline.assets import ensure_assets
    from aitax.pipeline.facenet_keras import set_tf_threads

    set_tf_threads(1, 1)
    assets = ensure_assets()
    video = args.video
    if video is None:
        from aitax.pipeline.synth_video import make_video

        video = Path(tempfile.mkdtemp()) / "bench.mp4"
        make_video(assets.faces_val_dir, video, seconds=20)
    frames, ingest_ms = read_frames(video, args.frames)
    timings, agree, compared, faces = time_detectors(frames)
    identify = time_identify(assets, faces)
    object_ms, network_share, people, portraits = time_objects(assets, frames)
    sizes = thumbnail_sizes(faces)

    mean = statistics.fmean
    batch1, batch8, fastest1, fastest8 = (identify[k] for k in ("batch1", "batch8", "fastest1", "fastest8"))
    fastest = identify["fastest"]
    print(f"\n{len(frames)} frames of {video.name}, {len(faces)} faces; CPU ms on one thread "
          f"(load {os.getloadavg()[0]:.2f})")
    print(f"{'stage':<34}{'mean ms':>10}{'p50 ms':>10}{'paper ms':>10}")
    rows = [("ingest (decode 1080p + resize)", ingest_ms, PAPER.mean_ms["ingest"])]
    rows += [(f"detect {name}", values, PAPER.mean_ms["detect"]) for name, values in timings.items()]
    rows += [("identify tensorflow fp32, batch 1", batch1, PAPER.mean_ms["identify"]),
             ("identify tensorflow fp32, batch 8", batch8, PAPER.mean_ms["identify"]),
             (f"identify {fastest}, batch 1", fastest1, PAPER.mean_ms["identify"]),
             (f"identify {fastest}, batch 8", fastest8, PAPER.mean_ms["identify"]),
             ("object detection (CenterNet)", object_ms, OBJECT_DETECTION.detect_ms)]
    for name, values, paper in rows:
        print(f"{name:<34}{mean(values):>10.1f}{statistics.median(values):>10.1f}{paper:>10.1f}")
    ratio = mean(timings["stock@20"]) / mean(timings["ours@20"])
    print(f"\nstock MTCNN / ours at min face 20: {ratio:.2f}x (boxes agreeing within IoU 0.9: {agree}/{compared})")
    default_ratio = mean(timings["stock@20"]) / mean(timings["ours@40"])
    print(f"stock MTCNN @20 / ours @40 (the pipeline's default): {default_ratio:.2f}x"
          " (stock finds no face at all at 40: its pyramid bug)")
    print(f"identify batch 1 / batch 8 per face: {mean(batch1) / mean(batch8):.2f}x")
    print(f"identify fp32 / fastest per face: {mean(batch8) / mean(fastest8):.2f}x ({fastest}; at batch 8, "
          f"embeddings within cosine {identify['agreement']:.4f} of fp32; at batch 1 "
          f"{mean(batch1) / mean(fastest1):.2f}x)")
    gflop, matmul_gflops = identify["gflop_per_face"], identify["matmul_gflops"]
    achieved = gflop / (mean(batch8) / 1000)
    print(f"FaceNet {gflop:.2f} GFLOP per face; fp32 at batch 8 runs {achieved:.0f} GFLOP/s, "
          f"{achieved / matmul_gflops:.2f} of this thread's fp32 matmul rate ({matmul_gflops:.0f} GFLOP/s)")
    fastest_rate = gflop / (mean(fastest8) / 1000)
    print(f"{fastest} at batch 8 runs {fastest_rate:.0f} GFLOP/s, {fastest_rate / matmul_gflops:.2f}x that fp32 rate")
    print(f"object detection: CenterNet MobileNetV3 (COCO) {mean(object_ms):.1f} ms per frame, its network "
          f"{network_share:.0%} of it (paper's Faster R-CNN: {OBJECT_DETECTION.detect_ms:.0f} ms); a person found in "
          f"{people}/{portraits} labelled portraits")
    print("thumbnail bytes (paper: 37,300): " + ", ".join(f"{k} {mean(v):,.0f}" for k, v in sizes.items() if v))
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS of this process (four detectors + FaceNet loaded): {peak_mib:.0f} MiB")
    return 0


def facenet_gflop(model) -> float:
    """Multiply-adds x 2 of the convolutions and dense layers for one 160x160 face."""
    import keras

    flops = 0
    for layer in model.layers:
        if isinstance(layer, keras.layers.Conv2D):
            kernel_h, kernel_w, channels_in, channels_out = layer.kernel.shape
            _, height, width, _ = layer.output.shape
            flops += 2 * kernel_h * kernel_w * channels_in * channels_out * height * width
        elif isinstance(layer, keras.layers.Dense):
            flops += 2 * layer.kernel.shape[0] * layer.kernel.shape[1]
    return flops / 1e9


def matmul_rate(size: int = 1024, repeats: int = 8) -> float:
    """GFLOP/s of one thread's fp32 matrix multiply (TensorFlow's own, oneDNN): the ceiling FaceNet is held to."""
    import tensorflow as tf

    a = tf.random.normal((size, size))
    multiply = tf.function(lambda x: tf.linalg.matmul(x, x))
    multiply(a).numpy()
    best = min(cpu_ms(lambda: multiply(a).numpy())[0] for _ in range(repeats))
    return 2 * size ** 3 / (best / 1000) / 1e9


if __name__ == "__main__":
    sys.exit(main())
