"""The `cuda` runtime of detect (MTCNN) and identify (FaceNet): the TensorFlow networks converted to ONNX (tf2onnx),
kept beside the downloads like the OpenVINO conversions, and run by PyTorch on an NVIDIA GPU in FP32 (TF32 off), each
ONNX graph turned into a torch module by onnx2torch.

Why PyTorch and not ONNX Runtime's CUDA provider: the GPU machines this project is lent have PyTorch with CUDA and no
onnxruntime-gpu (nor a package registry, and 64 MiB to carry), so only a PyTorch runtime can be timed where the
shipped H200 curves come from; both bring NVIDIA's CUDA wheels to the pipeline-gpu image, about the same size. On the
CPU (`device="cpu"`) the same modules give the ONNX graph's outputs, which is how the tests check this path without a
GPU. Converting to ONNX imports TensorFlow (15 CPU-seconds and more at every start); read back from where it is kept,
a stage process on a GPU starts without it. Asked for without the `gpu` extra, without a GPU, or with a PyTorch built
without CUDA, the runtime is a one-line error: never a silent fallback to the CPU."""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import tempfile
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np

from aitax.common.errors import UserError
from aitax.common.paths import downloads_dir

log = logging.getLogger(__name__)

GPU_EXTRA = "pip install -e '.[gpu]' (PyTorch with CUDA, onnx2torch, tf2onnx), or the pipeline-gpu image"


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


def _torch():
    """PyTorch, or a UserError naming the extra; imported only by the cuda runtime (3 s and 1 GB of libraries)."""
    try:
        import onnx2torch
        import torch
    except ImportError as error:
        raise UserError(f"--runtime cuda needs the optional gpu extra ({error.name} is missing): {GPU_EXTRA}") \
            from None
    return torch, onnx2torch


def _explicit_pooling(model) -> None:
    """tf2onnx writes a Keras 'same' max pool of any input size as auto_pad SAME_UPPER, which onnx2torch does not
    convert. Where the kernel equals the stride (PNet's 2x2/2, the only one in these networks) SAME_UPPER pads the end
    of an odd side by one, which is what ceil_mode does with no padding: rewritten so, anything else refused."""
    import onnx

    for node in model.graph.node:
        attributes = {attribute.name: attribute for attribute in node.attribute}
        if node.op_type != "MaxPool" or attributes.get("auto_pad", onnx.AttributeProto()).s != b"SAME_UPPER":
            continue
        if list(attributes["kernel_shape"].ints) != list(attributes.get("strides", attributes["kernel_shape"]).ints):
            raise UserError(f"--runtime cuda: the ONNX node {node.name} pools with auto_pad SAME_UPPER and a kernel "
                            "unlike its stride, which this runtime does not convert")
        node.attribute.remove(attributes["auto_pad"])
        node.attribute.append(onnx.helper.make_attribute("ceil_mode", 1))


class TorchNetwork:
    """An ONNX model as a torch module on `device`, called as an OpenVINO compiled model is: one input batch (NumPy)
    in, the outputs (NumPy) by the graph's output names, in order. `device="cuda"` must be a GPU: checked before the
    model is read or converted."""

    def __init__(self, model: Callable[[], bytes], device: str = "cuda", threads: int = 1) -> None:
        torch, onnx2torch = _torch()
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise UserError(f"--runtime cuda: PyTorch {torch.__version__} here finds no CUDA GPU (built for CUDA "
                            f"{torch.version.cuda or 'none'}); on a machine with an NVIDIA GPU and its driver: "
                            f"{GPU_EXTRA}")
        import onnx

        torch.set_num_threads(threads)  # the host side's threads: the stage keeps the cores it was given
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False  # FP32, as on the CPU
        graph = onnx.load_from_string(model())
        _explicit_pooling(graph)
        self._outputs = [output.name for output in graph.graph.output]
        self.device = torch.device(device)
        self.module = onnx2torch.convert(graph).eval().to(self.device)
        self._torch = torch

    def __call__(self, batch: np.ndarray) -> dict[str, Any]:
        with self._torch.inference_mode():
            outputs = self.module(self._torch.from_numpy(np.ascontiguousarray(batch)).to(self.device))
        outputs = outputs if isinstance(outputs, tuple | list) else (outputs,)
        return dict(zip(self._outputs, (output.cpu().numpy() for output in outputs), strict=True))


# A bundle's FaceNet carries its weights in fp16: the fp32 graph (91 MB) does not fit what a lent GPU machine takes
# (64 MiB). Only tensors of at least this many values are narrowed: a scalar such as an epsilon keeps its value.
_NARROWED = "aitax.narrowed_to_fp16"
_NARROW_FROM = 256


def narrow_weights(model: bytes) -> bytes:
    """`model` with its large fp32 initializers stored as fp16, and their names recorded for `widen_weights`."""
    import onnx
    from onnx import numpy_helper

    graph = onnx.load_from_string(model)
    narrowed = []
    for tensor in graph.graph.initializer:
        if tensor.data_type == onnx.TensorProto.FLOAT and np.prod(tensor.dims) >= _NARROW_FROM:
            tensor.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(tensor).astype(np.float16), tensor.name))
            narrowed.append(tensor.name)
    graph.metadata_props.add(key=_NARROWED, value="\n".join(narrowed))
    return graph.SerializeToString()


def widen_weights(model: bytes) -> bytes:
    """A `narrow_weights` model back in fp32: the original graph, each narrowed weight rounded to fp16's precision."""
    import onnx
    from onnx import numpy_helper

    graph = onnx.load_from_string(model)
    narrowed = set(next((prop.value for prop in graph.metadata_props if prop.key == _NARROWED), "").split("\n"))
    for tensor in graph.graph.initializer:
        if tensor.name in narrowed:
            tensor.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(tensor).astype(np.float32), tensor.name))
    return graph.SerializeToString()


def bundled_conversion(folder: Path, network: str) -> bytes:
    """A network's conversion from a GPU bundle (`aitax gpu-bundle`), in fp32, or a one-line error."""
    path = folder / f"{network}.onnx"
    if not path.is_file():
        raise UserError(f"--conversions {folder}: no {path.name} (write the folder with `aitax gpu-bundle`)")
    return widen_weights(path.read_bytes())
