"""A test video with known answers: real face photos moving over a 1920x1080 scene, plus a ground-truth sidecar.

Faces come from a folder per identity (the 5-celebrity validation split: never the enrolled images). Each
photo's face is located once with MTCNN so the sidecar holds the face's box, not the photo's. Faces per frame
range over 0-5 and average about 0.64, like the paper's video.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from ground.errors import UserError

WIDTH, HEIGHT = 1920, 1080
LANES = 5  # faces never overlap: each lane holds at most one
# P(k faces at once), k = 0..5: mean 0.64 (the paper's video: 0-5 faces, 0.64 on average)
CONCURRENCY_WEIGHTS = (0.64, 0.19, 0.10, 0.04, 0.02, 0.01)
TARGET_FACES_PER_FRAME = 0.64
SIDE_CAR_VERSION = 1


@dataclass(frozen=True)
class Sprite:
    identity: str
    source: str
    image: np.ndarray  # RGB, the face with context around it
    face_box: tuple[int, int, int, int]  # the face inside `image`


def truth_path(video: Path) -> Path:
    return video.with_suffix(".truth.json")


def load_sprites(faces_dir: Path, find_largest_face) -> list[Sprite]:
    """One sprite per photo in which a face is found; a wrong folder layout is a one-line error."""
    if not faces_dir.is_dir():
        raise UserError(f"--faces {faces_dir}: not a folder")
    identities = sorted(p for p in faces_dir.iterdir() if p.is_dir())
    if not identities:
        raise UserError(f"--faces {faces_dir}: expected one sub-folder of photos per identity, found none")
    sprites = []
    for folder in identities:
        for photo in sorted(folder.iterdir()):
            bgr = cv2.imread(str(photo))
            if bgr is None:
                continue
            rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
            box = find_largest_face(rgb)
            if box is None:
                continue
            x, y, w, h = box
            side = int(max(w, h) * 1.6)  # some hair and shoulders around the face, as a camera would see
            left, top = max(0, x + w // 2 - side // 2), max(0, y + h // 2 - side // 2)
            region = rgb[top:top + side, left:left + side]
            sprites.append(Sprite(folder.name, str(photo), np.ascontiguousarray(region), (x - left, y - top, w, h)))
    if not sprites:
        raise UserError(f"--faces {faces_dir}: no face found in any photo")
    return sprites


def background(frame_index: int) -> np.ndarray:
    """A slowly shifting gradient: a scene that changes without looking like faces."""
    shift = (frame_index * 3) % WIDTH
    ramp = ((np.arange(WIDTH) + shift) % WIDTH * 255 // WIDTH).astype(np.uint8)
    frame = np.empty((HEIGHT, WIDTH, 3), np.uint8)
    frame[:, :, 0] = ramp // 3 + 40
    frame[:, :, 1] = (np.arange(HEIGHT, dtype=np.uint16) * 120 // HEIGHT + 60).astype(np.uint8)[:, None]
    frame[:, :, 2] = 110
    return frame


@dataclass(frozen=True)
class Appearance:
    sprite: Sprite
    lane: int
    first_frame: int
    last_frame: int
    face_height: int
    y_start: int
    y_end: int


def plan(sprites: list[Sprite], frames: int, fps: float, rng: random.Random) -> list[Appearance]:
    """Segments of 1.5-4 s, each with 0-5 faces in distinct lanes, moving down or up across the frame."""
    appearances, frame = [], 0
    while frame < frames:
        length = int(rng.uniform(1.5, 4.0) * fps)
        count = rng.choices(range(len(CONCURRENCY_WEIGHTS)), weights=CONCURRENCY_WEIGHTS)[0]
        for lane in rng.sample(range(LANES), count):
            face_height = rng.randint(150, 260)
            y_start, y_end = rng.randint(60, 400), rng.randint(60, 400)
            appearances.append(Appearance(rng.choice(sprites), lane, frame, min(frames, frame + length) - 1,
                                          face_height, y_start, y_end))
        frame += length
    return appearances


def faces_per_frame(appearances: list[Appearance], frames: int) -> float:
    return sum(a.last_frame - a.first_frame + 1 for a in appearances) / frames


def plan_near_target(sprites: list[Sprite], frames: int, fps: float, seed: int, tolerance: float = 0.04,
                     attempts: int = 500) -> list[Appearance]:
    """A short video's random schedule can stray far from the target mean: take the first of a deterministic
    series of schedules (seed, seed+1, ...) within `tolerance` of it, or the closest one."""
    candidates = (plan(sprites, frames, fps, random.Random(seed + attempt)) for attempt in range(attempts))
    best: list[Appearance] = []
    for candidate in candidates:
        error = abs(faces_per_frame(candidate, frames) - TARGET_FACES_PER_FRAME)
        if not best or error < abs(faces_per_frame(best, frames) - TARGET_FACES_PER_FRAME):
            best = candidate
        if error <= tolerance:
            break
    return best


def render(appearances: list[Appearance], frame_index: int) -> tuple[np.ndarray, list[dict]]:
    frame = background(frame_index)
    truth = []
    lane_width = WIDTH // LANES
    for a in appearances:
        if not a.first_frame <= frame_index <= a.last_frame:
            continue
        scale = a.face_height / a.sprite.face_box[3]
        sprite = cv2.resize(a.sprite.image, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
        sprite = sprite[: HEIGHT - 1, : lane_width - 8]
        progress = (frame_index - a.first_frame) / max(1, a.last_frame - a.first_frame)
        top = int(a.y_start + (a.y_end - a.y_start) * progress)
        top = min(top, HEIGHT - sprite.shape[0])
        left = a.lane * lane_width + (lane_width - sprite.shape[1]) // 2
        frame[top:top + sprite.shape[0], left:left + sprite.shape[1]] = sprite
        fx, fy, fw, fh = (round(v * scale) for v in a.sprite.face_box)
        truth.append({"identity": a.sprite.identity, "box": [left + fx, top + fy, fw, fh],
                      "source": Path(a.sprite.source).name})
    return frame, truth


def make_video(faces_dir: Path, out: Path, seconds: float, fps: float = 10.0, seed: int = 7,
               progress=None) -> dict:
    """Write the video and its sidecar; returns the sidecar's summary."""
    from pipeline.detect import FaceDetector

    if seconds <= 0:
        raise UserError(f"--seconds {seconds}: must be positive")
    detector = FaceDetector(min_face_size=20)

    def find_largest_face(rgb: np.ndarray) -> tuple[int, int, int, int] | None:
        face = detector.largest(rgb, min_confidence=0.95)
        return None if face is None else face.box

    sprites = load_sprites(faces_dir, find_largest_face)
    frames = int(seconds * fps)
    appearances = plan_near_target(sprites, frames, fps, seed)
    out.parent.mkdir(parents=True, exist_ok=True)
    writer = cv2.VideoWriter(str(out), cv2.VideoWriter_fourcc(*"mp4v"), fps, (WIDTH, HEIGHT))
    if not writer.isOpened():
        raise UserError(f"--out {out}: OpenCV cannot write an mp4 there")
    truth_frames = []
    try:
        for index in range(frames):
            frame, truth = render(appearances, index)
            writer.write(cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
            truth_frames.append(truth)
            if progress:
                progress(1)
    finally:
        writer.release()
    counts = [len(t) for t in truth_frames]
    sidecar = {
        "version": SIDE_CAR_VERSION, "video": out.name, "width": WIDTH, "height": HEIGHT, "fps": fps,
        "frames": truth_frames, "faces_total": sum(counts), "faces_per_frame_mean": sum(counts) / len(counts),
        "faces_per_frame_max": max(counts), "identities": sorted({s.identity for s in sprites}),
        "sprites": len(sprites), "seed": seed,
    }
    truth_path(out).write_text(json.dumps(sidecar))
    return {k: v for k, v in sidecar.items() if k != "frames"}


def load_truth(video: Path) -> dict:
    path = truth_path(video)
    try:
        truth = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise UserError(f"{path}: ground truth unreadable ({error})") from None
    if truth.get("version") != SIDE_CAR_VERSION or not isinstance(truth.get("frames"), list):
        raise UserError(f"{path}: not a version {SIDE_CAR_VERSION} ground-truth sidecar")
    return truth
