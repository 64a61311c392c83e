"""A test video with known answers: real face photos moving over a 1920x1080 scene, plus a ground-truth sidecar.

Faces come from a folder per identity (the 5-celebrity validation split: never the enrolled images) and, with
`strangers`, from photos of people who are not enrolled (their faces must come out "unknown"). Each photo's face
is located once with MTCNN so the sidecar holds the face's box, not the photo's. Faces per frame range over 0-5
and average about 0.64, like the paper's video. An `Augmentation` makes it as hard as real footage: each
appearance draws its own size, roll, light, blur, motion blur, JPEG quality and occlusion, over a textured scene.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

from aitax.common.errors import UserError
from aitax.pipeline.degrade import AUGMENTATIONS, Augmentation, Look, degrade

WIDTH, HEIGHT = 1920, 1080
LANES = 5  # faces never overlap: each lane holds at most one
# P(k faces at once), k = 0..5: mean 0.64 (the paper's video: 0-5 faces, 0.64 on average)
CONCURRENCY_WEIGHTS = (0.64, 0.19, 0.10, 0.04, 0.02, 0.01)
TARGET_FACES_PER_FRAME = 0.64
# 2: each face says whether its person is enrolled; the augmentation is recorded. 3: a face's box is the part of it
# in the picture (a sprite wider than its lane is cut around the face)
SIDE_CAR_VERSION = 3
STRANGER_SHARE = 0.3  # of appearances, when strangers are given


@dataclass(frozen=True)
class Sprite:
    identity: str
    source: str
    image: np.ndarray  # RGB, the face with context around it
    face_box: tuple[int, int, int, int]  # the face inside `image`
    enrolled: bool = True  # False: a stranger, whose right answer is "unknown"


def truth_path(video: Path) -> Path:
    return video.with_suffix(".truth.json")


def _cut(rgb: np.ndarray, box: tuple[int, int, int, int]) -> tuple[np.ndarray, tuple[int, int, int, int]]:
    """The face with some hair and shoulders around it, as a camera would see; its box inside the cut."""
    x, y, w, h = box
    side = int(max(w, h) * 1.6)
    left, top = max(0, x + w // 2 - side // 2), max(0, y + h // 2 - side // 2)
    return np.ascontiguousarray(rgb[top:top + side, left:left + side]), (x - left, y - top, w, h)


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
            if box is not None:
                sprites.append(Sprite(folder.name, str(photo), *_cut(rgb, box)))
    if not sprites:
        raise UserError(f"--faces {faces_dir}: no face found in any photo")
    return sprites


def load_strangers(strangers_dir: Path, find_faces, enrolled: set[str]) -> list[Sprite]:
    """A sprite per face of a person who is not enrolled (see `pipeline.gallery.stranger_faces`)."""
    from aitax.pipeline.gallery import stranger_faces

    sprites = [Sprite(person, str(photo), *_cut(rgb, face.box), enrolled=False)
               for person, photo, rgb, face in stranger_faces(strangers_dir, find_faces, enrolled, "--strangers")]
    if not sprites:
        raise UserError(f"--strangers {strangers_dir}: no face found in any photo")
    return sprites


def background(frame_index: int, texture: np.ndarray | None = None) -> np.ndarray:
    """A slowly shifting gradient: a scene that changes without looking like faces; or a cluttered `texture`
    panning slowly, as a camera sees a street."""
    if texture is not None:
        return np.roll(texture, (frame_index * 2) % WIDTH, axis=1)
    shift = (frame_index * 3) % WIDTH
    ramp = ((np.arange(WIDTH) + shift) % WIDTH * 255 // WIDTH).astype(np.uint8)
    frame = np.empty((HEIGHT, WIDTH, 3), np.uint8)
    frame[:, :, 0] = ramp // 3 + 40
    frame[:, :, 1] = (np.arange(HEIGHT, dtype=np.uint16) * 120 // HEIGHT + 60).astype(np.uint8)[:, None]
    frame[:, :, 2] = 110
    return frame


def texture(rng: random.Random) -> np.ndarray:
    """Clutter: rectangles and lines of random colours over noise, blurred like a lens would."""
    generator = np.random.default_rng(rng.randrange(2**32))
    scene = generator.integers(40, 200, (HEIGHT // 8, WIDTH // 8, 3), dtype=np.uint8)
    scene = cv2.resize(scene, (WIDTH, HEIGHT), interpolation=cv2.INTER_CUBIC)
    for _ in range(120):
        x, y = rng.randrange(WIDTH), rng.randrange(HEIGHT)
        colour = tuple(rng.randrange(256) for _ in range(3))
        if rng.random() < 0.6:
            cv2.rectangle(scene, (x, y), (x + rng.randrange(20, 300), y + rng.randrange(20, 300)), colour, -1)
        else:
            cv2.line(scene, (x, y), (rng.randrange(WIDTH), rng.randrange(HEIGHT)), colour, rng.randrange(1, 8))
    return cv2.GaussianBlur(scene, (0, 0), 1.5)


@dataclass(frozen=True)
class Appearance:
    sprite: Sprite
    lane: int
    first_frame: int
    last_frame: int
    face_height: int
    y_start: int
    y_end: int
    look: Look = field(default_factory=Look)


def plan(sprites: list[Sprite], frames: int, fps: float, rng: random.Random,
         augmentation: Augmentation = AUGMENTATIONS["none"], strangers: list[Sprite] | None = None) -> list[Appearance]:
    """Segments of 1.5-4 s, each with 0-5 faces in distinct lanes, moving down or up across the frame; with
    `strangers`, about STRANGER_SHARE of the faces are theirs."""
    appearances, frame = [], 0
    while frame < frames:
        length = int(rng.uniform(1.5, 4.0) * fps)
        count = rng.choices(range(len(CONCURRENCY_WEIGHTS)), weights=CONCURRENCY_WEIGHTS)[0]
        for lane in rng.sample(range(LANES), count):
            face_height = rng.randint(*augmentation.face_height)
            y_start, y_end = rng.randint(60, 400), rng.randint(60, 400)
            pool = strangers if strangers and rng.random() < STRANGER_SHARE else sprites
            appearances.append(Appearance(rng.choice(pool), lane, frame, min(frames, frame + length) - 1,
                                          face_height, y_start, y_end, Look.draw(augmentation, rng)))
        frame += length
    return appearances


def faces_per_frame(appearances: list[Appearance], frames: int) -> float:
    return sum(a.last_frame - a.first_frame + 1 for a in appearances) / frames


def plan_near_target(sprites: list[Sprite], frames: int, fps: float, seed: int, tolerance: float = 0.04,
                     attempts: int = 500, augmentation: Augmentation = AUGMENTATIONS["none"],
                     strangers: list[Sprite] | None = None) -> list[Appearance]:
    """A short video's random schedule can stray far from the target mean: take the first of a deterministic
    series of schedules within `tolerance` of it, or the closest one. The series of one seed never meets another
    seed's (seed, then "seed/1", "seed/2", ...: strings seed deterministically), so seeds 1001 and 1002 are two
    videos, not one schedule found twice."""
    candidates = (plan(sprites, frames, fps, random.Random(seed if attempt == 0 else f"{seed}/{attempt}"),
                       augmentation, strangers)
                  for attempt in range(attempts))
    best: list[Appearance] = []
    for candidate in candidates:
        error = abs(faces_per_frame(candidate, frames) - TARGET_FACES_PER_FRAME)
        if not best or error < abs(faces_per_frame(best, frames) - TARGET_FACES_PER_FRAME):
            best = candidate
        if error <= tolerance:
            break
    return best


Box = tuple[int, int, int, int]


def _as_seen(a: Appearance) -> tuple[np.ndarray, Box]:
    """The appearance's sprite at its size and with its look (the same in every frame it is in), cut to its lane
    around the face, and the face's box in it."""
    scale = a.face_height / a.sprite.face_box[3]
    sprite = cv2.resize(a.sprite.image, None, fx=scale, fy=scale,
                        interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR)
    box = tuple(round(v * scale) for v in a.sprite.face_box)
    return fit_around_face(degrade(sprite, box, a.look), box, WIDTH // LANES - 8, HEIGHT - 1)


def fit_around_face(sprite: np.ndarray, box: Box, width: int, height: int) -> tuple[np.ndarray, Box]:
    """The sprite cut to at most `width` x `height`, centred on the face where it must be cut, and the face's box
    in the cut, clipped to what stays in the picture: the truth holds the face that is seen. (Cutting from the
    top left instead once hid a large face's right side while the truth still held all of it.)"""
    x, y, w, h = box
    left = min(max(0, x + w // 2 - width // 2), max(0, sprite.shape[1] - width))
    top = min(max(0, y + h // 2 - height // 2), max(0, sprite.shape[0] - height))
    cut = sprite[top:top + height, left:left + width]
    x0, y0 = max(0, x - left), max(0, y - top)
    x1, y1 = min(cut.shape[1], x - left + w), min(cut.shape[0], y - top + h)
    return cut, (x0, y0, max(0, x1 - x0), max(0, y1 - y0))


def render(appearances: list[Appearance], frame_index: int, scene: np.ndarray | None = None,
           seen: dict[int, tuple[np.ndarray, Box]] | None = None) -> tuple[np.ndarray, list[dict]]:
    """One frame and its truth. `seen` keeps each appearance's sprite from its first frame to its last: resizing
    and degrading it again in every frame would give the same pixels."""
    frame = background(frame_index, scene)
    truth = []
    lane_width = WIDTH // LANES
    seen = {} if seen is None else seen
    for a in appearances:
        if not a.first_frame <= frame_index <= a.last_frame:
            seen.pop(id(a), None)
            continue
        if id(a) not in seen:
            seen[id(a)] = _as_seen(a)
        sprite, (fx, fy, fw, fh) = seen[id(a)]
        progress = (frame_index - a.first_frame) / max(1, a.last_frame - a.first_frame)
        top = int(a.y_start + (a.y_end - a.y_start) * progress)
        top = min(top, HEIGHT - sprite.shape[0])
        left = a.lane * lane_width + (lane_width - sprite.shape[1]) // 2
        frame[top:top + sprite.shape[0], left:left + sprite.shape[1]] = sprite
        if fw and fh:  # a face cut out of the picture is not in it
            truth.append({"identity": a.sprite.identity, "enrolled": a.sprite.enrolled,
                          "box": [left + fx, top + fy, fw, fh], "source": Path(a.sprite.source).name})
    return frame, truth


def make_video(faces_dir: Path, out: Path, seconds: float, fps: float = 10.0, seed: int = 7,
               progress=None, augment: str = "none", strangers_dir: Path | None = None) -> dict:
    """Write the video and its sidecar; returns the sidecar's summary."""
    from aitax.pipeline.detect import FaceDetector

    if seconds <= 0:
        raise UserError(f"--seconds {seconds}: must be positive")
    if augment not in AUGMENTATIONS:
        raise UserError(f"--augment {augment!r}: expected one of {', '.join(AUGMENTATIONS)}")
    augmentation = AUGMENTATIONS[augment]
    detector = FaceDetector(min_face_size=20)

    def find_largest_face(rgb: np.ndarray) -> tuple[int, int, int, int] | None:
        face = detector.largest(rgb, min_confidence=0.95)
        return None if face is None else face.box

    def find_clear_faces(rgb: np.ndarray) -> list:
        return [d for d in detector.detect(rgb) if d.confidence >= 0.95 and d.box[3] >= 40]

    sprites = load_sprites(faces_dir, find_largest_face)
    strangers = (load_strangers(strangers_dir, find_clear_faces, {s.identity for s in sprites})
                 if strangers_dir else None)
    frames = int(seconds * fps)
    appearances = plan_near_target(sprites, frames, fps, seed, augmentation=augmentation, strangers=strangers)
    scene = texture(random.Random(seed)) if augmentation.textured else None
    out.parent.mkdir(parents=True, exist_ok=True)
    writer = cv2.VideoWriter(str(out), cv2.VideoWriter_fourcc(*"mp4v"), fps, (WIDTH, HEIGHT))
    if not writer.isOpened():
        raise UserError(f"--out {out}: OpenCV cannot write an mp4 there")
    truth_frames = []
    seen: dict[int, np.ndarray] = {}
    try:
        for index in range(frames):
            frame, truth = render(appearances, index, scene, seen)
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
        "sprites": len(sprites), "seed": seed, "augment": augment,
        "strangers": len(strangers or []),
        "stranger_faces_total": sum(not face["enrolled"] for frame in truth_frames for face in frame),
    }
    truth_path(out).write_text(json.dumps(sidecar))
    return {k: v for k, v in sidecar.items() if k != "frames"}


def load_truth(video: Path) -> dict:
    path = truth_path(video)
    try:
        truth = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise UserError(f"{path}: ground truth unreadable ({error})") from None
    if truth.get("version") not in range(1, SIDE_CAR_VERSION + 1) or not isinstance(truth.get("frames"), list):
        raise UserError(f"{path}: not a ground-truth sidecar of version 1 to {SIDE_CAR_VERSION}")
    return truth
