"""A GPU bundle: what a GPU machine needs to run this product's networks, check them against the CPU path and time
them with `aitax calibrate`, when it has PyTorch with CUDA but no TensorFlow, no downloaded weights and no package
registry, and takes 64 MiB at most (the machines lent to this project). `aitax gpu-bundle DIR` writes it on a machine
with the dev install; `scripts/device-calibrate.sh` runs `aitax gpu-check DIR` and `aitax calibrate` there.

The folder: the networks' ONNX conversions (`facenet.onnx` with its weights in fp16 to fit, widened back to fp32
before use; `pnet|rnet|onet.onnx` as kept), `frames/*.jpg` (960x540 frames of a video) with the OpenVINO detector's
findings on them, `clip.mp4` (the same frames, for `calibrate detect --video`), `thumbnails/*.png` (aligned faces
cut from the video) with the CPU path's embeddings in `embeddings.npz`, `wheels/` (the pieces the device's Python
lacks) and `manifest.json` (what made it, and the reference figures)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from datetime import date
from functools import partial
from importlib.metadata import version
from pathlib import Path

import numpy as np

from aitax.common.errors import UserError

MANIFEST = "manifest.json"
FRAME_SIZE = (960, 540)
FRAME_STRIDE = 5  # frames apart in the video: faces move between them
JPEG_QUALITY = 90
# The device's Python and what it lacks of what `aitax gpu-check` and `aitax calibrate` import (it has numpy, torch,
# torchvision, onnx, opencv, numba, click, pyyaml, tqdm and prometheus-client: the device tool's KINDS.md).
DEVICE_PYTHON = "3.12"
DEVICE_WHEELS = ("onnx2torch", "pydantic", "pydantic-core", "annotated-types", "typing-inspection")
MANYLINUX = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
MIN_COSINE = 0.9999  # the GPU path's embeddings against the CPU path's
MAX_CONFIDENCE_GAP = 1e-4
MAX_LANDMARK_GAP_PX = 1.0


def _pixels_sha256(rgb: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(rgb).tobytes()).hexdigest()


def _decoded(path: Path) -> np.ndarray:
    import cv2

    return cv2.cvtColor(cv2.imread(str(path)), cv2.COLOR_BGR2RGB)


def _findings(detections) -> list[dict]:
    return [{"box": [int(v) for v in d.box], "confidence": float(d.confidence),
             "landmarks": [[float(x), float(y)] for x, y in d.landmarks]} for d in detections]


def _device_wheels(folder: Path) -> list[str]:
    """Downloads the device's missing wheels, at this install's versions, for the device's Python."""
    pins = [f"{name}=={version(name)}" for name in DEVICE_WHEELS]
    platforms = [option for platform in MANYLINUX for option in ("--platform", platform)]
    done = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                           "--python-version", DEVICE_PYTHON, "--implementation", "cp", *platforms,
                           "-d", str(folder), *pins], capture_output=True, text=True)
    if done.returncode != 0:
        raise UserError(f"gpu-bundle: pip could not download {' '.join(pins)} for Python {DEVICE_PYTHON}: "
                        f"{(done.stderr.strip().splitlines() or ['no message'])[-1]}")
    return pins


def write_bundle(folder: Path, video: str, frames: int, thumbnails: int, min_face_size: int,
                 progress: Callable[[str], None] = lambda _: None, wheels: bool = True) -> dict:
    """The bundle in `folder`; `wheels=False` leaves out the device's wheels (a download from PyPI)."""
    import cv2

    from aitax.pipeline.assets import ensure_assets
    from aitax.pipeline.crop import face_thumbnail
    from aitax.pipeline.detect import FaceDetector, mtcnn_onnx
    from aitax.pipeline.facenet import FaceEmbedder, facenet_on_torch, facenet_onnx
    from aitax.pipeline.frames import read_frames
    from aitax.pipeline.onnx_models import bundled_conversion, narrow_weights

    if folder.is_dir() and any(folder.iterdir()) and not (folder / MANIFEST).exists():
        raise UserError(f"gpu-bundle {folder}: a folder with other files in it (give a new or a bundle's folder)")
    for part in ("frames", "thumbnails", "wheels"):  # a bundle written again keeps nothing of the last one
        shutil.rmtree(folder / part, ignore_errors=True)
        (folder / part).mkdir(parents=True)
    progress("conversions")
    embedder = FaceEmbedder(ensure_assets().facenet_weights, precision="fp32")  # the CPU path, in FP32
    (folder / "facenet.onnx").write_bytes(
        narrow_weights(facenet_onnx(embedder.weights_sha256, lambda: embedder.graph.embed)))
    for network in ("pnet", "rnet", "onet"):
        (folder / f"{network}.onnx").write_bytes(mtcnn_onnx(network))

    progress("frames")
    detector = FaceDetector(min_face_size=min_face_size, frame_size=FRAME_SIZE)
    clip = cv2.VideoWriter(str(folder / "clip.mp4"), cv2.VideoWriter_fourcc(*"mp4v"), 10, FRAME_SIZE)
    found, faces = [], []
    for number, frame in enumerate(read_frames(video, "gpu-bundle", FRAME_SIZE, pace="max")):
        rgb = frame.rgb
        checked = number % FRAME_STRIDE == 0 and len(found) < frames
        if checked:  # the reference is taken on the pixels the device will decode from the same JPEG file
            path = folder / "frames" / f"{len(found):03d}.jpg"
            cv2.imwrite(str(path), cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
            rgb = _decoded(path)
        detections = detector.detect(rgb)
        faces += [face_thumbnail(rgb, d.box, d.landmarks) for d in detections]
        if checked:
            clip.write(cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
            found.append({"file": path.name, "pixels_sha256": _pixels_sha256(rgb), "faces": _findings(detections)})
        if len(found) >= frames and len(faces) >= thumbnails:
            break
    clip.release()
    if len(found) < frames or len(faces) < thumbnails:
        raise UserError(f"gpu-bundle --video {video}: {len(found)} frames and {len(faces)} faces, fewer than the "
                        f"{frames} and {thumbnails} asked for")

    progress("embeddings")
    batch = np.stack(faces[:thumbnails])
    cpu = embedder.embed(batch)
    rounded = facenet_on_torch(partial(bundled_conversion, folder, "facenet"), "cpu")(batch)
    for number, face in enumerate(batch):
        cv2.imwrite(str(folder / "thumbnails" / f"{number:03d}.png"), cv2.cvtColor(face, cv2.COLOR_RGB2BGR))
    np.savez_compressed(folder / "embeddings.npz", cpu=cpu, cpu_rounded_weights=rounded)

    progress("wheels")
    pins = _device_wheels(folder / "wheels") if wheels else []
    manifest = {
        "written": date.today().isoformat(), "aitax": version("aitax"), "torch": version("torch"),
        "onnx2torch": version("onnx2torch"), "tf2onnx": version("tf2onnx"), "openvino": version("openvino"),
        "device_wheels": pins, "facenet_weights_sha256": embedder.weights_sha256, "video": Path(video).name,
        "min_face_size": min_face_size, "frames": found,
        "cpu_path": "OpenVINO FP32 (the detector, and FaceNet from the downloaded weights)",
        "weights_rounding_min_cosine": float((cpu * rounded).sum(axis=1).min()),
    }
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return manifest


def read_manifest(folder: Path) -> dict:
    path = folder / MANIFEST
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise UserError(f"{path}: not a GPU bundle's manifest ({error})") from None


def check_bundle(folder: Path, device: str = "cuda", threads: int = 1) -> dict:
    """The cuda runtime on `device` against the CPU path's references: FaceNet's embeddings (cosine), MTCNN's boxes,
    confidences and landmarks. Each condition with its measured value and whether it holds."""
    from aitax.pipeline.detect import FaceDetector
    from aitax.pipeline.facenet import facenet_on_torch
    from aitax.pipeline.onnx_models import bundled_conversion

    manifest = read_manifest(folder)
    with np.load(folder / "embeddings.npz") as saved:
        cpu, cpu_rounded = saved["cpu"], saved["cpu_rounded_weights"]
    faces = np.stack([_decoded(path) for path in sorted((folder / "thumbnails").glob("*.png"))])
    embeddings = facenet_on_torch(partial(bundled_conversion, folder, "facenet"), device, threads)(faces)
    against_cpu = (embeddings * cpu).sum(axis=1)
    against_rounded = (embeddings * cpu_rounded).sum(axis=1)

    detector = FaceDetector(min_face_size=manifest["min_face_size"], frame_size=FRAME_SIZE, threads=threads,
                            runtime="cuda", device=device, conversions=folder)
    same_pixels = same_boxes = 0
    confidence_gap = landmark_gap = 0.0
    for frame in manifest["frames"]:
        rgb = _decoded(folder / "frames" / frame["file"])
        same_pixels += _pixels_sha256(rgb) == frame["pixels_sha256"]
        found = _findings(detector.detect(rgb))
        expected = frame["faces"]
        if [f["box"] for f in found] != [f["box"] for f in expected]:
            continue
        same_boxes += 1
        for mine, theirs in zip(found, expected, strict=True):
            confidence_gap = max(confidence_gap, abs(mine["confidence"] - theirs["confidence"]))
            landmark_gap = max(landmark_gap, float(np.abs(np.subtract(mine["landmarks"], theirs["landmarks"])).max()))
    frames = len(manifest["frames"])
    conditions = [
        ("facenet: min cosine to the CPU path (OpenVINO FP32, full weights)", float(against_cpu.min()),
         against_cpu.min() >= MIN_COSINE),
        ("facenet: min cosine to the same fp16-rounded weights on the CPU (PyTorch)", float(against_rounded.min()),
         against_rounded.min() >= MIN_COSINE),
        ("mtcnn: frames decoded to the bundle's pixels", f"{same_pixels}/{frames}", same_pixels == frames),
        ("mtcnn: frames with the CPU detector's boxes", f"{same_boxes}/{frames}", same_boxes == frames),
        ("mtcnn: largest confidence gap", confidence_gap, confidence_gap <= MAX_CONFIDENCE_GAP),
        ("mtcnn: largest landmark gap (px)", landmark_gap, landmark_gap <= MAX_LANDMARK_GAP_PX),
    ]
    return {"device": device, "thumbnails": len(faces), "frames": frames, "bundle": manifest["written"],
            "conditions": [{"condition": name, "measured": value, "holds": bool(holds)}
                           for name, value, holds in conditions],
            "holds": all(holds for _, _, holds in conditions)}
