"""Face detection with MTCNN from the `mtcnn` package (its P/R/O-Net weights ship in the wheel).

The package's scale pyramid ignores the minimum face size when counting scales: with any `min_face_size`
other than 20 its last scales shrink the frame below PNet's 12x12 input and the whole call returns no faces.
`FaceDetector` runs the package's own three networks with a corrected pyramid, and times each network so
the AI share of detection can be reported (the paper's Fig. 8).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

PNET_INPUT = 12  # PNet's receptive field: a pyramid level smaller than this cannot hold a face
DEFAULT_MIN_FACE_SIZE = 40
DEFAULT_THRESHOLDS = (0.6, 0.7, 0.8)  # PNet, RNet, ONet: the MTCNN paper's values


@dataclass(frozen=True)
class Detection:
    box: tuple[int, int, int, int]  # x, y, width, height in frame pixels
    confidence: float


@dataclass
class DetectionTimings:
    """Milliseconds spent in each network, and in everything else detection did around them."""

    pnet_ms: float = 0.0
    rnet_ms: float = 0.0
    onet_ms: float = 0.0
    other_ms: float = 0.0
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def inference_ms(self) -> float:
        return self.pnet_ms + self.rnet_ms + self.onet_ms


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


class FaceDetector:
    """MTCNN on one RGB frame at a time, on the calling thread (the paper gives each container one core)."""

    def __init__(self, min_face_size: int = DEFAULT_MIN_FACE_SIZE,
                 thresholds: tuple[float, float, float] = DEFAULT_THRESHOLDS) -> None:
        from mtcnn.stages import StageONet, StagePNet, StageRNet

        if min_face_size < PNET_INPUT:
            raise ValueError(f"min_face_size {min_face_size}: must be at least {PNET_INPUT} px")
        self.min_face_size = min_face_size
        self.thresholds = thresholds
        self._pnet, self._rnet, self._onet = StagePNet(), StageRNet(), StageONet()

    def detect(self, rgb: np.ndarray) -> tuple[list[Detection], DetectionTimings]:
        from mtcnn.utils.bboxes import (
            generate_bounding_box,
            limit_bboxes,
            resize_to_square,
            smart_nms_from_bboxes,
            upscale_bboxes,
        )
        from mtcnn.utils.images import apply_scales, standarize_batch

        started = time.perf_counter()
        timings = DetectionTimings()
        height, width = rgb.shape[:2]
        scales = scale_pyramid(width, height, self.min_face_size)
        if not scales:
            timings.other_ms = (time.perf_counter() - started) * 1000
            return [], timings
        images, shapes, _ = standarize_batch([rgb], normalize=True)
        scaled_images, scale_index = apply_scales(images, [np.asarray(scales)])

        # PNet over the pyramid: the same steps as the package's StagePNet, with the corrected scales.
        stage_start = time.perf_counter()
        pnet_outputs = [self._pnet._model(image) for image in scaled_images]
        timings.pnet_ms = (time.perf_counter() - stage_start) * 1000
        proposals = [generate_bounding_box(out[0], out[1], self.thresholds[0]) for out in pnet_outputs]
        upscaled = [upscale_bboxes(b, np.asarray([s])) for b, s in zip(proposals, scale_index, strict=True)]
        per_scale = [smart_nms_from_bboxes(b, threshold=0.5, method="union", initial_sort=False) for b in upscaled]
        boxes = np.concatenate(per_scale, axis=0) if per_scale else np.empty((0, 6))
        boxes = resize_to_square(smart_nms_from_bboxes(boxes, threshold=0.7, method="union", initial_sort=True))

        if len(boxes):
            stage_start = time.perf_counter()
            boxes = self._rnet(bboxes_batch=boxes, images_normalized=images, images_oshapes=shapes,
                               threshold_rnet=self.thresholds[1])
            timings.rnet_ms = (time.perf_counter() - stage_start) * 1000
        if len(boxes):
            stage_start = time.perf_counter()
            boxes = self._onet(bboxes_batch=boxes, images_normalized=images, images_oshapes=shapes,
                               threshold_onet=self.thresholds[2])
            timings.onet_ms = (time.perf_counter() - stage_start) * 1000
        detections = []
        if len(boxes):
            boxes = limit_bboxes(boxes, images_shapes=shapes, limit_landmarks=False)
            for row in np.asarray(boxes):
                x1, y1, x2, y2 = (round(float(v)) for v in row[1:5])
                if x2 - x1 >= 2 and y2 - y1 >= 2:
                    detections.append(Detection((x1, y1, x2 - x1, y2 - y1), float(row[5])))
        timings.other_ms = (time.perf_counter() - started) * 1000 - timings.inference_ms
        return detections, timings
