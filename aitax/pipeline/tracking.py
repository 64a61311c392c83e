"""Faces followed across a stream's frames, and which of a track's faces send their thumbnail through Kafka.

The tracker is SORT's (Bewley et al., 2016) without its Kalman filter: each track's box moves on at its last
velocity, and a frame's detections are assigned to the predicted boxes by the Hungarian method (scipy's
`linear_sum_assignment`) on their overlap. A face that overlaps no prediction may still continue a track whose
predicted box is near and of a similar size (a small face moving fast overlaps nothing a frame later). A detection
left over starts a track; a track unseen for `max_missed_frames` ends. A face is followed *surely* when it
overlaps its track's prediction by SURE_IOU and no other face of the frame touches it; otherwise (a new track, a
face found only by nearness, two faces crossing, where trackers swap identities) the send policy sends its thumbnail
whatever its sample says, so that identify sees whether the track still shows the same person.

Hand-written because the two maintained trackers that fit cost more than they give here: norfair pins NumPy 1.x,
supervision's ByteTrack brings a video decoder (PyAV) into the image; the one algorithm that matters, the
assignment, is scipy's.

A track id is unique in its stream's run: the frame where the track started times TRACKS_PER_FRAME plus its order
among that frame's new tracks, so a resumed ingest-detect (`--resume`) never reuses an id of the run's earlier
frames. A face is known by (run, stream, track id). The tracker never sees a face's pixels: identify checks that a
track's faces stay one person (`pipeline.track_names`).
"""

from __future__ import annotations

import itertools
import zlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from aitax.pipeline.schema import UNTRACKED

Box = tuple[int, int, int, int]  # x, y, width, height
MAX_MISSED_FRAMES = 10  # a second at the paper's 10 FPS: a face missed that long has left, or is someone else
# A face missed for up to this many frames in a row, then found again by overlap, is reported for them late: every
# gap its track survives (ByteTrack's linear interpolation, online). On held-out footage 3 frames left the middle of
# a walk unreported where MTCNN lost a clear face for 6.
FILL_MISSED_FRAMES = MAX_MISSED_FRAMES
MIN_IOU = 0.2  # a detection continues a predicted box it overlaps this much
SURE_IOU = 0.5  # ... and is followed surely when it overlaps it this much, touching no other face
NEAR = 0.6  # ... or whose centre is within this share of its size, at a size within SIZE_RATIO
SIZE_RATIO = 1.5
_NO_MATCH = 1e6
SEND_POLICIES = ("every", "sample")
DEFAULT_SAMPLE_EVERY = 10  # frames between a track's thumbnails under `sample`: one a second at 10 FPS
TRACKS_PER_FRAME = 100  # new tracks a frame can start (MTCNN finds a few dozen faces in a crowd)
GROWTH_TO_RESEND = 1.5  # under `sample`, a face this much larger (in area) than the last sent is sent at once
MAX_LANES = 10_000  # tracks whose partition is remembered, least recently seen forgotten first


@dataclass
class _Track:
    track_id: int
    box: np.ndarray  # x, y, width, height as floats
    velocity: np.ndarray  # per frame
    last_frame: int
    last_found: int  # the last frame a face was found in with a new face's confidence (not only where hinted)

    def predicted(self, frame_index: int) -> np.ndarray:
        return self.box + self.velocity * (frame_index - self.last_frame)


def _overlap(a: np.ndarray, b: np.ndarray) -> float:
    width = max(0.0, min(a[0] + a[2], b[0] + b[2]) - max(a[0], b[0]))
    height = max(0.0, min(a[1] + a[3], b[1] + b[3]) - max(a[1], b[1]))
    intersection = width * height
    union = a[2] * a[3] + b[2] * b[3] - intersection
    return intersection / union if union > 0 else 0.0


def _cost(predicted: np.ndarray, detected: np.ndarray) -> float:
    """1 - IoU where they overlap enough; above 1 (worse than any overlap) where they are only near; else no match."""
    overlap = _overlap(predicted, detected)
    if overlap >= MIN_IOU:
        return 1.0 - overlap
    size, other = max(predicted[2], predicted[3]), max(detected[2], detected[3])
    if size <= 0 or not 1 / SIZE_RATIO <= other / size <= SIZE_RATIO:
        return _NO_MATCH
    distance = float(np.hypot(*((predicted[:2] + predicted[2:] / 2) - (detected[:2] + detected[2:] / 2))))
    return 1.0 + distance / size if distance <= NEAR * size else _NO_MATCH


class Followed(NamedTuple):
    track_id: int
    sure: bool  # continued a track by a clear overlap, touching no other face (see the module's docstring)
    # The frames the detector missed the face in since the track's previous face, with its box drawn between the
    # two (only after a gap of at most FILL_MISSED_FRAMES, continued by overlap): the faces a tracker reports late
    missed: tuple[tuple[int, Box], ...] = ()
    started: bool = False  # the face started its track


@dataclass
class FaceTracker:
    """One stream's tracks. `update` takes a frame's boxes, in frame order, and answers their track ids."""

    max_missed_frames: int = MAX_MISSED_FRAMES
    _tracks: list[_Track] = field(default_factory=list)

    def update(self, frame_index: int, boxes: Sequence[Box]) -> list[int]:
        return [followed.track_id for followed in self.follow(frame_index, boxes)]

    def predictions(self, frame_index: int) -> list[Box]:
        """Where each live track's face should be in the frame: the detector's hints."""
        return [tuple(round(v) for v in track.predicted(frame_index))  # type: ignore[misc]
                for track in self._live(frame_index)]

    def _live(self, frame_index: int) -> list[_Track]:
        # A track ends when no face was found for it with a new face's confidence for max_missed_frames: faces found
        # only where it said to look cannot keep it alive (a track must not follow its own hints over a wall).
        return [t for t in self._tracks if frame_index - t.last_found <= self.max_missed_frames + 1]

    def follow(self, frame_index: int, boxes: Sequence[Box], hinted: Sequence[bool] = ()) -> list[Followed]:
        """Each box's track. A `hinted` box (found only where a hint said to look) may continue a track but never
        starts one: unmatched, it is UNTRACKED, and its face is not reported."""
        # here, not at the top: the emulator's image imports this module (through the detect loop) and has no SciPy
        from scipy.optimize import linear_sum_assignment

        self._tracks = self._live(frame_index)
        hinted = list(hinted) or [False] * len(boxes)
        detected = [np.array(box, float) for box in boxes]
        ids: list[int] = [UNTRACKED] * len(detected)
        sure = [False] * len(detected)
        missed: list[tuple[tuple[int, Box], ...]] = [()] * len(detected)
        if self._tracks and detected:
            predicted = [track.predicted(frame_index) for track in self._tracks]
            costs = np.array([[_cost(p, d) for d in detected] for p in predicted])
            for row, column in zip(*linear_sum_assignment(costs), strict=True):
                if costs[row, column] < _NO_MATCH:
                    track = self._tracks[row]
                    gap = max(1, frame_index - track.last_frame)
                    if 1 < gap <= FILL_MISSED_FRAMES + 1 and costs[row, column] < 1:
                        missed[column] = tuple(
                            (track.last_frame + step, tuple(round(v) for v in
                                                            track.box + (detected[column] - track.box) * step / gap))
                            for step in range(1, gap))
                    track.velocity = 0.5 * track.velocity + 0.5 * (detected[column] - track.box) / gap
                    track.box, track.last_frame = detected[column], frame_index
                    if not hinted[column]:
                        track.last_found = frame_index
                    ids[column] = track.track_id
                    sure[column] = costs[row, column] <= 1 - SURE_IOU
        started = (column for column in range(len(detected)) if ids[column] == UNTRACKED and not hinted[column])
        new = [False] * len(detected)
        for order, column in enumerate(itertools.islice(started, TRACKS_PER_FRAME)):
            ids[column], new[column] = frame_index * TRACKS_PER_FRAME + order, True
            self._tracks.append(_Track(ids[column], detected[column], np.zeros(4), frame_index, frame_index))
        for one, other in itertools.combinations(range(len(detected)), 2):
            if _overlap(detected[one], detected[other]) > 0:
                sure[one] = sure[other] = False
        return [Followed(*followed) for followed in zip(ids, sure, missed, new, strict=True)]


@dataclass
class SendPolicy:
    """Which faces of a track carry their thumbnail: `every` face (the paper's: every face is identified), or a
    `sample`: a track's first face, then one every `sample_every` frames, at once when the face has grown by
    GROWTH_TO_RESEND (closer to the camera: more pixels to be named by), and whenever it was not followed surely.
    The faces between go as `tracked` records, answered with their track's name."""

    policy: str = "every"
    sample_every: int = DEFAULT_SAMPLE_EVERY
    _last_sent: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)  # -> (frame, area)

    @classmethod
    def parse(cls, text: str) -> SendPolicy:
        """`every`, or `sample:N` (a thumbnail every N frames of a track); ValueError naming what is wrong."""
        policy, _, every = text.partition(":")
        if policy == "sample" and every:
            if not every.isdigit():
                raise ValueError(f"send policy {text!r}: N in sample:N must be a number of frames")
            return cls("sample", int(every))
        if policy in SEND_POLICIES and not every:
            return cls(policy)
        raise ValueError(f"send policy {text!r}: expected every, sample or sample:N")

    def __str__(self) -> str:
        return self.policy if self.policy == "every" else f"sample:{self.sample_every}"

    def __post_init__(self) -> None:
        if self.policy not in SEND_POLICIES:
            raise ValueError(f"send policy {self.policy!r}: expected one of {', '.join(SEND_POLICIES)}")
        if self.sample_every < 1:
            raise ValueError(f"send policy sample:{self.sample_every}: N must be at least 1 frame")

    def sends(self, stream_id: str, track_id: int, frame_index: int, box: Box, sure: bool = True) -> bool:
        """Whether this face of the track sends its thumbnail (`sure`: it was followed surely, `Followed`)."""
        if self.policy == "every" or track_id == UNTRACKED:
            return True
        area, last = box[2] * box[3], self._last_sent.get((stream_id, track_id))
        if (sure and last is not None and frame_index - last[0] < self.sample_every
                and area < GROWTH_TO_RESEND * last[1]):
            return False
        self._last_sent[stream_id, track_id] = (frame_index, area)
        if len(self._last_sent) > 4096:  # forget tracks long ended
            self._last_sent = {k: v for k, v in self._last_sent.items() if frame_index - v[0] < 1000}
        return True


@dataclass
class TrackLanes:
    """The `faces` partition of each track: a stream's new tracks take the partitions in turn (each stream starting
    where its name hashes to), so the faces on screen together are spread over the partitions, and over the identify
    processes the round-robin assignor deals them to. By the hash of their keys, two tracks share one of two
    processes half the time (measured: every face of a 20 faces/s stretch on one process, the other idle)."""

    partitions: int
    _turn: dict[str, int] = field(default_factory=dict)
    _lanes: OrderedDict[tuple[str, int], int] = field(default_factory=OrderedDict)

    def __post_init__(self) -> None:
        if self.partitions < 1:
            raise ValueError(f"{self.partitions} partitions: at least 1")

    def partition(self, stream_id: str, track_id: int) -> int:
        key = (stream_id, track_id)
        lane = self._lanes.get(key)
        if lane is None:
            turn = self._turn.get(stream_id, zlib.crc32(stream_id.encode()))
            self._turn[stream_id] = turn + 1
            lane = self._lanes[key] = turn % self.partitions
            if len(self._lanes) > MAX_LANES:
                self._lanes.popitem(last=False)
        self._lanes.move_to_end(key)
        return lane


@dataclass
class StreamTracks:
    """What a detect loop keeps to follow faces: a tracker per stream, the send policy, and where the partitions
    are dealt to tracks (`lanes`; None: by the records' keys)."""

    send: SendPolicy = field(default_factory=SendPolicy)
    lanes: TrackLanes | None = None
    _trackers: dict[str, FaceTracker] = field(default_factory=dict)
    _stamps: dict[str, dict[int, tuple[int, int, int]]] = field(default_factory=dict)
    _reported: dict[str, dict[int, list[Box]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # SciPy loads now, with the stage, not in the first frame (0.65 s measured there, which every frame queued
        # behind it waited too). The emulator follows no tracks and its image has no SciPy.
        import scipy.optimize  # noqa: F401

    def remember(self, stream_id: str, frame_index: int, stamps: tuple[int, int, int]) -> None:
        """A processed frame's (scheduled, captured, ingested) times: a face missed in it is reported with them."""
        recent, reported = self._stamps.setdefault(stream_id, {}), self._reported.setdefault(stream_id, {})
        recent[frame_index], reported[frame_index] = stamps, []
        for old in [index for index in recent if index < frame_index - FILL_MISSED_FRAMES]:
            del recent[old], reported[old]

    def stamps(self, stream_id: str, frame_index: int) -> tuple[int, int, int] | None:
        """The times `remember` kept for the frame; None for a frame not processed (a camera's dropped frame)."""
        return self._stamps.get(stream_id, {}).get(frame_index)

    def report(self, stream_id: str, frame_index: int, box: Box) -> None:
        """A face reported in a remembered frame (found in it, or late)."""
        self._reported.get(stream_id, {}).get(frame_index, []).append(box)

    def reported_near(self, stream_id: str, frame_index: int, box: Box) -> bool:
        """Whether a face reported in the frame overlaps `box` (or the frame is not remembered): a face found there
        now would be one already reported."""
        reported = self._reported.get(stream_id, {}).get(frame_index)
        return reported is None or any(_overlap(np.array(box, float), np.array(other, float)) >= MIN_IOU
                                       for other in reported)

    def hints(self, stream_id: str, frame_index: int) -> list[Box]:
        """Where the stream's live tracks expect their faces in the frame (`FaceTracker.predictions`)."""
        tracker = self._trackers.get(stream_id)
        return tracker.predictions(frame_index) if tracker is not None else []

    def follow(self, stream_id: str, frame_index: int, boxes: Sequence[Box], hinted: Sequence[bool] = ()) -> list[Sent]:
        """Per box: its track, whether its thumbnail is sent, and the frames its face was missed in. A `hinted` box
        that continues no track is UNTRACKED: not a face to report."""
        followed = self._trackers.setdefault(stream_id, FaceTracker()).follow(frame_index, boxes, hinted)
        return [Sent(one.track_id, self.send.sends(stream_id, one.track_id, frame_index, box, one.sure), one.missed,
                     one.started)
                for one, box in zip(followed, boxes, strict=True)]


class Sent(NamedTuple):
    """What a detect loop sends for a face it found: its track, whether with its thumbnail, and the frames the face
    was missed in since its track's previous face (`Followed.missed`), each reported as a `tracked` face."""

    track_id: int
    thumbnail: bool
    missed: tuple[tuple[int, Box], ...] = ()
    started: bool = False  # the face started its track: the frames before it are looked back at
