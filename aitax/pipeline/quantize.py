"""FaceNet in INT8, for CPUs that have no native bfloat16: NNCF's post-training quantization of the OpenVINO model.

Why: on an AMD EPYC with AVX2 only, FaceNet in FP32 takes 38 ms a face (one thread, batch 1), which left identify
unable to drain the demo's densest seconds; INT8 takes 18.7 ms (16.1 at batch 8), side by side, 2026-12-05.

What is quantized: every convolution's weights (per channel) and inputs, on statistics of the enrollment split's
faces (`calibration_faces`: the train split's photos, cropped as enrollment crops them, never a test video's). The
bottleneck layer and the L2 normalisation stay FP32: quantized, the embeddings' norms strayed up to 7% from 1.
Against FP32 on 107 faces of two held-out videos: embeddings within cosine 0.976 (median 0.997), the open-set
score within 0.035 (mean 0.004 lower), no name changed. Full bias correction (not NNCF's fast one) came 0.003
closer in cosine (p1), NNCF's mixed preset 0.014 further.

The quantization takes about 2 CPU-minutes and is kept beside the FP32 conversion (`openvino_ir.kept_conversion`),
keyed by the FP32 model, the calibration photos and NNCF's version; the pipeline image keeps its build's.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import logging
from pathlib import Path

import numpy as np

from aitax.pipeline.openvino_ir import kept_conversion

log = logging.getLogger(__name__)

# Kept FP32 (see the module): the bottleneck's matrix product and batch norm, and the L2 normalisation.
FP32_LAYERS = (".*Bottleneck.*", "l2_normalize.*")


def calibration_faces(photos_dir: Path) -> np.ndarray:
    """The enrollment crops (`gallery.enrollment_crops`: as photographed and lower face covered) of every photo
    under `photos_dir/<identity>/`: (N, 160, 160, 3) uint8 RGB."""
    from aitax.pipeline.detect import FaceDetector
    from aitax.pipeline.gallery import enrollment_crops, read_rgb

    detector = FaceDetector(min_face_size=20)  # as enrollment finds them
    crops = [crop for photo in sorted(photos_dir.glob("*/*")) if photo.is_file() and not photo.name.startswith(".")
             for crop in enrollment_crops(read_rgb(photo), detector)]
    return np.stack(crops)


def facenet_int8(fp32_model, fp32_key: bytes, photos_dir: Path):
    """`fp32_model` (FaceNet's OpenVINO model, made from `fp32_key`) quantized to INT8 on `calibration_faces`,
    kept."""
    photos = sorted(p for p in photos_dir.glob("*/*") if p.is_file())
    calibration_key = hashlib.sha256(b"".join(p.read_bytes() for p in photos)).hexdigest()
    made_from = b" ".join([fp32_key, calibration_key.encode(), repr(FP32_LAYERS).encode(),
                           f"nncf {importlib.metadata.version('nncf')}".encode()])

    def quantize():
        import nncf

        faces = calibration_faces(photos_dir)
        log.warning("quantizing FaceNet to INT8 on %d faces of %s (about 2 CPU-minutes, once)", len(faces),
                    photos_dir)
        return nncf.quantize(fp32_model, nncf.Dataset(list(faces), lambda face: {0: face[None]}),
                             subset_size=len(faces), fast_bias_correction=False,
                             ignored_scope=nncf.IgnoredScope(patterns=list(FP32_LAYERS)))

    return kept_conversion("facenet-openvino", "facenet-int8", made_from, quantize)
