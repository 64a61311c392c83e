"""Face detection with YuNet (OpenCV Zoo's, run by OpenCV's `FaceDetectorYN`): the choice beside MTCNN, on the CPU.

MTCNN is the paper's detector and the default. On held-out footage (`benchmarks/heldout_video.py`: blur, noise,
flicker, faces half covered) most of what tracks could not name was faces MTCNN never found (a 45 px face walking
for 5 s, ONet at 0.5-0.8 in the frames it saw it at all); YuNet, one network over the whole frame, named 99.1% of
the enrolled appearances of seeds 77-82 by track where MTCNN named 93.6%, for two thirds of MTCNN's CPU a frame
(`SMALLEST_FACE_PX`). It is not the default because its crops put a stranger who resembles Madonna above the
threshold in 21 of 56 frames where MTCNN's keep her below it (at most 0.496 against 0.519): on the 8 hard videos
of the README, 85 of 721 stranger appearances named by track against 0 (docs/tracks.md). Its boxes come with the
same five landmarks, so thumbnails are aligned as MTCNN's are."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from aitax.pipeline.detect import Detection
from aitax.telemetry.timing import Stopwatch

# A face's confidence to start a track. OpenCV Zoo's demo uses 0.9; 0.6 is the one value measured here (0-7 false
# detections in 400 frames of held-out seeds 53-58, which identify calls unknown); 0.9 was not compared.
DEFAULT_SCORE_THRESHOLD = 0.6
NMS_THRESHOLD = 0.3  # OpenCV Zoo's
# A hint (where a track expects its face) is answered by the frame's own pass, which YuNet makes at every scale
# anyway; `look` (an earlier frame) runs it on the hint's neighbourhood only. A face below the new-face threshold
# but above this one continues a track (ByteTrack's low-score boxes), as MTCNN's follow threshold does.
DEFAULT_FOLLOW_THRESHOLD = 0.4
HINT_IOU = 0.3  # a low-score face continues the hint it overlaps this much
# YuNet looks at the frame scaled so that the pipeline's smallest face is this many pixels (never enlarged): its
# finest anchors are 10-24 px. A 40 px face at 960x540 is then seen at 648x364, for 20 ms a frame on one core against
# 35 at 960x540 (MTCNN: 30). Measured on held-out seeds 53-61, named by track: 98.3% of enrolled appearances at 27 px,
# 98.9% at 960x540, 97.6% at 20 px (9 ms; faces of 48-57 px then go unseen); MTCNN 96.3% (docs/tracks.md).
# Thumbnails are cut from the full frame all the same.
SMALLEST_FACE_PX = 27


class YuNetDetector:
    """YuNet on one RGB frame at a time, on `threads` OpenCV threads; the same `detect`, `look` and `largest` as
    `FaceDetector` (MTCNN), so the detect loop and its tracks take either (enrollment stays with MTCNN)."""

    def __init__(self, model: Path, min_face_size: int = 20, score_threshold: float = DEFAULT_SCORE_THRESHOLD,
                 follow_threshold: float = DEFAULT_FOLLOW_THRESHOLD, threads: int = 1) -> None:
        import cv2

        if follow_threshold > score_threshold:
            raise ValueError(f"follow_threshold {follow_threshold} above score_threshold {score_threshold}")
        cv2.setNumThreads(threads)  # process-wide: a detect process is given its cores for detection
        self.min_face_size = min_face_size
        self._scale = min(1.0, SMALLEST_FACE_PX / min_face_size) if min_face_size > 0 else 1.0  # never enlarged
        self.score_threshold = score_threshold
        self.follow_threshold = follow_threshold
        # created at the follow threshold: the new-face threshold is applied here, so hints can see below it
        self._network = cv2.FaceDetectorYN.create(str(model), "", (320, 320), follow_threshold, NMS_THRESHOLD, 5000)
        self._size: tuple[int, int] = (0, 0)

    def _all(self, rgb: np.ndarray, watch: Stopwatch) -> list[Detection]:
        """Every face in `rgb` at or above the follow threshold, `hinted` where below the new-face threshold."""
        import cv2

        height, width = rgb.shape[:2]
        size = (max(1, round(width * self._scale)), max(1, round(height * self._scale)))
        with watch.time("tf_support"):  # the input's preparation, named as MTCNN's is
            if size != self._size:
                self._network.setInputSize(size)
                self._size = size
            scaled = rgb if size == (width, height) else cv2.resize(rgb, size, interpolation=cv2.INTER_AREA)
            bgr = cv2.cvtColor(scaled, cv2.COLOR_RGB2BGR)
        with watch.time("yunet"):
            _, faces = self._network.detect(bgr)
        detections = []
        with watch.time("numpy"):
            for row in faces if faces is not None else ():
                row = row.copy()
                row[:14] *= np.array([width / size[0], height / size[1]] * 7, np.float32)  # back to `rgb`'s pixels
                x, y, w, h = (float(v) for v in row[:4])
                left, top = max(0, round(x)), max(0, round(y))
                right, bottom = min(width, round(x + w)), min(height, round(y + h))
                # YuNet looks at every size; faces well under the pipeline's smallest are left out, as MTCNN does
                # not look for them. By height: MTCNN's smallest face is a square's side, and YuNet's boxes are
                # narrower than tall (judged by width, 4% of the enrolled faces of held-out seeds 65-70 were left
                # out, most of 37-45 px). The 0.8 is a choice; nothing under it was measured.
                if h < self.min_face_size * 0.8 or right - left < 2 or bottom - top < 2:
                    continue
                # YuNet's points: the person's right eye, left eye, nose tip, right and left mouth corner, which
                # is MTCNN's order as seen (left eye in the picture first)
                points = tuple((float(row[4 + 2 * i]), float(row[5 + 2 * i])) for i in range(5))
                score = float(row[14])
                detections.append(Detection((left, top, right - left, bottom - top), score, points,
                                            hinted=score < self.score_threshold))
        return detections

    def detect(self, rgb: np.ndarray, watch: Stopwatch | None = None,
               hints: Sequence[tuple[int, int, int, int]] = ()) -> list[Detection]:
        """The frame's faces: those at the new-face threshold, and below it (down to the follow threshold) those
        that overlap a hint, marked `hinted` (they may continue a track, never start one)."""
        from aitax.pipeline.crop import iou

        found = self._all(rgb, watch if watch is not None else Stopwatch())
        return [face for face in found
                if not face.hinted or any(iou(face.box, hint) >= HINT_IOU for hint in hints)]

    def look(self, rgb: np.ndarray, hints: Sequence[tuple[int, int, int, int]],
             watch: Stopwatch | None = None) -> list[Detection]:
        """Faces at `hints` only (at the follow threshold): where a face found later was in an earlier frame."""
        from aitax.pipeline.crop import iou

        watch = watch if watch is not None else Stopwatch()
        height, width = rgb.shape[:2]
        faces = []
        for hint in hints:  # the hint's neighbourhood only (its size again on every side): not the whole frame
            x, y, w, h = hint
            left, top = max(0, int(x - w)), max(0, int(y - h))
            right, bottom = min(width, int(x + 2 * w)), min(height, int(y + 2 * h))
            if right - left < 2 or bottom - top < 2:
                continue
            for face in self._all(np.ascontiguousarray(rgb[top:bottom, left:right]), watch):
                box = (face.box[0] + left, face.box[1] + top, face.box[2], face.box[3])
                if iou(box, hint) >= HINT_IOU:
                    points = tuple((px + left, py + top) for px, py in face.landmarks)
                    faces.append(Detection(box, face.confidence, points, hinted=face.hinted))
        return faces

    def largest(self, rgb: np.ndarray, min_confidence: float = 0.9) -> Detection | None:
        """The biggest confident face."""
        detections = [d for d in self.detect(rgb) if d.confidence >= min_confidence]
        return max(detections, key=lambda d: d.box[2] * d.box[3], default=None)
