"""A track named by its evidence: the mean of its faces' embeddings against the gallery's open-set threshold.

One face is one noisy look at a person: blurred, turned, half covered. The threshold that keeps strangers out
rejects many such looks of enrolled people. The mean of a track's unit embeddings (made unit again) is a steadier
look: its noise falls as the faces add up, so an enrolled person's score rises towards their clean photos' and a
stranger's stays where a stranger's clean face would be (below the threshold calibrated on strangers). Each face
is answered with the decision on its track's evidence so far, and the decision may change as the evidence grows;
once named, a track keeps its name until its evidence falls clearly below the threshold (`HOLD_MARGIN`).

The tracker follows boxes, not people: when a face scores below `SAME_PERSON` against its track's mean, the track
has jumped to someone else (two people crossing), and its evidence starts again from that face.

The evidence lives in the identify consumer that owns the track's partition (`faces` keyed by track). A rebalance
moves the partition, not the evidence: the new owner starts the track afresh from its next face, which is named
from its own look until its evidence builds up again; a `tracked` face (no thumbnail) that reaches an owner with no
evidence is answered unknown with 0 evidence frames.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from aitax.pipeline.schema import UNKNOWN, Match

SAME_PERSON = 0.3  # cosine of a face to its track's mean below which the track has changed person
# A named track keeps its name while its evidence still points to the same person no more than this below the
# threshold (hysteresis): the mean of a person who walks into poor light hovers at the threshold, and each crossing
# would flip the name of every face the track reports. 0.02 by measurement on held-out seeds 53-64 (docs/tracks.md):
# it named 98.9% of enrolled appearances where none named 97.5%, and no stranger; 0.08 let a stranger's track keep
# a name it had held for a few faces.
HOLD_MARGIN = 0.02
MAX_TRACKS = 10_000  # tracks remembered per consumer, least recently seen forgotten first
TrackKey = tuple[str, str, int]  # run, stream, track id
EVIDENCE = ("track", "frame")


@dataclass
class _Evidence:
    total: np.ndarray  # the sum of the track's unit embeddings since it last changed person
    faces: int
    decision: Match
    stretch: int = 0  # how many times the track changed person: a reader names each stretch on its own


class TrackNames:
    """Each track's evidence and current name. With `accumulate` False (`--evidence frame`, the paper's), a face
    with a thumbnail is named from itself alone; the track only remembers that answer for its `tracked` faces."""

    def __init__(self, gallery, accumulate: bool = True, max_tracks: int = MAX_TRACKS) -> None:
        self.gallery, self.accumulate, self.max_tracks = gallery, accumulate, max_tracks
        self._tracks: OrderedDict[TrackKey, _Evidence] = OrderedDict()
        self.person_changes = 0  # tracks whose evidence restarted because their face changed person

    def name(self, key: TrackKey, embedding: np.ndarray) -> Match:
        """Add a face's unit embedding to its track and answer the track's decision."""
        evidence = self._tracks.get(key)
        stretch = 0 if evidence is None else evidence.stretch
        if evidence is not None and self.accumulate:
            mean = evidence.total / np.linalg.norm(evidence.total)
            if float(mean @ embedding) < SAME_PERSON:
                self.person_changes += 1
                evidence, stretch = None, stretch + 1
        if evidence is None or not self.accumulate:
            evidence = _Evidence(np.array(embedding, np.float32), 0, Match(UNKNOWN, 0.0, "", 0), stretch)
        else:
            evidence.total = evidence.total + embedding
        evidence.faces += 1
        mean = evidence.total / np.linalg.norm(evidence.total)
        match = self.gallery.identify(mean[None])[0]
        held = evidence.decision.identity  # the name so far (UNKNOWN for a new track or stretch)
        if (held != UNKNOWN and match.identity == UNKNOWN and match.candidate == held
                and match.score >= self.gallery.threshold - HOLD_MARGIN):
            match = match._replace(identity=held)
        evidence.decision = match._replace(evidence_frames=evidence.faces, track_stretch=stretch)
        self._remember(key, evidence)
        return evidence.decision

    def recall(self, key: TrackKey) -> Match:
        """The track's current decision, for a face whose thumbnail was not sent."""
        evidence = self._tracks.get(key)
        if evidence is None:
            return Match(UNKNOWN, 0.0, "", 0)
        self._tracks.move_to_end(key)
        return evidence.decision

    def _remember(self, key: TrackKey, evidence: _Evidence) -> None:
        self._tracks[key] = evidence
        self._tracks.move_to_end(key)
        while len(self._tracks) > self.max_tracks:
            self._tracks.popitem(last=False)
