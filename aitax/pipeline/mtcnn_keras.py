"""MTCNN's three networks as the `mtcnn` package builds them in TensorFlow (its P/R/O-Net weights ship in its wheel),
converted to OpenVINO or, for the cuda runtime, to ONNX. Imported only to make the conversions `pipeline.detect` keeps
(`pipeline.openvino_ir`, `pipeline.onnx_models`): a detect process that finds them kept never imports TensorFlow."""

from __future__ import annotations

# Each network's input: PNet scans a whole pyramid level of any size; RNet and ONet take a batch of square patches.
INPUT_SHAPES = {"pnet": (1, -1, -1, 3), "rnet": (-1, 24, 24, 3), "onet": (-1, 48, 48, 3)}


def _keras_model(network: str):
    from mtcnn.stages import StageONet, StagePNet, StageRNet

    from aitax.pipeline.facenet_keras import set_tf_threads

    set_tf_threads(1, 1)  # as every stage runs TensorFlow: FaceNet's graph, if built next, asks for the same
    return {"pnet": StagePNet, "rnet": StageRNet, "onet": StageONet}[network]()._model


def convert(network: str):
    """The package's `network` ("pnet", "rnet" or "onet") with its weights, as an OpenVINO model. Its outputs keep
    the Keras model's order: PNet (box offsets, face probabilities) per window; RNet (offsets, scores); ONet
    (offsets, landmarks, scores)."""
    import openvino

    # Its own copy of the weights: by default the model would read them from the Keras model's memory, which is freed
    # once this returns (the networks then computed NaNs).
    return openvino.convert_model(_keras_model(network), input=[INPUT_SHAPES[network]], share_weights=False)


def to_onnx(network: str) -> bytes:
    """The package's `network` as ONNX (opset 17), with the outputs in `convert`'s order."""
    import tensorflow as tf
    import tf2onnx

    model = _keras_model(network)
    shape = [None if size == -1 else size for size in INPUT_SHAPES[network]]
    signature = [tf.TensorSpec(shape, tf.float32, name="patches")]
    graph, _ = tf2onnx.convert.from_function(tf.function(lambda batch: model(batch, training=False)),
                                             input_signature=signature, opset=17)
    return graph.SerializeToString()
