"""Crop, resize and the corrected MTCNN scale pyramid."""

from __future__ import annotations

import itertools

import cv2
import numpy as np
import pytest

from aitax.pipeline.crop import ALIGNED_LANDMARKS, _similarity, align_face, crop_face, face_thumbnail, iou, resize_frame
from aitax.pipeline.detect import PNET_INPUT, scale_pyramid


def test_resize_frame_to_960x540() -> None:
    frame = np.zeros((1080, 1920, 3), np.uint8)
    assert resize_frame(frame, 960, 540).shape == (540, 960, 3)


def test_crop_is_square_160_and_centred() -> None:
    frame = np.zeros((540, 960, 3), np.uint8)
    frame[200:300, 400:480] = 255  # an 80x100 "face"
    thumbnail = crop_face(frame, (400, 200, 80, 100), margin=0.0)
    assert thumbnail.shape == (160, 160, 3)
    # The 100 px side fills the crop; the 80 px side is centred with black on both sides.
    assert thumbnail[80, 80].tolist() == [255, 255, 255]
    assert thumbnail[80, 2].tolist() == [0, 0, 0] and thumbnail[80, 157].tolist() == [0, 0, 0]


def test_crop_at_the_edge_pads_instead_of_squeezing() -> None:
    frame = np.full((540, 960, 3), 200, np.uint8)
    thumbnail = crop_face(frame, (0, 0, 50, 50), margin=0.5)
    assert thumbnail.shape == (160, 160, 3)
    assert thumbnail[0, 0].tolist() == [0, 0, 0]  # outside the frame
    assert thumbnail[100, 100].tolist() == [200, 200, 200]


def test_iou() -> None:
    assert iou((0, 0, 10, 10), (0, 0, 10, 10)) == 1.0
    assert iou((0, 0, 10, 10), (20, 20, 5, 5)) == 0.0
    assert iou((0, 0, 10, 10), (5, 0, 10, 10)) == pytest.approx(50 / 150)


@pytest.mark.parametrize("min_face_size", [20, 40, 80])
def test_pyramid_never_shrinks_below_pnet_input(min_face_size: int) -> None:
    scales = scale_pyramid(960, 540, min_face_size)
    assert scales[0] == pytest.approx(PNET_INPUT / min_face_size)
    assert min(960, 540) * scales[-1] >= PNET_INPUT
    assert min(960, 540) * scales[-1] * 0.709 < PNET_INPUT  # and goes as far down as it can
    assert all(b < a for a, b in itertools.pairwise(scales))


def test_larger_min_face_means_fewer_levels() -> None:
    assert len(scale_pyramid(960, 540, 80)) < len(scale_pyramid(960, 540, 40)) < len(scale_pyramid(960, 540, 20))


def test_pyramid_rejects_faces_smaller_than_pnet() -> None:
    with pytest.raises(ValueError, match="min_face_size 8"):
        scale_pyramid(960, 540, 8)


def test_the_similarity_transform_is_recovered_from_five_points() -> None:
    angle, scale, shift = np.radians(17), 2.5, np.array([40.0, -12.0])
    rotation = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    source = ALIGNED_LANDMARKS.astype(np.float64)
    target = source @ (scale * rotation).T + shift
    np.testing.assert_allclose(_similarity(source, target), np.hstack([scale * rotation, shift[:, None]]), atol=1e-4)


@pytest.mark.parametrize("scale", [0.6, 1.0, 3.0])
def test_alignment_puts_the_landmarks_on_the_template(scale: float) -> None:
    """Dots at a rolled, scaled face's landmarks come out where the template wants them (shrinking included)."""
    angle = np.radians(-12)
    rotation = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    points = ALIGNED_LANDMARKS @ (scale * rotation).T + (150, 170)
    frame = np.zeros((800, 800, 3), np.uint8)
    for x, y in points:
        cv2.circle(frame, (round(x), round(y)), max(2, round(2 * scale)), (255, 255, 255), -1)

    aligned = align_face(frame, [tuple(p) for p in points])

    assert aligned.shape == (160, 160, 3)
    for x, y in ALIGNED_LANDMARKS:
        patch = aligned[round(y) - 2:round(y) + 3, round(x) - 2:round(x) + 3]
        assert patch.max() > 100, (scale, x, y)
    assert aligned[5, 5].max() == 0  # away from the dots: the black frame


def test_without_landmarks_a_thumbnail_is_the_square_crop() -> None:
    frame = np.random.default_rng(1).integers(0, 256, (300, 400, 3), dtype=np.uint8)
    np.testing.assert_array_equal(face_thumbnail(frame, (100, 80, 60, 70)), crop_face(frame, (100, 80, 60, 70)))
