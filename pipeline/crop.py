"""Frame and face geometry: the resize ingestion does, and the 160x160 thumbnail crop detection does."""

from __future__ import annotations

import cv2
import numpy as np

THUMBNAIL_SIZE = 160  # FaceNet's input


def resize_frame(frame: np.ndarray, width: int, height: int) -> np.ndarray:
    """Downscale a decoded frame (1920x1080 -> 960x540 by default); INTER_AREA avoids aliasing when shrinking."""
    if frame.shape[1] == width and frame.shape[0] == height:
        return frame
    return cv2.resize(frame, (width, height), interpolation=cv2.INTER_AREA)


def crop_face(rgb: np.ndarray, box: tuple[int, int, int, int], margin: float = 0.2,
              size: int = THUMBNAIL_SIZE) -> np.ndarray:
    """A square crop centred on the box, `margin` of the box's larger side added on each side, resized to
    size x size. Parts outside the frame are black rather than squeezed, so the face keeps its aspect ratio."""
    x, y, width, height = box
    side = round(max(width, height) * (1 + 2 * margin))
    left = x + width // 2 - side // 2
    top = y + height // 2 - side // 2
    frame_height, frame_width = rgb.shape[:2]
    pad_left, pad_top = max(0, -left), max(0, -top)
    pad_right = max(0, left + side - frame_width)
    pad_bottom = max(0, top + side - frame_height)
    region = rgb[max(0, top):min(frame_height, top + side), max(0, left):min(frame_width, left + side)]
    if pad_left or pad_top or pad_right or pad_bottom:
        region = cv2.copyMakeBorder(region, pad_top, pad_bottom, pad_left, pad_right, cv2.BORDER_CONSTANT, value=0)
    interpolation = cv2.INTER_AREA if side > size else cv2.INTER_LINEAR
    return cv2.resize(region, (size, size), interpolation=interpolation)


def iou(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> float:
    """Intersection over union of two (x, y, width, height) boxes."""
    ax2, ay2, bx2, by2 = a[0] + a[2], a[1] + a[3], b[0] + b[2], b[1] + b[3]
    inter_w = max(0, min(ax2, bx2) - max(a[0], b[0]))
    inter_h = max(0, min(ay2, by2) - max(a[1], b[1]))
    intersection = inter_w * inter_h
    union = a[2] * a[3] + b[2] * b[3] - intersection
    return intersection / union if union > 0 else 0.0
