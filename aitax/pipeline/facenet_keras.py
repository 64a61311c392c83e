"""FaceNet in TensorFlow: Inception-ResNet-v1 built in code (after Sandberg's facenet and its Keras port), its
weights read from the h5 with h5py as plain arrays, and the whole computation as one `tf.function`.

Nothing stored in the h5 is executed (`keras.models.load_model` would unmarshal the Lambda layers' Python
bytecode). Layer names match the h5's, so weights are assigned by name and any missing or mis-shaped layer fails
loudly. Prewhitening, the network and L2 normalisation are one `tf.function` for any batch size: on one thread a
single face took 38 ms that way and 125 ms through `model.predict`, which sets up a data pipeline on every call.
That graph is the FP32 reference, and what the other runtimes convert (`pipeline.facenet`).
"""

from __future__ import annotations

import logging
from pathlib import Path

import h5py
import keras
import numpy as np
import tensorflow as tf
from keras import layers

from aitax.common.errors import UserError
from aitax.pipeline.crop import THUMBNAIL_SIZE as FACE_SIZE

log = logging.getLogger(__name__)

_BN_EPSILON = 0.001
_BN_MOMENTUM = 0.995
FACES_SIGNATURE = tf.TensorSpec([None, FACE_SIZE, FACE_SIZE, 3], tf.uint8)  # any batch, one trace


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


def build_inception_resnet_v1(embedding_size: int) -> keras.Model:
    """The FaceNet network with the layer names of `facenet_keras.h5`; output: the (unnormalised) bottleneck."""
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
    x = layers.Dense(embedding_size, use_bias=False, name="Bottleneck")(x)
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


def forward(faces: tf.Tensor, model: keras.Model) -> tf.Tensor:
    return tf.math.l2_normalize(model(_prewhiten(faces), training=False), axis=1)


class FaceNetGraph:
    """The network with its weights, and faces -> embeddings as one `tf.function` (`embed`)."""

    def __init__(self, weights: Path, embedding_size: int, intra_op_threads: int = 1, inter_op_threads: int = 1
                 ) -> None:
        set_tf_threads(intra_op_threads, inter_op_threads)  # the paper gives each container one core
        self.model = build_inception_resnet_v1(embedding_size)
        self.loaded_layers = load_h5_weights(self.model, weights)
        self.embed = tf.function(lambda faces: forward(faces, self.model), input_signature=[FACES_SIGNATURE])
