"""What a camera does to a face: the degradations test videos and impostor calibration apply, drawn per view.

An `Augmentation` gives the ranges; each appearance of a face (in a test video, or a calibration view) draws its
own `Look` from them, and `degrade` applies it around the face so the face's box still holds.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

import cv2
import numpy as np

from aitax.pipeline.crop import iou


@dataclass(frozen=True)
class Augmentation:
    """The ranges each appearance draws its look from (zero: off)."""

    face_height: tuple[int, int] = (150, 260)  # px at 1920x1080
    rotation_deg: float = 0.0  # roll, up to +- this
    brightness: float = 0.0  # gain 1 +- this
    blur_sigma: float = 0.0  # Gaussian blur up to this sigma, in px of the composed frame
    motion_px: int = 0  # horizontal motion blur up to this length
    jpeg_quality: int = 0  # the face re-encoded at a quality from this to 95 (0: never)
    occlusion: float = 0.0  # probability that a bar hides the lower third of the face (a scarf, a hand)
    textured: bool = False  # a cluttered scene instead of a smooth gradient


AUGMENTATIONS = {
    "none": Augmentation(),
    # What a held-out camera does to faces: 100-430 px, +-8 degrees, +-30% light, blur, compression, occlusion.
    "hard": Augmentation(face_height=(100, 430), rotation_deg=8.0, brightness=0.3, blur_sigma=2.0, motion_px=9,
                         jpeg_quality=30, occlusion=0.1, textured=True),
    # The same camera further away: faces 40-200 px (20-100 at 960x540), what a smallest face of 20-40 is about.
    "small": Augmentation(face_height=(40, 200), rotation_deg=8.0, brightness=0.3, blur_sigma=2.0, motion_px=9,
                          jpeg_quality=30, occlusion=0.1, textured=True),
}


@dataclass(frozen=True)
class Look:
    """How one appearance is degraded (drawn from an Augmentation)."""

    rotation_deg: float = 0.0
    gain: float = 1.0
    blur_sigma: float = 0.0
    motion_px: int = 0
    jpeg_quality: int = 0
    occluded: bool = False

    @classmethod
    def draw(cls, augmentation: Augmentation, rng: random.Random) -> Look:
        a = augmentation
        return cls(rotation_deg=rng.uniform(-a.rotation_deg, a.rotation_deg),
                   gain=rng.uniform(1 - a.brightness, 1 + a.brightness),
                   blur_sigma=rng.choice([0.0, rng.uniform(0, a.blur_sigma)]) if a.blur_sigma else 0.0,
                   motion_px=rng.choice([0, rng.randint(0, a.motion_px)]) if a.motion_px else 0,
                   jpeg_quality=rng.randint(a.jpeg_quality, 95) if a.jpeg_quality else 0,
                   occluded=rng.random() < a.occlusion)


def degrade(sprite: np.ndarray, face_box: tuple[int, ...], look: Look) -> np.ndarray:
    """The sprite as this appearance's camera sees it (the face stays where it was: the truth box holds)."""
    x, y, w, h = face_box
    if look.rotation_deg:
        turn = cv2.getRotationMatrix2D((x + w / 2, y + h / 2), look.rotation_deg, 1.0)
        sprite = cv2.warpAffine(sprite, turn, (sprite.shape[1], sprite.shape[0]), borderMode=cv2.BORDER_REFLECT)
    if look.gain != 1.0:
        sprite = cv2.convertScaleAbs(sprite, alpha=look.gain)
    if look.occluded:
        sprite = sprite.copy()
        cv2.rectangle(sprite, (x - w // 8, y + h * 2 // 3), (x + w + w // 8, y + h + h // 4), (70, 60, 55), -1)
    if look.blur_sigma >= 0.3:
        sprite = cv2.GaussianBlur(sprite, (0, 0), look.blur_sigma)
    if look.motion_px >= 2:
        sprite = cv2.filter2D(sprite, -1, np.full((1, look.motion_px), 1.0 / look.motion_px, np.float32))
    if look.jpeg_quality:
        ok, encoded = cv2.imencode(".jpg", sprite, [cv2.IMWRITE_JPEG_QUALITY, look.jpeg_quality])
        sprite = cv2.imdecode(encoded, cv2.IMREAD_UNCHANGED) if ok else sprite
    return sprite


Box = tuple[int, int, int, int]


def camera_views(rgb: np.ndarray, box: Box, augmentation: Augmentation, views: int, rng: random.Random,
                 frame_scale: float = 0.5) -> Iterator[tuple[np.ndarray, Box]]:
    """The photo as `views` cameras would show it to the pipeline: the face scaled to a drawn height (in the
    1080p video, times `frame_scale` for the 960x540 frames detection sees), then degraded by a drawn Look;
    each with the face's box in it."""
    x, y, w, h = box
    for _ in range(views):
        scale = rng.randint(*augmentation.face_height) * frame_scale / h
        scaled = cv2.resize(rgb, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA if scale < 1 else
                            cv2.INTER_LINEAR)
        scaled_box = (round(x * scale), round(y * scale), max(1, round(w * scale)), max(1, round(h * scale)))
        yield degrade(scaled, scaled_box, Look.draw(augmentation, rng)), scaled_box


def best_match(boxes: list[Box], box: Box, minimum_iou: float = 0.3) -> int | None:
    """The index of the box overlapping `box` most, if it overlaps at least `minimum_iou`."""
    overlaps = [iou(candidate, box) for candidate in boxes]
    if not overlaps or max(overlaps) < minimum_iou:
        return None
    return int(np.argmax(overlaps))
