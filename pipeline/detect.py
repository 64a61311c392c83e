"""Face detection with MTCNN from the `mtcnn` package (its P/R/O-Net weights ship in the wheel).

The package's scale pyramid ignores the minimum face size when counting scales: with any `min_face_size`
other than 20 its last scales shrink the frame below PNet's 12x12 input and the whole call returns no faces.
`FaceDetector` runs the package's own three networks and box arithmetic with a corrected pyramid, and prepares
their inputs with OpenCV and NumPy instead of the package's eager TensorFlow ops (a float64 copy of the frame,
one TF resize per pyramid level, TF crop_and_resize per stage), which cost more CPU than the three networks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cv2
import numpy as np

from telemetry.timing import Stopwatch

PNET_INPUT = 12  # PNet's receptive field: a pyramid level smaller than this cannot hold a face
DEFAULT_MIN_FACE_SIZE = 40
DEFAULT_THRESHOLDS = (0.6, 0.7, 0.8)  # PNet, RNet, ONet: the MTCNN paper's values


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


def normalize(pixels: np.ndarray) -> np.ndarray:
    """MTCNN's input range: [0, 255] -> [-1, 1) as float32 (the package's `normalize_images`)."""
    return (pixels.astype(np.float32) - 127.5) * (1 / 128)


def pyramid(rgb: np.ndarray, scales: list[float]) -> list[np.ndarray]:
    """PNet's inputs: the normalised frame at each scale, (1, h, w, 3) float32, by OpenCV area resizes (the
    package's TF AREA resizes; sizes truncated as its are). Resizing the uint8 frame and normalising after would be
    cheaper, but its rounding moved a box by a few pixels (IoU 0.89 against stock) on the demo video."""
    height, width = rgb.shape[:2]
    frame = normalize(rgb)
    return [cv2.resize(frame, (int(width * scale), int(height * scale)), interpolation=cv2.INTER_AREA)[None]
            for scale in scales]


def crop_and_resize(rgb: np.ndarray, boxes: np.ndarray, size: int) -> np.ndarray:
    """RNet's and ONet's inputs: for each box (x1, y1, x2, y2 in frame pixels) a size x size bilinear sample of the
    normalised frame, points outside the frame 0: `tf.image.crop_and_resize` as the package calls it (box corners
    divided by the frame's size, which TF then maps onto pixel positions 0..height-1 and 0..width-1), vectorised
    over the boxes."""
    height, width = rgb.shape[:2]
    steps = np.arange(size) / (size - 1)
    ys = (boxes[:, 1:2] + steps * (boxes[:, 3:4] - boxes[:, 1:2])) * ((height - 1) / height)
    xs = (boxes[:, 0:1] + steps * (boxes[:, 2:3] - boxes[:, 0:1])) * ((width - 1) / width)
    y_floor, x_floor = np.floor(ys), np.floor(xs)
    y0 = np.clip(y_floor, 0, height - 1).astype(np.intp)[:, :, None]
    x0 = np.clip(x_floor, 0, width - 1).astype(np.intp)[:, None, :]
    y1 = np.minimum(y0 + 1, height - 1)
    x1 = np.minimum(x0 + 1, width - 1)
    dy = (ys - y_floor).astype(np.float32)[:, :, None, None]
    dx = (xs - x_floor).astype(np.float32)[:, None, :, None]
    top = normalize(rgb[y0, x0])
    top += (normalize(rgb[y0, x1]) - top) * dx
    bottom = normalize(rgb[y1, x0])
    bottom += (normalize(rgb[y1, x1]) - bottom) * dx
    patches = top + (bottom - top) * dy
    inside = (((ys >= 0) & (ys <= height - 1))[:, :, None] & ((xs >= 0) & (xs <= width - 1))[:, None, :])
    patches[~inside] = 0
    return patches


class FaceDetector:
    """MTCNN on one RGB frame at a time, on the calling thread (the paper gives each container one core).

    `detect` times its parts into a Stopwatch: the three networks (the AI the paper accelerates), their input
    preparation (the pyramid and the patches: `tf_support`, named for what it replaced) and NumPy box arithmetic."""

    def __init__(self, min_face_size: int = DEFAULT_MIN_FACE_SIZE,
                 thresholds: tuple[float, float, float] = DEFAULT_THRESHOLDS) -> None:
        import tensorflow as tf
        from mtcnn.stages import StageONet, StagePNet, StageRNet

        if min_face_size < PNET_INPUT:
            raise ValueError(f"min_face_size {min_face_size}: must be at least {PNET_INPUT} px")
        self.min_face_size = min_face_size
        self.thresholds = thresholds
        # Graph functions instead of eager calls: the per-call Python overhead of eager Keras dominates at
        # PNet's many small pyramid levels. A frame size's levels are traced once, then reused.
        self._pnet, self._rnet, self._onet = (tf.function(stage()._model, reduce_retracing=True)
                                              for stage in (StagePNet, StageRNet, StageONet))

    def detect(self, rgb: np.ndarray, watch: Stopwatch | None = None) -> list[Detection]:
        from mtcnn.utils.bboxes import (
            adjust_bboxes,
            generate_bounding_box,
            limit_bboxes,
            pick_matches,
            replace_confidence,
            resize_to_square,
            smart_nms_from_bboxes,
            upscale_bboxes,
        )
        from mtcnn.utils.landmarks import adjust_landmarks
        watch = watch if watch is not None else Stopwatch()
        height, width = rgb.shape[:2]
        scales = scale_pyramid(width, height, self.min_face_size)
        if not scales:
            return []
        with watch.time("tf_support"):
            levels = pyramid(rgb, scales)
        with watch.time("pnet"):
            pnet_outputs = [self._pnet(level) for level in levels]
        with watch.time("numpy"):
            proposals = [generate_bounding_box(out[0], out[1], self.thresholds[0]) for out in pnet_outputs]
            upscaled = [upscale_bboxes(b, np.asarray([s])) for b, s in zip(proposals, scales, strict=True)]
            per_scale = [smart_nms_from_bboxes(b, threshold=0.5, method="union", initial_sort=False)
                         for b in upscaled]
            boxes = np.concatenate(per_scale, axis=0) if per_scale else np.empty((0, 6))
            boxes = resize_to_square(smart_nms_from_bboxes(boxes, threshold=0.7, method="union", initial_sort=True))
        if len(boxes):  # RNet refines the proposals
            with watch.time("tf_support"):
                patches = crop_and_resize(rgb, boxes[:, 1:5], 24)
            with watch.time("rnet"):
                offsets, scores = self._rnet(patches)
            with watch.time("numpy"):
                boxes = adjust_bboxes(replace_confidence(boxes, scores), offsets)
                boxes = pick_matches(boxes, score_threshold=self.thresholds[1])
                boxes = resize_to_square(smart_nms_from_bboxes(boxes, threshold=0.7, method="union",
                                                               initial_sort=True))
        if len(boxes):  # ONet gives the final boxes, confidences and landmarks (columns 6-15: x1..x5, y1..y5)
            with watch.time("tf_support"):
                patches = crop_and_resize(rgb, boxes[:, 1:5], 48)
            with watch.time("onet"):
                offsets, landmarks, scores = self._onet(patches)
            with watch.time("numpy"):
                landmarks = adjust_landmarks(landmarks, boxes)  # relative to the boxes ONet was given
                boxes = np.concatenate([adjust_bboxes(replace_confidence(boxes, scores), offsets), landmarks], axis=-1)
                boxes = pick_matches(boxes, scores_column=5, score_threshold=self.thresholds[2])
                boxes = smart_nms_from_bboxes(boxes, threshold=0.7, method="min", initial_sort=True)
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
