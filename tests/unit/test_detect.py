"""MTCNN's inputs prepared with OpenCV and NumPy give what the package's TensorFlow ops give, and the detector finds
the boxes stock `mtcnn` finds."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from pipeline.crop import iou
from pipeline.detect import FaceDetector, crop_and_resize, normalize, pyramid, scale_pyramid


@pytest.fixture(scope="module")
def frame() -> np.ndarray:
    noise = np.random.default_rng(7).integers(0, 256, (540, 960, 3), dtype=np.uint8)
    return cv2.GaussianBlur(noise, (7, 7), 3)  # image-like: neighbouring pixels correlate


def test_pyramid_matches_tensorflows_area_resize(frame: np.ndarray) -> None:
    import tensorflow as tf

    scales = scale_pyramid(960, 540, 20)
    levels = pyramid(frame, scales)
    assert len(levels) == len(scales)
    for scale, level in zip(scales, levels, strict=True):
        expected = tf.image.resize(normalize(frame)[None], (int(540 * scale), int(960 * scale)),
                                   method=tf.image.ResizeMethod.AREA).numpy()
        assert level.shape == expected.shape and level.dtype == np.float32
        assert np.abs(level - expected).max() < 1e-3, scale


def test_patches_match_tensorflows_crop_and_resize(frame: np.ndarray) -> None:
    import tensorflow as tf

    # Inside, across every edge, fractional corners, and one larger than the frame: TF samples 0 outside.
    boxes = np.array([[100, 50, 180, 140], [-20, -10, 40, 60], [900, 500, 1000, 560], [10.5, 20.25, 50.75, 61.5],
                      [-100, -100, 1100, 700]], dtype=np.float64)
    for size in (24, 48):
        ours = crop_and_resize(frame, boxes, size)
        yx = boxes[:, [1, 0, 3, 2]] / np.array([540, 960, 540, 960])
        theirs = tf.image.crop_and_resize(normalize(frame)[None], yx, np.zeros(len(boxes), np.int32),
                                          (size, size)).numpy()
        assert ours.shape == (len(boxes), size, size, 3) and ours.dtype == np.float32
        assert np.abs(ours - theirs).max() < 1e-4


def test_boxes_agree_with_stock_mtcnn(assets) -> None:
    from mtcnn import MTCNN

    ours, stock = FaceDetector(min_face_size=20), MTCNN()
    compared = 0
    for photo in sorted(assets.faces_val_dir.glob("*/*.jpg"))[:12]:
        rgb = cv2.cvtColor(cv2.imread(str(photo)), cv2.COLOR_BGR2RGB)
        found = ours.detect(rgb)
        for face in stock.detect_faces(rgb):
            compared += 1
            box = tuple(int(v) for v in face["box"])
            match = max(found, key=lambda d: iou(box, d.box))
            assert iou(box, match.box) >= 0.9, (photo.name, box, found)
            # The same five landmarks, in the same order, within 2 px (stock rounds to whole pixels).
            stock_points = [face["keypoints"][name] for name in
                            ("left_eye", "right_eye", "nose", "mouth_left", "mouth_right")]
            assert np.abs(np.array(match.landmarks) - np.array(stock_points)).max() <= 2, (photo.name, match)
    assert compared >= 12
