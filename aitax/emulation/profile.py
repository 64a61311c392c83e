"""What the emulator replays: per-stage compute time, thumbnail size and faces-per-frame distributions.

A distribution is a list of (quantile, value) points sampled by inverse-CDF interpolation, so a profile derived
from a real run keeps its tail, not just its mean. The built-in `paper` profile uses the AI-tax paper's means
(Sec. 4.2: ingest 18.8 ms, detect 74.8 ms, identify 131.5 ms per face, 37.3 kB thumbnails) with exactly one
face per frame, as its acceleration experiments did (Sec. 5.3); `paper-video` has the paper video's 0.64 faces
per frame instead. The paper publishes means (and a few p99s), not distributions: its profiles are constants.

`object-detection` is the paper's second application (Sec. 6) on the same loops: ingestion (4.5 ms, 30 FPS, no AI)
sends every frame, whole, and detection (the R-CNN's 687 ms per frame) runs where identify runs for faces. So its
"faces" are frames, exactly one per frame, of the sizes measured on this project's 960x540 frames as JPEG q90.
"""

from __future__ import annotations

import bisect
import itertools
import random
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Literal, TypeVar

import numpy as np
import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    ValidationError,
    field_validator,
)

from aitax.common.errors import UserError, invalid
from aitax.common.paper import OBJECT_DETECTION, PAPER, STREAM_FPS, THUMBNAIL_BYTES, VIDEO_FACES_PER_FRAME
from aitax.runs.applications import application

PROFILE_VERSION = 1
STAGE_NAMES = ("ingest", "detect", "identify")
QUANTILES = (0.0, 0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 1.0)


@dataclass(frozen=True)
class Distribution:
    points: tuple[tuple[float, float], ...]  # (quantile in [0, 1], value), quantiles strictly increasing

    @classmethod
    def constant(cls, value: float) -> Distribution:
        return cls(((0.0, value), (1.0, value)))

    @classmethod
    def from_samples(cls, samples: list[float] | np.ndarray) -> Distribution:
        values = np.quantile(np.asarray(samples, dtype=float), QUANTILES)
        return cls(tuple((q, round(float(v), 4)) for q, v in zip(QUANTILES, values, strict=True)))

    def sample(self, rng: random.Random) -> float:
        u = rng.random()
        quantiles = [q for q, _ in self.points]
        right = min(max(1, bisect.bisect_right(quantiles, u)), len(self.points) - 1)
        (q0, v0), (q1, v1) = self.points[right - 1], self.points[right]
        return v0 if q1 == q0 else v0 + (v1 - v0) * (u - q0) / (q1 - q0)

    def mean(self) -> float:
        """The mean of the piecewise-linear inverse CDF (trapezoids between the points)."""
        return sum((q1 - q0) * (v0 + v1) / 2 for (q0, v0), (q1, v1) in zip(self.points, self.points[1:],
                                                                          strict=False))

    def quantile(self, q: float) -> float:
        quantiles = [p for p, _ in self.points]
        right = min(max(1, bisect.bisect_right(quantiles, q)), len(self.points) - 1)
        (q0, v0), (q1, v1) = self.points[right - 1], self.points[right]
        return v0 if q1 == q0 else v0 + (v1 - v0) * (q - q0) / (q1 - q0)


@dataclass(frozen=True)
class Profile:
    name: str
    compute_ms: dict[str, Distribution]  # per face for identify, per frame for ingest and detect
    thumbnail_bytes: Distribution
    faces_per_frame: dict[int, float]  # face count -> probability
    fps: float = STREAM_FPS  # frames per second per stream
    # object-detection: every frame one "face" of a frame's size, detection where identify stands (the paper's
    # Sec. 6 on Face Recognition's loops); its sweeps print the paper's Object Detection figures
    application: str = "face-recognition"
    # The faces each frame index of the source video held, from a real run: every real stream starts at the
    # video's first frame, so their faces come in the same bursts at the same time (the demo's video has 1.4 faces
    # a frame for 5 s and none for 10). An emulated stream replays it, looped; without it, counts are drawn
    # independently per frame from `faces_per_frame`.
    faces_sequence: tuple[int, ...] | None = None
    # The share of faces whose thumbnail goes through Kafka and is identified: 1 is the paper's (every face); a run
    # with tracks sending a sample (`--send sample:N`) measures less, and the rest go as `tracked` records that
    # identify answers at no compute
    thumbnail_share: float = 1.0

    def mean_faces_per_frame(self) -> float:
        return sum(count * p for count, p in self.faces_per_frame.items())

    def offered_faces_per_s(self, producers: int, factor: float) -> float:
        """What `producers` emulated streams offer at speed-up `factor` (frames come `factor` times faster)."""
        return producers * self.fps * factor * self.mean_faces_per_frame()

    def sample_faces(self, rng: random.Random) -> int:
        counts = list(self.faces_per_frame)
        return rng.choices(counts, weights=[self.faces_per_frame[c] for c in counts])[0]

    def faces_of_frame(self, index: int, rng: random.Random) -> int:
        """The faces frame `index` of a stream holds: the replayed sequence's, or a draw."""
        if self.faces_sequence:
            return self.faces_sequence[index % len(self.faces_sequence)]
        return self.sample_faces(rng)

    def scaled_faces(self, face_scale: float) -> Profile:
        """Thumbnails `face_scale` times the size (the paper's Fig. 15c: 1/2, 1/4, 1/8)."""
        points = tuple((q, max(1.0, v * face_scale)) for q, v in self.thumbnail_bytes.points)
        return replace(self, name=f"{self.name}@faces{face_scale:g}", thumbnail_bytes=Distribution(points))

    def to_yaml(self) -> str:
        document = {
            "version": PROFILE_VERSION, "name": self.name, "application": self.application, "fps": self.fps,
            "compute_ms": {stage: [list(p) for p in d.points] for stage, d in self.compute_ms.items()},
            "thumbnail_bytes": [list(p) for p in self.thumbnail_bytes.points],
            "faces_per_frame": dict(self.faces_per_frame),
        }
        if self.faces_sequence:
            document["faces_sequence"] = list(self.faces_sequence)
        if self.thumbnail_share < 1:
            document["thumbnail_share"] = self.thumbnail_share
        return yaml.safe_dump(document, sort_keys=False, default_flow_style=None, width=120)


def paper_profile(one_face_per_frame: bool = True) -> Profile:
    faces = {1: 1.0} if one_face_per_frame else _faces_averaging(VIDEO_FACES_PER_FRAME)
    return Profile(
        name="paper" if one_face_per_frame else "paper-video",
        compute_ms={stage: Distribution.constant(PAPER.mean_ms[stage]) for stage in ("ingest", "detect", "identify")},
        thumbnail_bytes=Distribution.constant(THUMBNAIL_BYTES),
        faces_per_frame=faces,
    )


# Bytes of a 960x540 frame as JPEG q90, at QUANTILES: the 600 frames of the demo's hard video (cluttered scene).
FRAME_JPEG_BYTES = (130739, 132125, 137330, 137972, 138894, 139670, 140175, 141483, 142252, 142977, 143275, 143343)


def frame_jpeg_bytes() -> Distribution:
    """What a frame weighs on the wire (Object Detection, the three-stage design)."""
    return Distribution(tuple(zip(QUANTILES, map(float, FRAME_JPEG_BYTES), strict=True)))


def object_detection_profile() -> Profile:
    return Profile(
        name="object-detection",
        compute_ms={"ingest": Distribution.constant(OBJECT_DETECTION.ingest_ms), "detect": Distribution.constant(0.0),
                    "identify": Distribution.constant(OBJECT_DETECTION.detect_ms)},
        thumbnail_bytes=frame_jpeg_bytes(),
        faces_per_frame={1: 1.0},
        fps=OBJECT_DETECTION.fps,
        application="object-detection",
    )


def _faces_averaging(mean: float) -> dict[int, float]:
    """0-5 faces per frame with the given mean (the paper's video: 0-5, 0.64 on average)."""
    shape = {1: 0.19, 2: 0.10, 3: 0.04, 4: 0.02, 5: 0.01}
    scale = mean / sum(c * p for c, p in shape.items())
    faces = {c: p * scale for c, p in shape.items()}
    return {0: 1 - sum(faces.values()), **faces}


BUILT_IN = {"paper": lambda: paper_profile(True), "paper-video": lambda: paper_profile(False),
            "object-detection": object_detection_profile}


def _quantile_points(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    quantiles = [q for q, _ in points]
    if len(points) < 2 or quantiles[0] != 0.0 or quantiles[-1] != 1.0:
        raise ValueError("must start at quantile 0 and end at quantile 1")
    if any(b <= a for a, b in itertools.pairwise(quantiles)):
        raise ValueError("quantiles must increase")
    if any(v < 0 for _, v in points) or any(b < a for (_, a), (_, b) in itertools.pairwise(points)):
        raise ValueError("values must be >= 0 and not decrease")
    return points


QuantilePoints = Annotated[list[tuple[float, float]], AfterValidator(_quantile_points)]


class ProfileFile(BaseModel):
    """A profile YAML file (what `aitax profile` writes), validated field by field."""

    model_config = ConfigDict(extra="forbid")
    version: Literal[1]
    name: str
    application: str = "face-recognition"  # runs.applications
    fps: float = Field(STREAM_FPS, gt=0)  # frames per second per stream
    compute_ms: dict[Literal["ingest", "detect", "identify"], QuantilePoints]
    thumbnail_bytes: QuantilePoints
    faces_per_frame: dict[NonNegativeInt, NonNegativeFloat]  # face count -> probability
    faces_sequence: list[NonNegativeInt] | None = Field(None, min_length=1)  # faces per frame index, replayed
    thumbnail_share: float = Field(1.0, gt=0, le=1)  # faces whose thumbnail is sent (Profile.thumbnail_share)

    @field_validator("application")
    @classmethod
    def _known_application(cls, name: str) -> str:
        application(name)
        return name

    @field_validator("compute_ms")
    @classmethod
    def _every_stage(cls, compute: dict[str, list]) -> dict[str, list]:
        missing = [stage for stage in STAGE_NAMES if stage not in compute]
        if missing:
            raise ValueError(f"lacks stage {missing[0]}")
        return compute

    @field_validator("faces_per_frame")
    @classmethod
    def _probabilities(cls, faces: dict[int, float]) -> dict[int, float]:
        if not faces or abs(sum(faces.values()) - 1) > 1e-3:
            raise ValueError("probabilities must sum to 1")
        return faces

    def profile(self) -> Profile:
        return Profile(self.name, {stage: Distribution(tuple(points)) for stage, points in self.compute_ms.items()},
                       Distribution(tuple(self.thumbnail_bytes)), dict(self.faces_per_frame), self.fps,
                       self.application, None if self.faces_sequence is None else tuple(self.faces_sequence),
                       self.thumbnail_share)


def load_profile(name_or_path: str) -> Profile:
    """A built-in name or a YAML file; anything missing or malformed is a one-line error naming it."""
    if name_or_path in BUILT_IN:
        return BUILT_IN[name_or_path]()
    path = Path(name_or_path)
    if not path.is_file():
        raise UserError(f"--profile {name_or_path}: neither a built-in ({', '.join(BUILT_IN)}) nor a file")
    return read_versioned_yaml(path, ProfileFile, "profile", PROFILE_VERSION).profile()


Model = TypeVar("Model", bound=BaseModel)


def read_versioned_yaml(path: Path, model: type[Model], kind: str, version: int) -> Model:
    """A YAML file of `model` at `version`: not YAML, another version or a bad field is one line naming it."""
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise UserError(f"{path}: not YAML ({str(error).splitlines()[0]})") from None
    if isinstance(raw, dict) and raw.get("version") != version:
        raise UserError(f"{path}: {kind} version {raw.get('version')!r}, expected {version}")
    try:
        return model.model_validate(raw)
    except ValidationError as error:
        raise invalid(error, str(path)) from None


def derive_profile(events: list[dict], name: str) -> Profile:
    """A profile from a real run's events: compute time quantiles per stage, thumbnail sizes, faces per frame.
    An Object Detection run (detect events counting objects) gives the `object-detection` layout instead."""
    if any("object_count" in e for e in events if e["stage"] == "detect"):
        return _object_detection_profile(events, name)
    ingest = [e["compute_time_ms"] for e in events if e["stage"] == "ingest"]
    detect = [e for e in events if e["stage"] == "detect"]
    identify = [e["compute_time_ms"] for e in events if e["stage"] == "identify"]
    if not ingest or not detect or not identify:
        raise UserError(f"run has {len(ingest)} ingest, {len(detect)} detect and {len(identify)} identify events: "
                        "a profile needs all three (did the run identify any face?)")
    sizes = [e["data_size_bytes"] for e in events if e["stage"] == "identify" and e.get("data_size_bytes")]
    counts = [e.get("face_count") or 0 for e in detect]
    faces = {int(c): counts.count(c) / len(counts) for c in sorted(set(counts))}
    # A sampled run's identify events without a thumbnail are tracked faces, answered at no compute: the profile
    # keeps their share, and the thumbnails' compute (an event's compute is its batch's per face: a batch mixing
    # both reads a little low)
    thumbnails = [e["compute_time_ms"] for e in events if e["stage"] == "identify" and e.get("data_size_bytes")]
    return Profile(name, {"ingest": Distribution.from_samples(ingest),
                          "detect": Distribution.from_samples([e["compute_time_ms"] for e in detect]),
                          "identify": Distribution.from_samples(thumbnails or identify)},
                   Distribution.from_samples(sizes or [37_300]), faces, faces_sequence=_faces_sequence(detect),
                   thumbnail_share=round(len(thumbnails) / len(identify), 4) if thumbnails else 1.0)


def _faces_sequence(detect: list[dict]) -> tuple[int, ...] | None:
    """Faces per frame index from the first frame on, as the run's streams saw them (they all play the same video
    from its start). None when no stream started at frame 0 (a resumed run) or a frame in between was not seen."""
    by_index: dict[int, int] = {}
    for event in detect:
        if event.get("frame_index") is None:
            return None
        by_index.setdefault(int(event["frame_index"]), int(event.get("face_count") or 0))
    if 0 not in by_index or len(by_index) != max(by_index) + 1:
        return None
    return tuple(by_index[i] for i in range(len(by_index)))


def _object_detection_profile(events: list[dict], name: str) -> Profile:
    """Object Detection laid out as `object_detection_profile`: ingestion's compute, no face detection, the
    detector's time where identification stands, every frame one "face" of its JPEG size, the streams' frame rate."""
    ingest = [e for e in events if e["stage"] == "ingest"]
    detect = [e["compute_time_ms"] for e in events if e["stage"] == "detect"]
    if not ingest or not detect:
        raise UserError(f"run has {len(ingest)} ingest and {len(detect)} detect events: an Object Detection "
                        "profile needs both")
    by_stream: dict[str, list[int]] = {}
    for event in ingest:
        scheduled = event.get("scheduled_ns")  # (v1 events lack it: their start stands in)
        by_stream.setdefault(event["stream_id"], []).append(event["wall_start_ns"] if scheduled is None else scheduled)
    rates = [(len(times) - 1) * 1e9 / (max(times) - min(times)) for times in by_stream.values()
             if len(times) > 1 and max(times) > min(times)]
    return Profile(name, {"ingest": Distribution.from_samples([e["compute_time_ms"] for e in ingest]),
                          "detect": Distribution.constant(0.0), "identify": Distribution.from_samples(detect)},
                   Distribution.from_samples([e["data_size_bytes"] for e in ingest if e.get("data_size_bytes")]),
                   {1: 1.0}, round(float(np.median(rates)), 3) if rates else OBJECT_DETECTION.fps, "object-detection")
