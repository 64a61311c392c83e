"""Face detection with MTCNN from the `mtcnn` package (its P/R/O-Net weights ship in the wheel).

The package's scale pyramid ignores the minimum face size when counting scales: with any `min_face_size`
other than 20 its last scales shrink the frame below PNet's 12x12 input and the whole call returns no faces.
`FaceDetector` runs the package's own three networks with a corrected pyramid and the package's arithmetic, made
cheaper: its eager TensorFlow ops per pyramid level and per stage (with a float64 copy of the frame), and per-call
tensor conversions in its box code, cost more CPU than the three networks. Here the networks' inputs are prepared
from the uint8 frame by compiled kernels (pipeline/prepare.py), PNet runs on a stream's whole pyramid in one traced
graph call, and the box arithmetic is NumPy on plain arrays (suppression compiled too). Boxes agree with stock `mtcnn`
(tests/unit/test_detect.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numba
import numpy as np

from pipeline.prepare import area_pyramid, patches
from telemetry.timing import Stopwatch

PNET_INPUT = 12  # PNet's receptive field: a pyramid level smaller than this cannot hold a face
DEFAULT_MIN_FACE_SIZE = 40
# PNet, RNet, ONet: the MTCNN paper's values. ONet's is the confidence a face needs to be sent: a floor of 0.9 above
# it dropped faces whose mouth and nose were covered (ONet gives them 0.75-0.96); without it the hard videos'
# detection recall went from 98.4% to 99.7%, for one false detection in 30 frames, which identify calls unknown.
DEFAULT_THRESHOLDS = (0.6, 0.7, 0.8)


@dataclass(frozen=True)
class Detection:
    box: tuple[int, int, int, int]  # x, y, width, height in frame pixels
    confidence: float
    # ONet's five points in frame pixels: left eye, right eye, nose, left and right mouth corner (as seen)
    landmarks: tuple[tuple[float, float], ...] = ()


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


@dataclass(frozen=True)
class _StreamGraph:
    """PNet on every pyramid level of one frame size, in one graph call."""
    sizes: tuple[tuple[int, int], ...]
    pnet: Callable


class FaceDetector:
    """MTCNN on one RGB frame at a time, on the calling thread (the paper gives each container one core).

    `detect` times its parts into a Stopwatch: the three networks (the AI the paper accelerates), their input
    preparation (the pyramid and the patches: `tf_support`, named for what it replaced) and NumPy box arithmetic."""

    def __init__(self, min_face_size: int = DEFAULT_MIN_FACE_SIZE,
                 thresholds: tuple[float, float, float] = DEFAULT_THRESHOLDS,
                 frame_size: tuple[int, int] | None = None) -> None:
        """`frame_size` (width, height): the size of a stream's frames, whose whole pyramid then goes through PNet in
        one graph call traced here, before the first frame. Frames of other sizes (photos) take a relaxed per-level
        graph."""
        import tensorflow as tf
        from mtcnn.stages import StageONet, StagePNet, StageRNet

        if min_face_size < PNET_INPUT:
            raise ValueError(f"min_face_size {min_face_size}: must be at least {PNET_INPUT} px")
        self.min_face_size = min_face_size
        self.thresholds = thresholds
        # Graph functions instead of eager calls: eager ops cost more per call than PNet's small pyramid levels take
        # to compute. Relaxed shapes serve any frame size with a trace or two.
        pnet, rnet, onet = (stage()._model for stage in (StagePNet, StageRNet, StageONet))
        self._pnet_level, self._rnet, self._onet = (tf.function(net, reduce_retracing=True)
                                                    for net in (pnet, rnet, onet))
        self._stream: _StreamGraph | None = None
        if frame_size is not None:
            width, height = frame_size
            sizes = level_sizes(width, height, scale_pyramid(width, height, min_face_size))
            self._stream = _StreamGraph(sizes, tf.function(lambda levels: [pnet(level) for level in levels]))
            self._trace(width, height)

    def _trace(self, width: int, height: int) -> None:
        """Compile and trace everything a stream's frames use, so that no frame's time includes it (RNet and ONet
        twice: their second trace relaxes the number of boxes)."""
        frame = np.zeros((height, width, 3), np.uint8)
        self._stream.pnet(area_pyramid(frame, self._stream.sizes))
        suppress(np.zeros((2, 6)), 0.5)
        for boxes in (1, 2):
            for size, net in ((24, self._rnet), (48, self._onet)):
                net(patches(frame, np.zeros((boxes, 4)), size))

    def detect(self, rgb: np.ndarray, watch: Stopwatch | None = None) -> list[Detection]:
        from mtcnn.utils.bboxes import (
            adjust_bboxes,
            limit_bboxes,
            pick_matches,
            replace_confidence,
            resize_to_square,
        )
        from mtcnn.utils.landmarks import adjust_landmarks
        watch = watch if watch is not None else Stopwatch()
        height, width = rgb.shape[:2]
        scales = scale_pyramid(width, height, self.min_face_size)
        if not scales:
            return []
        sizes = level_sizes(width, height, scales)
        stream = self._stream if self._stream is not None and sizes == self._stream.sizes else None
        with watch.time("tf_support"):
            frame = np.ascontiguousarray(rgb)
            levels = area_pyramid(frame, sizes)
        with watch.time("pnet"):
            pnet_outputs = stream.pnet(levels) if stream else [self._pnet_level(level) for level in levels]
        with watch.time("numpy"):
            per_scale = [suppress(pnet_candidates(regression.numpy()[0], probability.numpy()[0, :, :, 1], scale,
                                                  self.thresholds[0]), 0.5, sort=False)
                         for (regression, probability), scale in zip(pnet_outputs, scales, strict=True)]
            boxes = resize_to_square(suppress(np.concatenate(per_scale), 0.7))
        if len(boxes):  # RNet refines the proposals
            with watch.time("tf_support"):
                rnet_input = patches(frame, boxes[:, 1:5], 24)
            with watch.time("rnet"):
                offsets, scores = (output.numpy() for output in self._rnet(rnet_input))
            with watch.time("numpy"):
                boxes = adjust_bboxes(replace_confidence(boxes, scores), offsets)
                boxes = pick_matches(boxes, score_threshold=self.thresholds[1])
                boxes = resize_to_square(suppress(boxes, 0.7))
        if len(boxes):  # ONet gives the final boxes, confidences and landmarks (columns 6-15: x1..x5, y1..y5)
            with watch.time("tf_support"):
                onet_input = patches(frame, boxes[:, 1:5], 48)
            with watch.time("onet"):
                offsets, landmarks, scores = self._onet(onet_input)
                offsets, scores = offsets.numpy(), scores.numpy()  # landmarks: adjust_landmarks wants a tensor
            with watch.time("numpy"):
                landmarks = adjust_landmarks(landmarks, boxes)  # relative to the boxes ONet was given
                boxes = np.concatenate([adjust_bboxes(replace_confidence(boxes, scores), offsets), landmarks], axis=-1)
                boxes = pick_matches(boxes, scores_column=5, score_threshold=self.thresholds[2])
                boxes = suppress(boxes, 0.7, method="min")
        detections = []
        if len(boxes):
            with watch.time("numpy"):
                boxes = limit_bboxes(boxes, images_shapes=np.asarray([rgb.shape]), limit_landmarks=False)
                for row in np.asarray(boxes):
                    x1, y1, x2, y2 = (round(float(v)) for v in row[1:5])
                    if x2 - x1 >= 2 and y2 - y1 >= 2:
                        points = tuple((float(x), float(y)) for x, y in zip(row[6:11], row[11:16], strict=True))
                        detections.append(Detection((x1, y1, x2 - x1, y2 - y1), float(row[5]), points))
        return detections

    def largest(self, rgb: np.ndarray, min_confidence: float = 0.9) -> Detection | None:
        """The biggest confident face: enrollment photos and test-video sprites hold one person each."""
        detections = [d for d in self.detect(rgb) if d.confidence >= min_confidence]
        return max(detections, key=lambda d: d.box[2] * d.box[3], default=None)
