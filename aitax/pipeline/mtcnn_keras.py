"""MTCNN's three networks as the `mtcnn` package builds them in TensorFlow (its P/R/O-Net weights ship in its wheel),
converted to OpenVINO. Imported only to make the conversion `pipeline.detect` keeps (`pipeline.openvino_ir`): a
detect process that finds it kept never imports TensorFlow."""

from __future__ import annotations

# Each network's input: PNet scans a whole pyramid level of any size; RNet and ONet take a batch of square patches.
INPUT_SHAPES = {"pnet": (1, -1, -1, 3), "rnet": (-1, 24, 24, 3), "onet": (-1, 48, 48, 3)}


def convert(network: str):
    """The package's `network` ("pnet", "rnet" or "onet") with its weights, as an OpenVINO model. Its outputs keep
    the Keras model's order: PNet (box offsets, face probabilities) per window; RNet (offsets, scores); ONet
    (offsets, landmarks, scores)."""
    import openvino
    from mtcnn.stages import StageONet, StagePNet, StageRNet

    from aitax.pipeline.facenet_keras import set_tf_threads

    set_tf_threads(1, 1)  # as every stage runs TensorFlow: FaceNet's graph, if built next, asks for the same
    stage = {"pnet": StagePNet, "rnet": StageRNet, "onet": StageONet}[network]
    # Its own copy of the weights: by default the model would read them from the Keras model's memory, which is freed
    # once this returns (the networks then computed NaNs).
    return openvino.convert_model(stage()._model, input=[INPUT_SHAPES[network]], share_weights=False)
