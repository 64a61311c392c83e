"""OpenVINO conversions of the TensorFlow networks, kept as IR beside the downloads.

Converting costs TensorFlow's import (about 15 CPU-seconds and 0.6 GB) plus the conversion at every start of a stage
process; read back from IR, a process runs its networks without importing TensorFlow at all. A conversion is keyed
by what it was made from (the weights, the graph's source) and by OpenVINO's version, so that a change to any of
them converts again."""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from aitax.common.paths import downloads_dir

log = logging.getLogger(__name__)


def kept_conversion(folder: str, name: str, made_from: bytes, convert: Callable[[], Any]):
    """`convert()`'s OpenVINO model, kept as `downloads/models/<folder>/<name>-<key>.xml` (+ .bin), the key hashing
    `made_from` and OpenVINO's version. Written whole or not at all (stage processes start side by side); where the
    folder cannot be written (a pod's read-only image that lacks it) the model is converted at every start."""
    import openvino

    key = hashlib.sha256(made_from + f" openvino {openvino.__version__}".encode()).hexdigest()[:16]
    kept = downloads_dir() / "models" / folder / f"{name}-{key}.xml"
    if kept.exists() and kept.with_suffix(".bin").exists():
        return _core().read_model(kept)
    model = convert()
    try:
        kept.parent.mkdir(parents=True, exist_ok=True)
        # The .bin first, then the .xml that names it: a reader that finds the .xml finds its weights whole.
        with tempfile.TemporaryDirectory(dir=kept.parent) as scratch:
            openvino.save_model(model, Path(scratch) / kept.name, compress_to_fp16=False)
            os.replace(Path(scratch) / kept.with_suffix(".bin").name, kept.with_suffix(".bin"))
            os.replace(Path(scratch) / kept.name, kept)
    except (OSError, RuntimeError) as error:
        log.info("the OpenVINO conversion %s cannot be kept in %s (%s)", name, kept.parent, error)
    return model


@cache
def _core():
    """One OpenVINO runtime per process, kept: a Core dropped with its last model unloads the CPU plugin, and a
    SIGTERM that came after that crashed the process (a segmentation fault; seen in the unit tests' process)
    instead of reaching its Python handler."""
    import openvino

    return openvino.Core()


def compile_on_cpu(model, threads: int, precision: str = "f32"):
    """`model` compiled for this process's CPU threads: no pinning, as OpenVINO pins each process's inference threads
    to the same first cores (two stage processes on a 2-core machine then shared one core)."""
    return _core().compile_model(model, "CPU", {
        "INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY", "ENABLE_CPU_PINNING": False,
        "INFERENCE_PRECISION_HINT": precision})
