"""The `cuda` runtime of detect (MTCNN) and identify (FaceNet): the TensorFlow networks converted to ONNX (tf2onnx),
kept beside the downloads like the OpenVINO conversions, and run by ONNX Runtime's CUDA provider in FP32.

Converting imports TensorFlow (15 CPU-seconds and more at every start); read back from where it is kept, a stage
process on a GPU starts without it. The pipeline-gpu image keeps its build's conversions. Asked for without the `gpu`
extra, without a GPU, or with CUDA libraries ONNX Runtime cannot load, the runtime is a one-line error: never a silent
fallback to the CPU (ONNX Runtime's own is a warning)."""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import tempfile
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import numpy as np

from aitax.common.errors import UserError
from aitax.common.paths import downloads_dir

log = logging.getLogger(__name__)

CUDA_PROVIDER = "CUDAExecutionProvider"
GPU_EXTRA = "pip install -e '.[gpu]' (ONNX Runtime with CUDA, tf2onnx), or the pipeline-gpu image"


def kept_onnx(folder: str, name: str, made_from: bytes, convert: Callable[[], bytes]) -> bytes:
    """`convert()`'s ONNX model, kept as `downloads/models/<folder>/<name>-<key>.onnx`, the key hashing `made_from`
    and tf2onnx's version. Written whole or not at all; where the folder is read-only, converted at every start."""
    try:
        converter = version("tf2onnx")
    except PackageNotFoundError:
        converter = "absent"
    key = hashlib.sha256(made_from + f" tf2onnx {converter}".encode()).hexdigest()[:16]
    kept = downloads_dir() / "models" / folder / f"{name}-{key}.onnx"
    if kept.exists():
        return kept.read_bytes()
    if importlib.util.find_spec("tf2onnx") is None:
        raise UserError(f"--runtime cuda needs the optional gpu extra (tf2onnx is missing to convert {name}): "
                        f"{GPU_EXTRA}")
    model = convert()
    try:
        kept.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=kept.parent, delete=False) as scratch:
            scratch.write(model)
        os.replace(scratch.name, kept)
    except OSError as error:
        log.info("the ONNX conversion %s cannot be kept in %s (%s)", name, kept.parent, error)
    return model


def session(model: Callable[[], bytes], providers: list[str]):
    """An ONNX Runtime session of `model()` on `providers`, the first of which must be the one it runs on; checked
    before the model is read or converted."""
    try:
        import onnxruntime
    except ImportError as error:
        raise UserError(f"--runtime cuda needs the optional gpu extra ({error.name} is missing): {GPU_EXTRA}") \
            from None
    available = onnxruntime.get_available_providers()
    missing = [provider for provider in providers if provider not in available]
    if missing:
        raise UserError(f"--runtime cuda: ONNX Runtime here has no {missing[0]} (it has {', '.join(available)}); "
                        f"on a machine with an NVIDIA GPU and CUDA: {GPU_EXTRA}")
    if CUDA_PROVIDER in providers and hasattr(onnxruntime, "preload_dlls"):
        onnxruntime.preload_dlls()  # CUDA and cuDNN from NVIDIA's wheels (the pipeline-gpu image), where installed
    started = onnxruntime.InferenceSession(model(), providers=providers)
    if started.get_providers()[0] != providers[0]:
        raise UserError(f"--runtime cuda: ONNX Runtime could not start {providers[0]} here (CUDA or cuDNN libraries "
                        f"missing, or not matching the driver); it offered {started.get_providers()}")
    return started


class OnnxNetwork:
    """A session called as an OpenVINO compiled model is: one input batch in, the outputs by name, in order."""

    def __init__(self, model: Callable[[], bytes], providers: list[str]) -> None:
        self.session = session(model, providers)
        self._input = self.session.get_inputs()[0].name
        self._outputs = [output.name for output in self.session.get_outputs()]

    def __call__(self, batch: np.ndarray) -> dict[str, Any]:
        return dict(zip(self._outputs, self.session.run(None, {self._input: batch}), strict=True))
