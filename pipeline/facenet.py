"""FaceNet feature extraction: Inception-ResNet-v1 (160x160 RGB face -> 128-D), the paper's identification AI.

The architecture is built here in code (after Sandberg's facenet and its Keras port) and the weights are read from
the h5 with h5py as plain arrays: nothing stored in the file is executed (`keras.models.load_model` would
unmarshal the Lambda layers' Python bytecode). Layer names match the h5's, so weights are assigned by name and
any missing or mis-shaped layer fails loudly.

The whole computation (prewhitening, the network, L2 normalisation) is one `tf.function` for any batch size: on one
thread a single face took 38 ms that way and 125 ms through `model.predict`, which sets up a data pipeline on every
call. That graph is the FP32 reference (`runtime="tensorflow"`).

Runtime and precision, chosen by measuring (one thread, AMD EPYC with AVX-512 BF16, per face at batch 8 / batch 1):
TensorFlow FP32 13.5 / 20.6 ms; TensorFlow under Keras' mixed_bfloat16 policy 10.7 / 21.0 ms (1.3x at batch 8,
none for a lone face); OpenVINO (the same graph converted at start-up) FP32 11.4 / 13.4 ms and bf16 6.2 / 7.7 ms
(2.2x / 2.7x), every embedding within cosine 0.9997 of TensorFlow FP32's. So `runtime="openvino"` is the default,
in bf16 where the CPU computes bfloat16 natively (AVX-512 BF16 or AMX; elsewhere it would be emulated, slower than
FP32, and `auto` keeps FP32).

`runtime="cuda"` runs the same graph on an NVIDIA GPU: converted to ONNX at start-up (tf2onnx) and run by ONNX
Runtime's CUDA provider, in FP32. It needs the optional `gpu` extra and a GPU; asked for without either, it is a
one-line error, never a silent fallback to the CPU. Not measured on a GPU yet (none was lent to the session that
wrote it); `aitax calibrate identify --runtime cuda` measures it where there is one.
"""

from __future__ import annotations

import logging
from pathlib import Path

import h5py
import keras
import numpy as np
import tensorflow as tf
from keras import layers

from common.errors import UserError
from pipeline.assets import sha256_of

log = logging.getLogger(__name__)

FACE_SIZE = 160
EMBEDDING_SIZE = 128
PRECISIONS = ("auto", "fp32", "bf16")
RUNTIMES = ("openvino", "tensorflow", "cuda")
CUDA_PROVIDER = "CUDAExecutionProvider"
GPU_EXTRA = "pip install -e '.[gpu]' (ONNX Runtime with CUDA, tf2onnx)"
_BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
_BN_EPSILON = 0.001
_BN_MOMENTUM = 0.995


class ScaleSum(layers.Layer):
    """The residual connection of Inception-ResNet: shortcut + scale * residual."""

    def __init__(self, scale: float, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.scale = scale

    def call(self, inputs: list[tf.Tensor]) -> tf.Tensor:
        shortcut, residual = inputs
        return shortcut + residual * self.scale


def _conv_bn(x: tf.Tensor, filters: int, kernel: int | tuple[int, int], name: str, strides: int = 1,
             padding: str = "same") -> tf.Tensor:
    x = layers.Conv2D(filters, kernel, strides=strides, padding=padding, use_bias=False, name=name)(x)
    x = layers.BatchNormalization(axis=3, momentum=_BN_MOMENTUM, epsilon=_BN_EPSILON, scale=False,
                                  name=f"{name}_BatchNorm")(x)
    return layers.Activation("relu", name=f"{name}_Activation")(x)


def _residual_block(x: tf.Tensor, branches: list[tf.Tensor], name: str, scale: float, activate: bool) -> tf.Tensor:
    mixed = layers.Concatenate(axis=3, name=f"{name}_Concatenate")(branches)
    up = layers.Conv2D(x.shape[-1], 1, padding="same", use_bias=True, name=f"{name}_Conv2d_1x1")(mixed)
    x = ScaleSum(scale, name=f"{name}_ScaleSum")([x, up])
    return layers.Activation("relu", name=f"{name}_Activation")(x) if activate else x


def _block35(x: tf.Tensor, name: str) -> tf.Tensor:
    branch_0 = _conv_bn(x, 32, 1, f"{name}_Branch_0_Conv2d_1x1")
    branch_1 = _conv_bn(x, 32, 1, f"{name}_Branch_1_Conv2d_0a_1x1")
    branch_1 = _conv_bn(branch_1, 32, 3, f"{name}_Branch_1_Conv2d_0b_3x3")
    branch_2 = _conv_bn(x, 32, 1, f"{name}_Branch_2_Conv2d_0a_1x1")
    branch_2 = _conv_bn(branch_2, 32, 3, f"{name}_Branch_2_Conv2d_0b_3x3")
    branch_2 = _conv_bn(branch_2, 32, 3, f"{name}_Branch_2_Conv2d_0c_3x3")
    return _residual_block(x, [branch_0, branch_1, branch_2], name, scale=0.17, activate=True)


def _block17(x: tf.Tensor, name: str) -> tf.Tensor:
    branch_0 = _conv_bn(x, 128, 1, f"{name}_Branch_0_Conv2d_1x1")
    branch_1 = _conv_bn(x, 128, 1, f"{name}_Branch_1_Conv2d_0a_1x1")
    branch_1 = _conv_bn(branch_1, 128, (1, 7), f"{name}_Branch_1_Conv2d_0b_1x7")
    branch_1 = _conv_bn(branch_1, 128, (7, 1), f"{name}_Branch_1_Conv2d_0c_7x1")
    return _residual_block(x, [branch_0, branch_1], name, scale=0.1, activate=True)


def _block8(x: tf.Tensor, name: str, scale: float = 0.2, activate: bool = True) -> tf.Tensor:
    branch_0 = _conv_bn(x, 192, 1, f"{name}_Branch_0_Conv2d_1x1")
    branch_1 = _conv_bn(x, 192, 1, f"{name}_Branch_1_Conv2d_0a_1x1")
    branch_1 = _conv_bn(branch_1, 192, (1, 3), f"{name}_Branch_1_Conv2d_0b_1x3")
    branch_1 = _conv_bn(branch_1, 192, (3, 1), f"{name}_Branch_1_Conv2d_0c_3x1")
    return _residual_block(x, [branch_0, branch_1], name, scale=scale, activate=activate)


def _mixed_6a(x: tf.Tensor) -> tf.Tensor:
    branch_0 = _conv_bn(x, 384, 3, "Mixed_6a_Branch_0_Conv2d_1a_3x3", strides=2, padding="valid")
    branch_1 = _conv_bn(x, 192, 1, "Mixed_6a_Branch_1_Conv2d_0a_1x1")
    branch_1 = _conv_bn(branch_1, 192, 3, "Mixed_6a_Branch_1_Conv2d_0b_3x3")
    branch_1 = _conv_bn(branch_1, 256, 3, "Mixed_6a_Branch_1_Conv2d_1a_3x3", strides=2, padding="valid")
    branch_2 = layers.MaxPooling2D(3, strides=2, padding="valid", name="Mixed_6a_Branch_2_MaxPool_1a_3x3")(x)
    return layers.Concatenate(axis=3, name="Mixed_6a")([branch_0, branch_1, branch_2])


def _mixed_7a(x: tf.Tensor) -> tf.Tensor:
    branch_0 = _conv_bn(x, 256, 1, "Mixed_7a_Branch_0_Conv2d_0a_1x1")
    branch_0 = _conv_bn(branch_0, 384, 3, "Mixed_7a_Branch_0_Conv2d_1a_3x3", strides=2, padding="valid")
    branch_1 = _conv_bn(x, 256, 1, "Mixed_7a_Branch_1_Conv2d_0a_1x1")
    branch_1 = _conv_bn(branch_1, 256, 3, "Mixed_7a_Branch_1_Conv2d_1a_3x3", strides=2, padding="valid")
    branch_2 = _conv_bn(x, 256, 1, "Mixed_7a_Branch_2_Conv2d_0a_1x1")
    branch_2 = _conv_bn(branch_2, 256, 3, "Mixed_7a_Branch_2_Conv2d_0b_3x3")
    branch_2 = _conv_bn(branch_2, 256, 3, "Mixed_7a_Branch_2_Conv2d_1a_3x3", strides=2, padding="valid")
    branch_3 = layers.MaxPooling2D(3, strides=2, padding="valid", name="Mixed_7a_Branch_3_MaxPool_1a_3x3")(x)
    return layers.Concatenate(axis=3, name="Mixed_7a")([branch_0, branch_1, branch_2, branch_3])


def build_inception_resnet_v1() -> keras.Model:
    """The FaceNet network with the layer names of `facenet_keras.h5`; output: the (unnormalised) 128-D bottleneck."""
    inputs = keras.Input(shape=(FACE_SIZE, FACE_SIZE, 3), name="input_1")
    x = _conv_bn(inputs, 32, 3, "Conv2d_1a_3x3", strides=2, padding="valid")
    x = _conv_bn(x, 32, 3, "Conv2d_2a_3x3", padding="valid")
    x = _conv_bn(x, 64, 3, "Conv2d_2b_3x3")
    x = layers.MaxPooling2D(3, strides=2, name="MaxPool_3a_3x3")(x)
    x = _conv_bn(x, 80, 1, "Conv2d_3b_1x1", padding="valid")
    x = _conv_bn(x, 192, 3, "Conv2d_4a_3x3", padding="valid")
    x = _conv_bn(x, 256, 3, "Conv2d_4b_3x3", strides=2, padding="valid")
    for index in range(1, 6):
        x = _block35(x, f"Block35_{index}")
    x = _mixed_6a(x)
    for index in range(1, 11):
        x = _block17(x, f"Block17_{index}")
    x = _mixed_7a(x)
    for index in range(1, 6):
        x = _block8(x, f"Block8_{index}")
    x = _block8(x, "Block8_6", scale=1.0, activate=False)
    x = layers.GlobalAveragePooling2D(name="AvgPool")(x)
    x = layers.Dropout(0.2, name="Dropout")(x)  # inert at inference; kept so the graph matches the trained one
    x = layers.Dense(EMBEDDING_SIZE, use_bias=False, name="Bottleneck")(x)
    outputs = layers.BatchNormalization(momentum=_BN_MOMENTUM, epsilon=_BN_EPSILON, scale=False,
                                        name="Bottleneck_BatchNorm")(x)
    return keras.Model(inputs, outputs, name="inception_resnet_v1")


def _stored_weights(weights: Path) -> dict[str, dict[str, np.ndarray]]:
    """{layer name: {weight name ('kernel', 'beta', ...): array}} for every layer of the h5 that has weights."""
    try:
        with h5py.File(weights, "r") as file:
            group = file.get("model_weights", file)  # a `save_weights` file has no model_weights group
            stored: dict[str, dict[str, np.ndarray]] = {}
            for raw_layer in group.attrs["layer_names"]:
                layer_name = raw_layer.decode() if isinstance(raw_layer, bytes) else str(raw_layer)
                layer_group = group[layer_name]
                arrays = {}
                for raw_weight in layer_group.attrs["weight_names"]:
                    weight_name = raw_weight.decode() if isinstance(raw_weight, bytes) else str(raw_weight)
                    # 'Block35_1_Conv2d_1x1/kernel:0' -> 'kernel'
                    arrays[weight_name.rsplit("/", 1)[-1].split(":", 1)[0]] = np.asarray(layer_group[weight_name])
                if arrays:
                    stored[layer_name] = arrays
            return stored
    except (OSError, KeyError) as error:
        raise UserError(f"{weights}: not a readable Keras h5 weights file ({error})") from None


def load_h5_weights(model: keras.Model, weights: Path) -> int:
    """Assign every weighted layer of `model` its arrays from the h5, by layer and weight name; return how many
    layers were loaded. Any layer or weight missing on either side, or shaped differently, is a UserError, raised
    before anything is assigned so a model is never left half-loaded."""
    stored = _stored_weights(weights)
    weighted_layers = [layer for layer in model.layers if layer.weights]
    unused = set(stored) - {layer.name for layer in weighted_layers}
    if unused:
        raise UserError(f"{weights}: {len(unused)} layers have no place in the model, e.g. {sorted(unused)[0]}")
    assignments = []
    for layer in weighted_layers:
        arrays = stored.get(layer.name)
        if arrays is None:
            raise UserError(f"{weights}: no weights for layer {layer.name}")
        names = sorted(variable.name for variable in layer.weights)
        if names != sorted(arrays):
            raise UserError(f"{weights}: layer {layer.name} has weights {sorted(arrays)}, the model expects {names}")
        for variable in layer.weights:
            array = arrays[variable.name]
            if tuple(variable.shape) != array.shape:
                raise UserError(f"{weights}: {layer.name}/{variable.name} is shaped {array.shape}, the model "
                                f"expects {tuple(variable.shape)}")
            assignments.append((variable, array))
    for variable, array in assignments:
        variable.assign(array)
    return len(weighted_layers)


def set_tf_threads(intra_op: int, inter_op: int) -> None:
    """TensorFlow's thread pools are per process and fixed once the runtime starts: set them before the first op.
    If something already started it with other values, say so instead of failing."""
    config = tf.config.threading
    try:
        config.set_intra_op_parallelism_threads(intra_op)
        config.set_inter_op_parallelism_threads(inter_op)
    except RuntimeError:
        log.warning("TensorFlow already started with %d intra-op / %d inter-op threads (0: one per core); "
                    "asked for %d / %d", config.get_intra_op_parallelism_threads(),
                    config.get_inter_op_parallelism_threads(), intra_op, inter_op)


def _prewhiten(faces: tf.Tensor) -> tf.Tensor:
    """Per-image standardisation the model was trained with: (x - mean) / max(std, 1 / sqrt(pixel count))."""
    x = tf.cast(faces, tf.float32)
    mean, variance = tf.nn.moments(x, axes=[1, 2, 3], keepdims=True)
    floor = 1.0 / np.sqrt(FACE_SIZE * FACE_SIZE * 3)
    return (x - mean) / tf.maximum(tf.sqrt(variance), floor)


def cpu_has_bf16(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether this CPU computes bfloat16 natively (Linux's flags for AVX-512 BF16 and AMX)."""
    try:
        flags = next((line.split(":", 1)[1].split() for line in cpuinfo.read_text().splitlines()
                      if line.startswith("flags")), [])
    except OSError:
        return False
    return any(flag in flags for flag in _BF16_CPU_FLAGS)


def resolve_precision(precision: str, has_bf16: bool, runtime: str = "openvino") -> str:
    """`auto` -> bf16 where the CPU has it (through OpenVINO), else fp32; an impossible choice is an error."""
    if precision not in PRECISIONS:
        raise UserError(f"--precision {precision!r}: expected one of {', '.join(PRECISIONS)}")
    if runtime not in RUNTIMES:
        raise UserError(f"--runtime {runtime!r}: expected one of {', '.join(RUNTIMES)}")
    if precision == "auto":
        return "bf16" if has_bf16 and runtime == "openvino" else "fp32"
    if precision == "bf16" and not has_bf16:
        raise UserError("--precision bf16: this CPU has neither AVX-512 BF16 nor AMX; bf16 would be emulated and "
                        "slower than fp32 (use auto or fp32)")
    if precision == "bf16" and runtime != "openvino":
        raise UserError(f"--precision bf16 runs through --runtime openvino (--runtime {runtime} computes in FP32)")
    return precision


class FaceEmbedder:
    """160x160 RGB uint8 faces -> L2-normalised 128-D float32 embeddings, in `precision` through `runtime` (see the
    module)."""

    def __init__(self, weights: Path, intra_op_threads: int = 1, inter_op_threads: int = 1,
                 precision: str = "auto", runtime: str = "openvino") -> None:
        set_tf_threads(intra_op_threads, inter_op_threads)  # the paper gives each container one core
        self.precision = resolve_precision(precision, cpu_has_bf16(), runtime)
        self.runtime = runtime
        self.model = build_inception_resnet_v1()
        self.loaded_layers = load_h5_weights(self.model, weights)
        self.weights_sha256 = sha256_of(weights)  # galleries record it: embeddings of other weights do not compare
        self._embed = tf.function(
            lambda faces: self._forward(faces, self.model),
            input_signature=[tf.TensorSpec([None, FACE_SIZE, FACE_SIZE, 3], tf.uint8)],  # any batch, one trace
        )
        self._request = None
        self._session = self.onnx_session([CUDA_PROVIDER]) if runtime == "cuda" else None
        if runtime == "openvino":
            try:
                self._request = self._compile(intra_op_threads)
            except (ImportError, RuntimeError) as error:
                # OpenVINO is a speed-up, never a requirement: a CPU or container it cannot run on keeps identify
                # working in TensorFlow FP32 (printed at start-up and recorded in every identify event).
                log.warning("OpenVINO could not run FaceNet here (%s): TensorFlow FP32 instead",
                            str(error).strip().splitlines()[-1][:300] if str(error).strip() else type(error).__name__)
                self.runtime, self.precision = "tensorflow", "fp32"

    def _compile(self, threads: int):
        """FaceNet through OpenVINO, one inference run before it is trusted."""
        import openvino

        # No pinning: OpenVINO pins each process's inference threads to the same first cores, so two identify
        # processes on this 2-core machine shared one core (each 0.5 core, twice the wall time per batch).
        compiled = openvino.Core().compile_model(openvino.convert_model(self._embed), "CPU", {
            "INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY", "ENABLE_CPU_PINNING": False,
            "INFERENCE_PRECISION_HINT": {"fp32": "f32", "bf16": "bf16"}[self.precision]})
        request = compiled.create_infer_request()
        request.infer({0: np.zeros((1, FACE_SIZE, FACE_SIZE, 3), np.uint8)})
        return request

    def onnx_session(self, providers: list[str]):
        """FaceNet converted to ONNX, in an ONNX Runtime session on `providers`; a missing extra or provider is a
        UserError naming what to install."""
        try:
            import onnxruntime
            import tf2onnx
        except ImportError as error:
            raise UserError(f"--runtime cuda needs the optional gpu extra ({error.name} is missing): {GPU_EXTRA}") \
                from None
        available = onnxruntime.get_available_providers()
        missing = [provider for provider in providers if provider not in available]
        if missing:
            raise UserError(f"--runtime cuda: ONNX Runtime here has no {missing[0]} (it has {', '.join(available)}); "
                            f"on a machine with an NVIDIA GPU and CUDA: {GPU_EXTRA}")
        graph, _ = tf2onnx.convert.from_function(
            tf.function(lambda faces: self._forward(faces, self.model)),
            input_signature=[tf.TensorSpec([None, FACE_SIZE, FACE_SIZE, 3], tf.uint8)], opset=17)
        session = onnxruntime.InferenceSession(graph.SerializeToString(), providers=providers)
        session.run(None, {session.get_inputs()[0].name: np.zeros((1, FACE_SIZE, FACE_SIZE, 3), np.uint8)})
        return session

    @staticmethod
    def _forward(faces: tf.Tensor, model: keras.Model) -> tf.Tensor:
        features = model(_prewhiten(faces), training=False)
        return tf.math.l2_normalize(features, axis=1)

    def embed(self, faces_rgb: np.ndarray) -> np.ndarray:
        """A batch (N, 160, 160, 3) of uint8 RGB faces -> (N, 128) float32 unit vectors."""
        if faces_rgb.ndim != 4 or faces_rgb.shape[1:] != (FACE_SIZE, FACE_SIZE, 3) or faces_rgb.dtype != np.uint8:
            raise ValueError(f"expected uint8 faces shaped (N, {FACE_SIZE}, {FACE_SIZE}, 3), got "
                             f"{faces_rgb.dtype} {faces_rgb.shape}")
        if len(faces_rgb) == 0:
            return np.zeros((0, EMBEDDING_SIZE), np.float32)
        if self._request is not None:
            return self._request.infer({0: faces_rgb})[0].copy()  # the request reuses its output buffer
        if self._session is not None:
            return self._session.run(None, {self._session.get_inputs()[0].name: faces_rgb})[0]
        return self._embed(tf.constant(faces_rgb)).numpy()
