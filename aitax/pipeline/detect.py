"""Face detection with MTCNN from the `mtcnn` package (its P/R/O-Net weights ship in the wheel).

The package's scale pyramid ignores the minimum face size when counting scales: with any `min_face_size`
other than 20 its last scales shrink the frame below PNet's 12x12 input and the whole call returns no faces.
`FaceDetector` runs the package's own three networks with a corrected pyramid and the package's arithmetic, made
cheaper: its eager TensorFlow ops per pyramid level and per stage (with a float64 copy of the frame), and per-call
tensor conversions in its box code, cost more CPU than the three networks. Here the networks' inputs are prepared
from the uint8 frame by compiled kernels (aitax/pipeline/prepare.py), and the box arithmetic is NumPy on plain arrays
(suppression compiled too). Boxes agree with stock `mtcnn` (tests/unit/test_detect.py).

The networks run in OpenVINO, FP32, converted from the package's TensorFlow models once and kept
(`pipeline.mtcnn_keras`, `pipeline.openvino_ir`): a detect process then starts without TensorFlow (its import and
tracing took 11-12 CPU-seconds and 0.9 GB at every start), and PNet's pyramid costs about 3 CPU-ms per 960x540 frame
against TensorFlow's 6-8. On an NVIDIA GPU (`runtime="cuda"`) the same networks run in PyTorch, converted to ONNX
and kept the same way (`pipeline.onnx_models`); the pyramid and box arithmetic stay on the CPU.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numba
import numpy as np

from aitax.common.errors import UserError
from aitax.pipeline.prepare import area_pyramid, patches
from aitax.telemetry.timing import Stopwatch

PNET_INPUT = 12  # PNet's receptive field: a pyramid level smaller than this cannot hold a face
DEFAULT_MIN_FACE_SIZE = 40
# PNet, RNet, ONet: the MTCNN paper's values. ONet's is the confidence a face needs to be sent: a floor of 0.9 above
# it dropped faces whose mouth and nose were covered (ONet gives them 0.75-0.96); without it the hard videos'
# detection recall went from 98.4% to 99.7%, for one false detection in 30 frames, which identify calls unknown.
DEFAULT_THRESHOLDS = (0.6, 0.7, 0.8)
# ONet's confidence for a face found where a track said to look (`FaceDetector.detect`'s hints): lower than a new
# face's, as ByteTrack keeps its low-score boxes for the tracks they continue.
DEFAULT_FOLLOW_THRESHOLD = 0.5


@dataclass(frozen=True)
class Detection:
    box: tuple[int, int, int, int]  # x, y, width, height in frame pixels
    confidence: float
    # ONet's five points in frame pixels: left eye, right eye, nose, left and right mouth corner (as seen)
    landmarks: tuple[tuple[float, float], ...] = ()
    hinted: bool = False  # found only where a hint said to look, below the confidence that starts a face


def scale_pyramid(width: int, height: int, min_face_size: int, scale_factor: float = 0.709) -> list[float]:
    """Scales at which a face of `min_face_size` px maps to PNet's 12 px, down to the smallest level that still
    holds one 12x12 window (the package's version counts levels as if min_face_size were always 20)."""
    if min_face_size < PNET_INPUT:
        raise ValueError(f"min_face_size {min_face_size}: must be at least {PNET_INPUT} px")
    first = PNET_INPUT / min_face_size
    smallest_side = min(width, height) * first
    if smallest_side < PNET_INPUT:
        return []
    levels = math.floor(math.log(PNET_INPUT / smallest_side) / math.log(scale_factor)) + 1
    return [first * scale_factor**level for level in range(levels)]


def level_sizes(width: int, height: int, scales: list[float]) -> tuple[tuple[int, int], ...]:
    """Each pyramid level's (height, width), truncated as the package truncates them."""
    return tuple((int(height * scale), int(width * scale)) for scale in scales)


def pnet_candidates(regression: np.ndarray, probability: np.ndarray, scale: float, threshold: float) -> np.ndarray:
    """One pyramid level's face windows: rows (0, x1, y1, x2, y2, score) in frame pixels, best first. The package's
    `generate_bounding_box` and `upscale_bboxes` (PNet's 12 px window every 2 px, its four offsets in window
    widths), on one level's arrays without its per-call tensor conversions."""
    rows, columns = np.nonzero(probability > threshold)
    scores = probability[rows, columns]
    offsets = regression[rows, columns].T.astype(np.float64)  # the package multiplies in float64
    top, left = rows * 2 + 1, columns * 2 + 1
    window = 11  # the package's 12 px cell measured from its first pixel's centre
    boxes = np.stack([np.zeros(len(rows)), left + offsets[0] * window, top + offsets[1] * window,
                      left + window + offsets[2] * window, top + window + offsets[3] * window, scores], axis=1)
    boxes = boxes[np.argsort(boxes[:, 5])[::-1]]  # the package's descending order, ties included
    boxes[:, 1:5] /= scale
    return boxes


def suppress(boxes: np.ndarray, threshold: float, method: str = "union", sort: bool = True) -> np.ndarray:
    """The package's non-maximum suppression (`smart_nms_from_bboxes` on one image): a box goes when any box ranked
    above it, kept or not, overlaps it by more than `threshold` (IoU over the union, or over the smaller box)."""
    if sort:
        boxes = boxes[np.argsort(boxes[:, 5])[::-1]]
    return boxes[~_beaten(np.ascontiguousarray(boxes[:, 1:5], dtype=np.float64), threshold, method == "union")]


# The package's box arithmetic (mtcnn.utils.bboxes and .landmarks, whose package import starts TensorFlow), on rows
# (image, x1, y1, x2, y2, score[, 10 landmark coordinates]); tests/unit/test_detect.py checks each against it.
def _square(boxes: np.ndarray) -> np.ndarray:
    """Each box grown to a square on its longer side, about its centre (`resize_to_square`)."""
    boxes = boxes.copy()
    height, width = boxes[:, 4] - boxes[:, 2], boxes[:, 3] - boxes[:, 1]
    side = np.maximum(width, height)
    boxes[:, 1] = boxes[:, 1] + width * 0.5 - side * 0.5  # the package's order of operations: equal to the bit
    boxes[:, 2] = boxes[:, 2] + height * 0.5 - side * 0.5
    boxes[:, 3:5] = boxes[:, 1:3] + side[:, None]
    return boxes


def _hint_rows(hints: Sequence[tuple[int, int, int, int]]) -> np.ndarray:
    """Hint boxes (x, y, width, height) as the arithmetic's rows, with no score yet."""
    rows = np.zeros((len(hints), 6))
    rows[:, 1:5] = [(x, y, x + width, y + height) for x, y, width, height in hints]
    return rows


def _rescored(boxes: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """The boxes with a network's face scores (its last column) as their confidence (`replace_confidence`)."""
    boxes = boxes.copy()
    boxes[:, 5] = scores[:, -1]
    return boxes


def _offset(boxes: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """A network's corner offsets applied in box widths and heights, counted inclusively (`adjust_bboxes`)."""
    boxes = boxes.copy()
    width, height = boxes[:, 3] - boxes[:, 1] + 1, boxes[:, 4] - boxes[:, 2] + 1
    boxes[:, 1:5] += offsets * np.stack([width, height, width, height], axis=-1)
    return boxes


def _landmarks_in_frame(landmarks: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """ONet's five points, given in fractions of the boxes it was shown, in frame pixels (`adjust_landmarks`)."""
    landmarks = landmarks.copy()
    width, height = boxes[:, 3:4] - boxes[:, 1:2] + 1, boxes[:, 4:5] - boxes[:, 2:3] + 1
    landmarks[:, 0:5] = width * landmarks[:, 0:5] + boxes[:, 1:2] - 1
    landmarks[:, 5:10] = height * landmarks[:, 5:10] + boxes[:, 2:3] - 1
    return landmarks


def _inside(boxes: np.ndarray, width: int, height: int) -> np.ndarray:
    """The boxes' corners clipped to the frame; landmarks left as they are (`limit_bboxes`)."""
    boxes = boxes.copy()
    boxes[:, [1, 3]] = np.clip(boxes[:, [1, 3]], 0, width - 1)
    boxes[:, [2, 4]] = np.clip(boxes[:, [2, 4]], 0, height - 1)
    return boxes


@numba.njit(nogil=True, error_model="numpy")
def _beaten(corners: np.ndarray, threshold: float, over_union: bool) -> np.ndarray:
    """Which boxes (x1, y1, x2, y2 rows, best first) a box ranked above overlaps by more than `threshold`: the
    package's pairwise arithmetic, operation for operation, without its n x n matrices (a 0/0 ratio beats no box)."""
    count = corners.shape[0]
    areas = (corners[:, 2] - corners[:, 0]) * (corners[:, 3] - corners[:, 1])
    beaten = np.zeros(count, np.bool_)
    for j in range(count):
        for i in range(j):
            width = max(0.0, min(corners[i, 2], corners[j, 2]) - max(corners[i, 0], corners[j, 0]))
            height = max(0.0, min(corners[i, 3], corners[j, 3]) - max(corners[i, 1], corners[j, 1]))
            overlap = width * height
            ratio = overlap / (areas[i] + areas[j] - overlap) if over_union else overlap / min(areas[i], areas[j])
            if ratio > threshold:
                beaten[j] = True
                break
    return beaten


RUNTIMES = ("openvino", "cuda")


def _made_from() -> bytes:
    """What a conversion is keyed by: the package's version, which pins its weights, and the conversion's source."""
    import importlib.metadata

    from aitax.pipeline import mtcnn_keras

    return f"mtcnn {importlib.metadata.version('mtcnn')} ".encode() + Path(mtcnn_keras.__file__).read_bytes()


def mtcnn_networks() -> dict:
    """The package's three networks as OpenVINO models, converted once and then read from where they are kept."""
    from aitax.pipeline import mtcnn_keras
    from aitax.pipeline.openvino_ir import kept_conversion

    return {network: kept_conversion("mtcnn-openvino", network, _made_from(), partial(mtcnn_keras.convert, network))
            for network in mtcnn_keras.INPUT_SHAPES}


def mtcnn_onnx(network: str) -> bytes:
    """One of the package's networks as ONNX, for the cuda runtime, converted once and kept."""
    from aitax.pipeline import mtcnn_keras
    from aitax.pipeline.onnx_models import kept_onnx

    return kept_onnx("mtcnn-onnx", network, _made_from(), partial(mtcnn_keras.to_onnx, network))


def _outputs(compiled, batch: np.ndarray) -> list[np.ndarray]:
    """One network call: its outputs in the Keras model's order (copies: the next call reuses the buffers)."""
    return list(compiled(batch).values())


class FaceDetector:
    """MTCNN on one RGB frame at a time, on `threads` CPU threads (default one: the paper gives each container a core).

    `detect` times its parts into a Stopwatch: the three networks (the AI the paper accelerates), their input
    preparation (the pyramid and the patches: `tf_support`, named for the TensorFlow ops it replaced) and NumPy box
    arithmetic."""

    def __init__(self, min_face_size: int = DEFAULT_MIN_FACE_SIZE,
                 thresholds: tuple[float, float, float] = DEFAULT_THRESHOLDS,
                 frame_size: tuple[int, int] | None = None, threads: int = 1,
                 follow_threshold: float = DEFAULT_FOLLOW_THRESHOLD, runtime: str = "openvino",
                 device: str = "cuda", conversions: Path | None = None) -> None:
        """`frame_size` (width, height): the size of a stream's frames; PNet is then compiled for each of its pyramid
        levels' shapes, a little faster than the one compilation for any shape that frames of other sizes (photos)
        take. `runtime`: openvino on the CPU, or cuda (PyTorch on `device`, a GPU unless a test asks for the CPU;
        one PNet module takes every level's shape), from `conversions` (a calibration bundle) where given, else the
        conversions kept beside the downloads."""
        if min_face_size < PNET_INPUT:
            raise ValueError(f"min_face_size {min_face_size}: must be at least {PNET_INPUT} px")
        if runtime not in RUNTIMES:
            raise UserError(f"--runtime {runtime!r}: expected one of {', '.join(RUNTIMES)}")
        self.min_face_size = min_face_size
        self.thresholds = thresholds
        self.follow_threshold = follow_threshold
        self.runtime = runtime
        self._stream_sizes: tuple[tuple[int, int], ...] = ()
        self._pnet_levels: list = []
        sizes = ()
        if frame_size is not None:
            width, height = frame_size
            sizes = level_sizes(width, height, scale_pyramid(width, height, min_face_size))
        # FP32, as the package computes: a confidence near a threshold must not flip on rounding.
        if runtime == "cuda":
            from aitax.pipeline.onnx_models import TorchNetwork, bundled_conversion

            self._pnet_any, self._rnet, self._onet = (
                TorchNetwork(partial(mtcnn_onnx, name) if conversions is None else
                             partial(bundled_conversion, conversions, name), device, threads)
                for name in ("pnet", "rnet", "onet"))
            self._pnet_levels = [self._pnet_any] * len(sizes)
        else:
            from aitax.pipeline.openvino_ir import compile_on_cpu

            networks = mtcnn_networks()
            self._pnet_any, self._rnet, self._onet = (compile_on_cpu(networks[name], threads)
                                                      for name in ("pnet", "rnet", "onet"))
            for level_height, level_width in sizes:
                level = networks["pnet"].clone()
                level.reshape([1, level_height, level_width, 3])
                self._pnet_levels.append(compile_on_cpu(level, threads))
        if frame_size is not None:
            self._stream_sizes = sizes
            self._warm(*frame_size)

    def _warm(self, width: int, height: int) -> None:
        """Run everything a stream's frames use once, so that no frame's time includes a first call's set-up (RNet
        and ONet for one box and for several) or Numba's compilation."""
        frame = np.zeros((height, width, 3), np.uint8)
        for network, level in zip(self._pnet_levels, area_pyramid(frame, self._stream_sizes), strict=True):
            _outputs(network, level)
        suppress(np.zeros((2, 6)), 0.5)
        for boxes in (1, 2):
            for size, network in ((24, self._rnet), (48, self._onet)):
                _outputs(network, patches(frame, np.zeros((boxes, 4)), size))

    def detect(self, rgb: np.ndarray, watch: Stopwatch | None = None,
               hints: Sequence[tuple[int, int, int, int]] = ()) -> list[Detection]:
        """The frame's faces. `hints` (x, y, width, height): where faces followed from earlier frames are expected
        (a tracker's predictions). Each is shown to RNet and ONet beside PNet's proposals, whatever PNet made of it
        (PNet, which sees the whole frame at 12 px, misses a clear face that a frame earlier it found), and is exempt
        from RNet's threshold: only ONet judges it, at `follow_threshold`. A face so found is `hinted`: it may
        continue a track, never start one (ByteTrack's rule for its low-score detections)."""
        watch = watch if watch is not None else Stopwatch()
        height, width = rgb.shape[:2]
        scales = scale_pyramid(width, height, self.min_face_size)
        if not scales:
            return []
        sizes = level_sizes(width, height, scales)
        pnets = self._pnet_levels if sizes == self._stream_sizes else [self._pnet_any] * len(sizes)
        with watch.time("tf_support"):
            frame = np.ascontiguousarray(rgb)
            levels = area_pyramid(frame, sizes)
        with watch.time("pnet"):
            pnet_outputs = [_outputs(network, level) for network, level in zip(pnets, levels, strict=True)]
        with watch.time("numpy"):
            per_scale = [suppress(pnet_candidates(regression[0], probability[0, :, :, 1], scale, self.thresholds[0]),
                                  0.5, sort=False)
                         for (regression, probability), scale in zip(pnet_outputs, scales, strict=True)]
            boxes = _square(suppress(np.concatenate(per_scale), 0.7))
            if len(hints):
                boxes = np.concatenate([_square(_hint_rows(hints)), boxes])
        return self._refined(frame, boxes, len(hints), watch)

    def look(self, rgb: np.ndarray, hints: Sequence[tuple[int, int, int, int]],
             watch: Stopwatch | None = None) -> list[Detection]:
        """Faces at `hints` only, judged as `detect` judges a hint (RNet and ONet, at `follow_threshold`), without
        PNet's look at the whole frame: where a face found later was in an earlier frame."""
        watch = watch if watch is not None else Stopwatch()
        if not len(hints):
            return []
        with watch.time("numpy"):
            boxes = _square(_hint_rows(hints))
        return self._refined(np.ascontiguousarray(rgb), boxes, len(hints), watch)

    def _refined(self, frame: np.ndarray, boxes: np.ndarray, hinted: int, watch: Stopwatch) -> list[Detection]:
        """RNet and ONet on the proposals `boxes`, the first `hinted` of them hints (exempt from RNet's threshold,
        judged by ONet at `follow_threshold`): the frame's faces."""
        height, width = frame.shape[:2]
        if len(boxes):  # RNet refines the proposals
            with watch.time("tf_support"):
                rnet_input = patches(frame, boxes[:, 1:5], 24)
            with watch.time("rnet"):
                offsets, scores = _outputs(self._rnet, rnet_input)
            with watch.time("numpy"):
                boxes = _offset(_rescored(boxes, scores), offsets)
                boxes[:, 0] = np.arange(len(boxes)) < hinted  # column 0 (the image) marks a hint from here on
                boxes = boxes[(boxes[:, 5] > self.thresholds[1]) | (boxes[:, 0] > 0)]
                boxes = _square(suppress(boxes, 0.7))
        if len(boxes):  # ONet gives the final boxes, confidences and landmarks (columns 6-15: x1..x5, y1..y5)
            with watch.time("tf_support"):
                onet_input = patches(frame, boxes[:, 1:5], 48)
            with watch.time("onet"):
                offsets, landmarks, scores = _outputs(self._onet, onet_input)
            with watch.time("numpy"):
                landmarks = _landmarks_in_frame(landmarks, boxes)  # ONet's are relative to the boxes it was given
                boxes = np.concatenate([_offset(_rescored(boxes, scores), offsets), landmarks], axis=-1)
                boxes = boxes[(boxes[:, 5] > self.thresholds[2])
                              | ((boxes[:, 0] > 0) & (boxes[:, 5] > self.follow_threshold))]
                boxes = suppress(boxes, 0.7, method="min")
        detections = []
        if len(boxes):
            with watch.time("numpy"):
                boxes = _inside(boxes, width, height)
                for row in boxes:
                    x1, y1, x2, y2 = (round(float(v)) for v in row[1:5])
                    if x2 - x1 >= 2 and y2 - y1 >= 2:
                        points = tuple((float(x), float(y)) for x, y in zip(row[6:11], row[11:16], strict=True))
                        detections.append(Detection((x1, y1, x2 - x1, y2 - y1), float(row[5]), points,
                                                    hinted=bool(row[5] <= self.thresholds[2])))
        return detections

    def largest(self, rgb: np.ndarray, min_confidence: float = 0.9) -> Detection | None:
        """The biggest confident face: enrollment photos and test-video sprites hold one person each."""
        detections = [d for d in self.detect(rgb) if d.confidence >= min_confidence]
        return max(detections, key=lambda d: d.box[2] * d.box[3], default=None)
