"""Held-out footage made another way than the project's generator: for judging recognition on inputs nothing was
tuned on.

    .venv/bin/python benchmarks/heldout_video.py --strangers DIR --out held-out.mp4 [--seed 1] [--seconds 40]

`pipeline.synth_video` (what the demo, the tests and `recognition_bench` use) finds faces with MTCNN, moves them
up or down five lanes that never overlap, and degrades each appearance once: every frame of an appearance shows the
same pixels. This one shares none of that:
- faces are located in the photos by OpenCV's Haar cascade (another detector than the pipeline's), and a photo in
  which it finds no single clear face is skipped;
- each appearance walks a straight line in any direction across a 1920x1080 street-like scene, at 3-30 px a frame,
  growing or shrinking up to 1.6x on the way (walking towards or away from the camera); paths cross, and a later
  face is drawn over an earlier one;
- every frame is degraded anew: a sensor's noise, light that flickers and drifts, motion blur along the walk at its
  speed, a defocus that comes and goes, a hand or a scarf over part of the face for a few frames at a time, and the
  whole frame through JPEG at a quality that varies.
Enrolled people come from the 5-celebrity validation split (never enrolled); strangers from `--strangers`, a folder
of photos of people the gallery does not hold (one person per photo unless it holds several faces: each face is its
own stranger). The ground truth is a sidecar `pipeline.synth_video.load_truth` reads (version 3): a face's box is
the Haar box, moved and scaled with the face, for every frame in which at least half of it is in the picture and
not under the pictures pasted after it.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

WIDTH, HEIGHT = 1920, 1080
FPS = 10.0


@dataclass(frozen=True)
class Person:
    identity: str
    enrolled: bool
    image: np.ndarray  # RGB, the face with context around it
    face: tuple[int, int, int, int]  # inside `image`


@dataclass(frozen=True)
class Walk:
    person: Person
    first: int
    last: int
    start: tuple[float, float]  # the face's centre at `first`, px
    velocity: tuple[float, float]  # px a frame
    height: float  # the face's height at `first`, px
    growth: float  # its height at `last` over its height at `first`
    seed: int


def haar_faces(rgb: np.ndarray) -> list[tuple[int, int, int, int]]:
    cascade = cv2.CascadeClassifier(cv2.data.haarcascades + "haarcascade_frontalface_default.xml")
    gray = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
    found = cascade.detectMultiScale(gray, scaleFactor=1.1, minNeighbors=8, minSize=(60, 60))
    return [tuple(int(v) for v in box) for box in found]


def people(folder: Path, enrolled: bool) -> list[Person]:
    """Each enrolled photo's one face, or each clear face of a stranger photo, with context around it."""
    found = []
    photos = sorted(p for p in folder.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg", ".png"))
    for photo in photos:
        bgr = cv2.imread(str(photo), cv2.IMREAD_COLOR)
        if bgr is None:
            continue
        rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
        faces = haar_faces(rgb)
        if enrolled and len(faces) != 1:
            continue  # the label must belong to the one face in the photo
        for number, (x, y, w, h) in enumerate(faces):
            margin = int(0.45 * w)
            left, top = max(0, x - margin), max(0, y - margin)
            right, bottom = min(rgb.shape[1], x + w + margin), min(rgb.shape[0], y + h + int(1.1 * margin))
            identity = photo.parent.name if enrolled else f"stranger-{photo.stem}-{number}"
            found.append(Person(identity, enrolled, np.ascontiguousarray(rgb[top:bottom, left:right]),
                                (x - left, y - top, w, h)))
    return found


def plan(enrolled: list[Person], strangers: list[Person], frames: int, rng: random.Random) -> list[Walk]:
    """Walks starting at random times (about 0.9 faces in the picture on average), 2-6 s each, a third strangers."""
    walks = []
    for first in range(frames):
        if rng.random() < 0.9 / (4 * FPS):
            person = rng.choice(strangers if strangers and rng.random() < 0.33 else enrolled)
            length = int(rng.uniform(2, 6) * FPS)
            speed, angle = rng.uniform(3, 30), rng.uniform(0, 2 * np.pi)
            walks.append(Walk(person, first, min(frames, first + length) - 1,
                              (rng.uniform(250, WIDTH - 250), rng.uniform(200, HEIGHT - 200)),
                              (speed * np.cos(angle), speed * np.sin(angle)), rng.uniform(70, 300),
                              rng.uniform(1 / 1.6, 1.6), rng.randrange(1 << 30)))
    return walks


def scene(rng: random.Random) -> np.ndarray:
    """A street-like backdrop: a sky-to-pavement gradient, building blocks with windows, and sensor grain."""
    frame = np.zeros((HEIGHT, WIDTH, 3), np.float32)
    frame[:] = np.linspace(170, 90, HEIGHT)[:, None, None] * np.array([0.9, 0.95, 1.0])
    for _ in range(14):
        x, w = rng.randrange(WIDTH), rng.randrange(120, 420)
        top = rng.randrange(100, 500)
        colour = [rng.randrange(60, 200) for _ in range(3)]
        cv2.rectangle(frame, (x, top), (x + w, HEIGHT), colour, -1)
        for wy in range(top + 20, HEIGHT - 40, 60):
            for wx in range(x + 15, x + w - 30, 50):
                cv2.rectangle(frame, (wx, wy), (wx + 22, wy + 30), [c * 0.5 for c in colour], -1)
    return np.clip(frame, 0, 255).astype(np.uint8)


def degraded(face: np.ndarray, walk: Walk, index: int) -> np.ndarray:
    """This frame's look of the face: blur along the walk at its speed, a defocus that comes and goes, a hand or a
    scarf for a few frames, and the light of this frame."""
    rng = random.Random(walk.seed * 1000 + index)
    out = face.astype(np.float32)
    speed = float(np.hypot(*walk.velocity))
    length = int(min(15, speed * rng.uniform(0.2, 0.5)))
    if length >= 2:
        kernel = np.zeros((length, length), np.float32)
        direction = np.array(walk.velocity) / max(speed, 1e-6)
        centre = (length - 1) / 2
        for step in np.linspace(-centre, centre, length * 2):
            kernel[round(centre + step * direction[1]), round(centre + step * direction[0])] = 1
        out = cv2.filter2D(out, -1, kernel / kernel.sum())
    phase = (index + walk.seed) % 40
    if phase < 8:  # out of focus for 8 frames in 40
        out = cv2.GaussianBlur(out, (0, 0), 1.0 + phase / 4)
    if (index // 6 + walk.seed) % 7 == 0:  # a hand or a scarf over a third of the face for 6 frames in 42
        h, w = out.shape[:2]
        colour = [rng.randrange(40, 200)] * 3
        if walk.seed % 2:
            cv2.rectangle(out, (0, int(h * 0.62)), (w, int(h * 0.8)), colour, -1)
        else:
            cv2.rectangle(out, (int(w * 0.55), int(h * 0.25)), (int(w * 0.85), int(h * 0.75)), colour, -1)
    gain = 1 + 0.25 * np.sin(index / 9 + walk.seed) + rng.uniform(-0.08, 0.08)
    return np.clip(out * gain, 0, 255)


def render(walks: list[Walk], index: int, backdrop: np.ndarray, rng: random.Random) -> tuple[np.ndarray, list[dict]]:
    frame = backdrop.astype(np.float32)
    truth = []
    drawn: list[tuple[int, int, int, int]] = []  # each picture's rectangle as pasted, in order: opaque
    for walk in walks:
        if not walk.first <= index <= walk.last:
            continue
        progress = (index - walk.first) / max(1, walk.last - walk.first)
        scale = walk.height * (1 + (walk.growth - 1) * progress) / walk.person.face[3]
        image = cv2.resize(walk.person.image, None, fx=scale, fy=scale,
                           interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR)
        fx, fy, fw, fh = (round(v * scale) for v in walk.person.face)
        cx = walk.start[0] + walk.velocity[0] * (index - walk.first)
        cy = walk.start[1] + walk.velocity[1] * (index - walk.first)
        left, top = int(cx - fx - fw / 2), int(cy - fy - fh / 2)
        look = degraded(image, walk, index)
        x0, y0 = max(0, left), max(0, top)
        x1, y1 = min(WIDTH, left + look.shape[1]), min(HEIGHT, top + look.shape[0])
        if x1 <= x0 or y1 <= y0:
            continue
        frame[y0:y1, x0:x1] = look[y0 - top:y1 - top, x0 - left:x1 - left]
        drawn.append((x0, y0, x1, y1))
        box = (left + fx, top + fy, fw, fh)
        visible = max(0, min(WIDTH, box[0] + fw) - max(0, box[0])) * max(0, min(HEIGHT, box[1] + fh) - max(0, box[1]))
        if visible >= 0.5 * fw * fh:
            truth.append(({"identity": walk.person.identity, "enrolled": walk.person.enrolled, "box": list(box)},
                          len(drawn)))
    # A picture pasted later covers the faces under it, the whole of its rectangle (the person's shoulders and the
    # photo's background too, not only its face): a face more than half covered is not in the truth.
    kept = [face for face, after in truth if _covered(face["box"], drawn[after:]) < 0.5]
    frame += np.random.default_rng(rng.randrange(1 << 30)).normal(0, rng.uniform(2, 7), frame.shape)
    return np.clip(frame, 0, 255).astype(np.uint8), kept


def _covered(box: list[int], over: list[tuple[int, int, int, int]]) -> float:
    """The share of `box` (x, y, width, height) under any of the rectangles `over` (x0, y0, x1, y1)."""
    x, y, width, height = box
    mask = np.zeros((max(1, height), max(1, width)), bool)
    for x0, y0, x1, y1 in over:
        mask[max(0, y0 - y):max(0, y1 - y), max(0, x0 - x):max(0, x1 - x)] = True
    return float(mask.mean())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--strangers", type=Path, required=True, help="a folder of photos of people not enrolled")
    parser.add_argument("--enrolled", type=Path, help="a folder per enrolled identity (default: the val split)")
    parser.add_argument("--out", type=Path, required=True, help="the video (.mp4); its sidecar goes beside it")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=40.0)
    args = parser.parse_args()
    from aitax.pipeline.assets import ensure_assets
    from aitax.pipeline.synth_video import SIDE_CAR_VERSION, truth_path

    rng = random.Random(args.seed)
    enrolled = people(args.enrolled or ensure_assets().faces_val_dir, enrolled=True)
    strangers = people(args.strangers, enrolled=False)
    if not enrolled or not strangers:
        print(f"heldout_video: {len(enrolled)} enrolled and {len(strangers)} stranger faces found; need both",
              file=sys.stderr)
        return 1
    frames = int(args.seconds * FPS)
    walks = plan(enrolled, strangers, frames, rng)
    backdrop = scene(rng)
    writer = cv2.VideoWriter(str(args.out), cv2.VideoWriter_fourcc(*"mp4v"), FPS, (WIDTH, HEIGHT))
    truth_frames = []
    for index in range(frames):
        frame, truth = render(walks, index, backdrop, rng)
        quality = rng.randrange(35, 90)
        _, encoded = cv2.imencode(".jpg", cv2.cvtColor(frame, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, quality])
        writer.write(cv2.imdecode(encoded, cv2.IMREAD_COLOR))
        truth_frames.append(truth)
    writer.release()
    faces = [face for frame in truth_frames for face in frame]
    truth_path(args.out).write_text(json.dumps({
        "version": SIDE_CAR_VERSION, "video": args.out.name, "width": WIDTH, "height": HEIGHT, "fps": FPS,
        "frames": truth_frames, "faces_total": len(faces), "generator": "benchmarks/heldout_video.py",
        "seed": args.seed, "stranger_faces_total": sum(not face["enrolled"] for face in faces)}))
    print(f"wrote {args.out}: {len(faces)} faces in {frames} frames ({sum(not f['enrolled'] for f in faces)} of "
          f"strangers), {len(enrolled)} enrolled photos and {len(strangers)} stranger faces to draw from, "
          f"{len(walks)} walks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
