"""FaceNet feature extraction: Inception-ResNet-v1 (160x160 RGB face -> 128-D), the paper's identification AI.

The network, its weights and the FP32 reference computation are TensorFlow's (`pipeline.facenet_keras`); this
module picks the runtime that computes it and imports TensorFlow only when that runtime needs it.

Runtime and precision, chosen by measuring (one thread, AMD EPYC with AVX-512 BF16, per face at batch 8 / batch 1):
TensorFlow FP32 13.5 / 20.6 ms; TensorFlow under Keras' mixed_bfloat16 policy 10.7 / 21.0 ms (1.3x at batch 8,
none for a lone face); OpenVINO (the same graph converted) FP32 11.4 / 13.4 ms and bf16 6.2 / 7.7 ms
(2.2x / 2.7x), every embedding within cosine 0.9997 of TensorFlow FP32's. So `runtime="openvino"` is the default,
in bf16 where the CPU computes bfloat16 natively (AVX-512 BF16 or AMX; elsewhere it would be emulated, slower than
FP32). Where it does not, `auto` is INT8 (`pipeline.quantize`): on an AMD EPYC with AVX2 only, FP32 38.3 / 32.2 ms
a face (batch 1 / 8), INT8 18.7 / 16.1 (2026-12-05).

The conversion to OpenVINO is kept beside the downloaded weights (`facenet_openvino`), keyed by the weights, OpenVINO's
version and the graph's source: converting took 9-11 CPU-seconds and TensorFlow's import 15 more at every identify
start; from the kept conversion an identify process starts without TensorFlow (1.6 CPU-seconds, 0.7 GB less
memory). The pipeline image keeps the conversion its build made.

`runtime="cuda"` runs the same graph on an NVIDIA GPU: converted to ONNX (tf2onnx), kept like the OpenVINO conversion
(the pipeline-gpu image keeps its build's), and run by PyTorch in FP32 (`pipeline.onnx_models`). It needs the optional
`gpu` extra and a GPU; asked for without either, it is a one-line error, never a silent fallback to the CPU. Not
measured on a GPU yet (none was lent to the sessions that wrote it); `make gpu-bundle` here, then
`scripts/device-calibrate.sh` on a GPU machine, measures it there.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from aitax.common.errors import UserError
from aitax.pipeline.assets import sha256_of
from aitax.pipeline.crop import THUMBNAIL_SIZE as FACE_SIZE
from aitax.pipeline.onnx_models import TorchNetwork, kept_onnx
from aitax.pipeline.openvino_ir import compile_on_cpu, kept_conversion

if TYPE_CHECKING:
    from aitax.pipeline.facenet_keras import FaceNetGraph

log = logging.getLogger(__name__)

EMBEDDING_SIZE = 128
PRECISIONS = ("auto", "fp32", "bf16", "int8")
RUNTIMES = ("openvino", "tensorflow", "cuda")
_BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_has_bf16(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether this CPU computes bfloat16 natively (Linux's flags for AVX-512 BF16 and AMX)."""
    try:
        flags = next((line.split(":", 1)[1].split() for line in cpuinfo.read_text().splitlines()
                      if line.startswith("flags")), [])
    except OSError:
        return False
    return any(flag in flags for flag in _BF16_CPU_FLAGS)


def resolve_precision(precision: str, has_bf16: bool, runtime: str = "openvino") -> str:
    """`auto` -> through OpenVINO, bf16 where the CPU has it, else int8; through another runtime, fp32. An
    impossible choice is an error."""
    if precision not in PRECISIONS:
        raise UserError(f"--precision {precision!r}: expected one of {', '.join(PRECISIONS)}")
    if runtime not in RUNTIMES:
        raise UserError(f"--runtime {runtime!r}: expected one of {', '.join(RUNTIMES)}")
    if precision == "auto":
        return ("bf16" if has_bf16 else "int8") if runtime == "openvino" else "fp32"
    if precision == "int8" and runtime != "openvino":
        raise UserError(f"--precision int8 runs through --runtime openvino (--runtime {runtime} computes in FP32)")
    if precision == "bf16" and not has_bf16:
        raise UserError("--precision bf16: this CPU has neither AVX-512 BF16 nor AMX; bf16 would be emulated and "
                        "slower than fp32 (use auto or fp32)")
    if precision == "bf16" and runtime != "openvino":
        raise UserError(f"--precision bf16 runs through --runtime openvino (--runtime {runtime} computes in FP32)")
    return precision


def _made_from(weights_sha256: str) -> bytes:
    """What a conversion of FaceNet's graph is made from: the weights and the graph's source."""
    source = Path(importlib.util.find_spec("aitax.pipeline.facenet_keras").origin).read_bytes()
    return f"{weights_sha256} ".encode() + source


def facenet_openvino(weights_sha256: str, embed_function: Callable[[], object]):
    """FaceNet's graph as an OpenVINO model: converted from `embed_function()` (a `tf.function`) once, and kept
    (`pipeline.openvino_ir`), keyed by the weights and the graph's source."""
    import openvino

    return kept_conversion("facenet-openvino", "facenet", _made_from(weights_sha256),
                           lambda: openvino.convert_model(embed_function()))


def facenet_onnx(weights_sha256: str, embed_function: Callable[[], object]) -> bytes:
    """FaceNet's graph as ONNX (opset 17), converted from `embed_function()` once and kept (`pipeline.onnx_models`),
    keyed by the weights and the graph's source."""

    def convert() -> bytes:
        import tf2onnx

        from aitax.pipeline.facenet_keras import FACES_SIGNATURE

        graph, _ = tf2onnx.convert.from_function(embed_function(), input_signature=[FACES_SIGNATURE], opset=17)
        return graph.SerializeToString()

    return kept_onnx("facenet-onnx", "facenet", _made_from(weights_sha256), convert)


def facenet_on_torch(model: Callable[[], bytes], device: str, threads: int = 1) -> Callable[[np.ndarray], np.ndarray]:
    """FaceNet's ONNX conversion `model()` as a torch module on `device` (the cuda runtime), run once before it is
    trusted: uint8 faces (N, 160, 160, 3) -> embeddings. A missing extra or GPU is a UserError naming what to
    install."""
    network = TorchNetwork(model, device, threads)
    network(np.zeros((1, FACE_SIZE, FACE_SIZE, 3), np.uint8))
    return lambda faces: next(iter(network(faces).values()))


class FaceEmbedder:
    """160x160 RGB uint8 faces -> L2-normalised 128-D float32 embeddings, in `precision` through `runtime` (see the
    module)."""

    def __init__(self, weights: Path, intra_op_threads: int = 1, inter_op_threads: int = 1,
                 precision: str = "auto", runtime: str = "openvino", device: str = "cuda") -> None:
        """`device`: where the cuda runtime runs its module (the tests give it `cpu`, to check that path here)."""
        self.precision = resolve_precision(precision, cpu_has_bf16(), runtime)
        self.runtime = runtime
        self.weights = weights
        self._threads = (intra_op_threads, inter_op_threads)
        self.weights_sha256 = sha256_of(weights)  # galleries record it: embeddings of other weights do not compare
        self._request = None
        self._cuda = self.cuda_network(device) if runtime == "cuda" else None
        if runtime == "openvino":
            try:
                self._request = self._compile(intra_op_threads)
            except (ImportError, RuntimeError) as error:
                # OpenVINO is a speed-up, never a requirement: a CPU or container it cannot run on keeps identify
                # working in TensorFlow FP32 (printed at start-up and recorded in every identify event).
                log.warning("OpenVINO could not run FaceNet here (%s): TensorFlow FP32 instead",
                            str(error).strip().splitlines()[-1][:300] if str(error).strip() else type(error).__name__)
                self.runtime, self.precision = "tensorflow", "fp32"
        if self.runtime == "tensorflow":
            _ = self.graph  # built now, not in the first batch

    @cached_property
    def graph(self) -> FaceNetGraph:
        """The TensorFlow graph (the network with its weights): built when a runtime or a caller first needs it."""
        from aitax.pipeline.facenet_keras import FaceNetGraph

        return FaceNetGraph(self.weights, EMBEDDING_SIZE, *self._threads)

    def _compile(self, threads: int):
        """FaceNet through OpenVINO, one inference run before it is trusted."""
        model = facenet_openvino(self.weights_sha256, lambda: self.graph.embed)
        if self.precision == "int8":
            from aitax.pipeline.assets import ensure_assets
            from aitax.pipeline.quantize import facenet_int8

            model = facenet_int8(model, _made_from(self.weights_sha256), ensure_assets().faces_train_dir)
        # INT8 layers run in INT8 whatever the hint; the hint is for the layers kept in floating point
        compiled = compile_on_cpu(model, threads, {"fp32": "f32", "bf16": "bf16", "int8": "f32"}[self.precision])
        request = compiled.create_infer_request()
        request.infer({0: np.zeros((1, FACE_SIZE, FACE_SIZE, 3), np.uint8)})
        return request

    def cuda_network(self, device: str) -> Callable[[np.ndarray], np.ndarray]:
        """FaceNet's kept ONNX conversion on `device` (`facenet_on_torch`)."""
        return facenet_on_torch(lambda: facenet_onnx(self.weights_sha256, lambda: self.graph.embed), device,
                                self._threads[0])

    def warm(self, max_batch: int) -> None:
        """One inference at each batch size a stage's batches take most (1-8) and at `max_batch`: a runtime's
        first call at a new shape sets it up (15-30 ms each on this CPU), which would otherwise be a face's wait."""
        for size in sorted({*range(1, min(max_batch, 8) + 1), max_batch}):
            self.embed(np.zeros((size, FACE_SIZE, FACE_SIZE, 3), np.uint8))

    def embed(self, faces_rgb: np.ndarray) -> np.ndarray:
        """A batch (N, 160, 160, 3) of uint8 RGB faces -> (N, 128) float32 unit vectors."""
        if faces_rgb.ndim != 4 or faces_rgb.shape[1:] != (FACE_SIZE, FACE_SIZE, 3) or faces_rgb.dtype != np.uint8:
            raise ValueError(f"expected uint8 faces shaped (N, {FACE_SIZE}, {FACE_SIZE}, 3), got "
                             f"{faces_rgb.dtype} {faces_rgb.shape}")
        if len(faces_rgb) == 0:
            return np.zeros((0, EMBEDDING_SIZE), np.float32)
        if self._request is not None:
            return self._request.infer({0: faces_rgb})[0].copy()  # the request reuses its output buffer
        if self._cuda is not None:
            return self._cuda(faces_rgb)
        return self.graph.embed(faces_rgb).numpy()
