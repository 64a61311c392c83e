"""How well a run did: identities read back from Kafka, matched to the video's ground truth, and latency.

Identification is scored as open-set identification is reported (NIST's face recognition evaluations): of the
detected faces of enrolled people, the share named correctly (the identification rate; 1 - FNIR); of the detected
faces of strangers, the share given an enrolled person's name (FPIR, the false positive identification rate).
Every identity carries its score and best candidate, so the whole DET curve (FNIR against FPIR over every
threshold) comes from one run: `det_curve`, drawn by `plot_det`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from aitax.common.paper import PAPER
from aitax.pipeline.crop import iou
from aitax.pipeline.schema import UNKNOWN, UNTRACKED, IdentityMessage
from aitax.pipeline.synth_video import load_truth
from aitax.telemetry.latency import (
    BREAKDOWN,
    BROKER_WAIT,
    NS_PER_MS,
    Distribution,
    Tail,
    distribution,
    end_to_end_ms,
    tail_of,
)

# The demos' first seconds (first fetches, first results), reported apart from their latency: `aitax demo`'s ramp-up,
# and on a release the seconds after its first identity (`aitax evaluate --warmup`).
DEMO_WARMUP_S = 2.0
MATCH_IOU = 0.3  # a detection counts as the true face when its box overlaps it this much (scaled frames)
# Face heights in px of the pipeline's frame, for recall by size: MTCNN's smallest face is the knob they judge.
HEIGHT_BINS = (0, 40, 60, 80, 120, 160)


@dataclass(frozen=True)
class Searched:
    """One detected face's answer, for the DET curve: was its person enrolled, its score, and whether the best
    candidate was that person."""

    enrolled: bool
    score: float
    candidate_right: bool


@dataclass
class Evaluation:
    run_id: str
    frames: int = 0
    truth_faces: int = 0
    stranger_faces: int = 0  # of truth_faces
    detections: int = 0
    matched: int = 0
    matched_strangers: int = 0  # of matched
    correct: int = 0
    unknown: int = 0  # enrolled people called unknown
    strangers_named: int = 0  # strangers given an enrolled person's name
    duplicates: int = 0
    confusions: dict[str, int] = field(default_factory=dict)
    # by the face's height bin (its lower edge, HEIGHT_BINS): [faces, detected, of enrolled people, named right]
    by_height: dict[int, list[int]] = field(default_factory=dict)
    searches: list[Searched] = field(default_factory=list, repr=False)
    latency_ms: dict[str, Distribution] = field(default_factory=dict)
    # The same faces, each with its track's final name (`named_by_track`); None when no face was tracked
    by_track: Evaluation | None = None
    thumbnails: int = 0  # identified faces whose thumbnail went through Kafka (the rest: `tracked`, named by track)
    identified: int = 0  # identified faces, from the identify events
    # From a named track's first face (its schedule) to the first identity that gave it that name (durable)
    first_name_ms: Distribution | None = None
    # Latency counts the faces scheduled this long after the first identity was delivered (start-up left out)
    warmup_s: float = 0.0
    end_to_end_tail: Tail | None = None  # the window's end-to-end quantiles

    def add(self, other: Evaluation) -> None:
        """Pool another video's counts into this one."""
        for name in ("frames", "truth_faces", "stranger_faces", "detections", "matched", "matched_strangers",
                     "correct", "unknown", "strangers_named", "duplicates"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.searches += other.searches
        for pair, count in other.confusions.items():
            self.confusions[pair] = self.confusions.get(pair, 0) + count
        for low, counts in other.by_height.items():
            mine = self.by_height.setdefault(low, [0, 0, 0, 0])
            mine[:] = [a + b for a, b in zip(mine, counts, strict=True)]

    @property
    def detection_precision(self) -> float:
        return self.matched / self.detections if self.detections else 0.0

    @property
    def detection_recall(self) -> float:
        return self.matched / self.truth_faces if self.truth_faces else 0.0

    @property
    def identification_rate(self) -> float:
        """Detected faces of enrolled people named correctly (rank 1, at the gallery's threshold): 1 - FNIR."""
        matched_enrolled = self.matched - self.matched_strangers
        return self.correct / matched_enrolled if matched_enrolled else 0.0

    @property
    def false_identification_rate(self) -> float:
        """Detected faces of strangers named as someone enrolled (FPIR)."""
        return self.strangers_named / self.matched_strangers if self.matched_strangers else 0.0

    @property
    def end_to_end_accuracy(self) -> float:
        """Ground-truth faces of enrolled people that came out of the pipeline with the right name."""
        enrolled = self.truth_faces - self.stranger_faces
        return self.correct / enrolled if enrolled else 0.0

    def summary(self) -> dict[str, object]:
        """Accuracy and the window's end to end as one JSON-ready mapping (`aitax evaluate --json`)."""
        end_to_end = self.latency_ms.get("end_to_end")
        tail = self.end_to_end_tail
        return {"run_id": self.run_id, "warmup_s": self.warmup_s, "end_to_end_accuracy": self.end_to_end_accuracy,
                "strangers_named": self.strangers_named, "matched_strangers": self.matched_strangers,
                "end_to_end_ms": None if end_to_end is None or tail is None else
                {"faces": end_to_end.count, "mean": end_to_end.mean_ms, **tail.quantiles_ms, "max": tail.max_ms}}


def det_curve(searches: list[Searched]) -> list[tuple[float, float, float]]:
    """(threshold, FPIR, FNIR) at every score a face had: a stranger counts against FPIR when its score reaches
    the threshold, an enrolled face against FNIR unless its candidate is right and its score reaches it."""
    genuine = [s for s in searches if s.enrolled]
    impostor = [s for s in searches if not s.enrolled]
    if not genuine or not impostor:
        return []
    points = []
    for threshold in sorted({s.score for s in searches}):
        fpir = sum(s.score >= threshold for s in impostor) / len(impostor)
        fnir = sum(not (s.candidate_right and s.score >= threshold) for s in genuine) / len(genuine)
        points.append((threshold, fpir, fnir))
    return points


def plot_det(evaluation: Evaluation, threshold: float | None, path: Path) -> Path | None:
    """The DET curve as a PNG (log axes, as NIST draws them), the operating point marked; None without both
    enrolled and stranger faces."""
    points = det_curve(evaluation.searches)
    if not points:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    floor = 1 / (2 * max(len(evaluation.searches), 1))  # log axes: a zero rate is drawn at half a face
    figure, axis = plt.subplots(figsize=(6, 5))
    axis.plot([max(f, floor) for _, f, _ in points], [max(n, floor) for _, _, n in points], label="DET")
    operating = (max(evaluation.false_identification_rate, floor), max(1 - evaluation.identification_rate, floor))
    axis.plot(*operating, "o", color="C3",
              label=f"operating point{'' if threshold is None else f' (threshold {threshold:.2f})'}: "
                    f"FPIR {evaluation.false_identification_rate:.1%}, FNIR {1 - evaluation.identification_rate:.1%}")
    axis.set(xscale="log", yscale="log", xlabel="FPIR (strangers named as someone enrolled)",
             ylabel="FNIR (enrolled people not named correctly)",
             title=f"Open-set identification, run {evaluation.run_id}")
    axis.grid(True, which="both", alpha=0.3)
    axis.legend(fontsize=8)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def named_by_track(identities: list[IdentityMessage]) -> list[IdentityMessage]:
    """Each tracked face with its track's final name, as a reader that wants one name per track reads `identities`:
    the decision resting on the most evidence (of equals, the latest). A track's evidence grows face by face; where
    the track changed person (`track_stretch`) or its evidence falls (it moved to another identify consumer) a new
    stretch of the track begins, named on its own. Untracked faces keep their own names."""
    stretches: dict[tuple[str, str, int, int], list[list[IdentityMessage]]] = {}
    for identity in sorted(identities, key=lambda i: (i.frame_index, i.identified_ns)):
        if identity.track_id == UNTRACKED:
            continue
        track = stretches.setdefault((identity.run_id, identity.stream_id, identity.track_id,
                                      identity.track_stretch), [[]])
        if track[-1] and identity.evidence_frames < track[-1][-1].evidence_frames:
            track.append([])
        track[-1].append(identity)
    final: dict[tuple, IdentityMessage] = {}
    for track in stretches.values():
        for stretch in track:
            best = max(stretch, key=lambda i: (i.evidence_frames, i.identified_ns))
            final.update({identity.key: best for identity in stretch})
    return [identity if identity.key not in final else
            replace(identity, **{name: getattr(final[identity.key], name)
                                 for name in ("identity", "score", "candidate", "evidence_frames")})
            for identity in identities]


def time_to_first_name(identities: list[IdentityMessage]) -> Distribution | None:
    """Per track whose final name (`named_by_track`) is someone enrolled: from its first face's scheduled time to
    the delivery of the first identity that named it so. None without such a track."""
    final = {identity.key: identity.identity for identity in named_by_track(identities)}
    tracks: dict[tuple[str, str, int], list[IdentityMessage]] = {}
    for identity in identities:
        if identity.track_id != UNTRACKED:
            tracks.setdefault((identity.run_id, identity.stream_id, identity.track_id), []).append(identity)
    waits = []
    for faces in tracks.values():
        first = min(faces, key=lambda i: i.frame_index)
        name = final[first.key]
        named = [i.delivered_ns for i in faces if i.identity == name and final[i.key] == name and i.delivered_ns]
        if name != UNKNOWN and named:
            waits.append((min(named) - first.scheduled_ns) / NS_PER_MS)
    return distribution(waits) if waits else None


def score(identities: list[IdentityMessage], truth: dict, processed_frames: dict[str, set[int]],
          size: tuple[int, int], run_id: str) -> Evaluation:
    """Each frame's true faces matched to its detections by the most overlap in all (`_matched`); truth boxes
    scaled from the video's size to the pipeline's."""
    evaluation = Evaluation(run_id)
    sx, sy = size[0] / truth["width"], size[1] / truth["height"]
    by_frame: dict[tuple[str, int], list[IdentityMessage]] = {}
    for identity in identities:
        by_frame.setdefault((identity.stream_id, identity.frame_index), []).append(identity)
    total_frames = len(truth["frames"])
    for stream, frames in processed_frames.items():
        for frame_index in frames:
            evaluation.frames += 1
            expected = truth["frames"][frame_index % total_frames]
            found = by_frame.get((stream, frame_index), [])
            evaluation.truth_faces += len(expected)
            evaluation.detections += len(found)
            boxes = [(round(x * sx), round(y * sy), round(w * sx), round(h * sy))
                     for x, y, w, h in (face["box"] for face in expected)]
            matches = _matched(boxes, [face.box for face in found])
            for position, face in enumerate(expected):
                enrolled = face.get("enrolled", True)  # version 1 sidecars hold enrolled people only
                evaluation.stranger_faces += not enrolled
                by_height = evaluation.by_height.setdefault(max(low for low in HEIGHT_BINS
                                                                if low <= boxes[position][3]), [0, 0, 0, 0])
                by_height[0] += 1
                by_height[2] += enrolled
                if position not in matches:
                    continue
                best = found[matches[position]]
                by_height[1] += 1
                by_height[3] += enrolled and best.identity == face["identity"]
                evaluation.matched += 1
                evaluation.searches.append(Searched(enrolled, best.score, best.candidate == face["identity"]))
                if not enrolled:
                    evaluation.matched_strangers += 1
                    if best.identity != UNKNOWN:
                        evaluation.strangers_named += 1
                        pair = f"stranger->{best.identity}"
                        evaluation.confusions[pair] = evaluation.confusions.get(pair, 0) + 1
                elif best.identity == face["identity"]:
                    evaluation.correct += 1
                elif best.identity == UNKNOWN:
                    evaluation.unknown += 1
                else:
                    pair = f"{face['identity']}->{best.identity}"
                    evaluation.confusions[pair] = evaluation.confusions.get(pair, 0) + 1
    return evaluation


def _matched(truth_boxes: list[tuple[int, int, int, int]], found_boxes: list) -> dict[int, int]:
    """True face -> its detection: the pairing with the most overlap in all (Hungarian, as CLEAR MOT pairs), of
    pairs overlapping at least MATCH_IOU. Matching each true face in turn to its best detection would let a face
    half hidden behind another take the front face's detection."""
    from scipy.optimize import linear_sum_assignment

    if not truth_boxes or not found_boxes:
        return {}
    overlaps = np.array([[iou(truth, found) for found in found_boxes] for truth in truth_boxes])
    rows, columns = linear_sum_assignment(overlaps, maximize=True)
    return {int(row): int(column) for row, column in zip(rows, columns, strict=True)
            if overlaps[row, column] >= MATCH_IOU}


# What the identities themselves time, beside the events' stages: broker wait by owner and the results' delivery.
_IDENTITY_SPANS = {name: (start, end) for name, start, end in BREAKDOWN if name in (*BROKER_WAIT, "deliver")}
_PRINTED = ("ingest", "detect", "broker_wait", *BROKER_WAIT, "identify", "deliver", "end_to_end", "reported_late")


def latency_breakdown(events: list[dict], identities: list[IdentityMessage]) -> dict[str, Distribution]:
    """Per-stage wall time (the paper's Fig. 6 stages), broker wait by owner, delivery and end to end per face,
    in ms."""
    stages: dict[str, list[float]] = {}
    for event in events:
        if event["stage"] in ("ingest", "detect", "broker_wait", "identify"):
            stages.setdefault(event["stage"], []).append((event["wall_end_ns"] - event["wall_start_ns"]) / NS_PER_MS)
    for name, (start, end) in _IDENTITY_SPANS.items():
        stages[name] = [(getattr(i, end) - getattr(i, start)) / NS_PER_MS for i in identities]
    stages["end_to_end"] = [end_to_end_ms(i.scheduled_ns, i.delivered_ns) for i in identities if i.face_index >= 0]
    # A face its track reported after the frames that missed it waited for the track to find it again: its delay
    # is the tracker's, shown on its own line, not a frame's latency.
    stages["reported_late"] = [end_to_end_ms(i.scheduled_ns, i.delivered_ns) for i in identities if i.face_index < 0]
    return {stage: distribution(values) for stage, values in stages.items() if values}


def evaluate_run(video: Path, run_id: str, bootstrap: str, events: str | Path | None,
                 size: tuple[int, int] = (960, 540), warmup_s: float = 0.0,
                 window_s: float | None = None) -> Evaluation:
    """`events`: a JSONL folder or an Elasticsearch URL (default: the run's folder under .aitax/runs). Every face
    is scored; latency counts the faces scheduled `warmup_s` or more after the first identity was delivered (a
    release's start-up, its backlog from before identify was ready, left out), for `window_s` when given."""
    from aitax.common.paths import aitax_home
    from aitax.pipeline.transport.readback import read_identities
    from aitax.telemetry.event_sources import load_events

    truth = load_truth(video)
    identities, duplicates = read_identities(bootstrap, run_id)
    source = events or aitax_home() / "runs" / run_id
    local = not str(source).startswith(("http://", "https://"))
    # A run with no event folder (events were off) is still scored, without the latency breakdown.
    events = [] if local and not Path(source).is_dir() else load_events(run_id, source).documents
    processed: dict[str, set[int]] = {}
    for event in events:
        if event["stage"] == "detect":
            processed.setdefault(event["stream_id"], set()).add(event["frame_index"])
    if not processed:  # no events: every frame up to the last identified one was processed
        for identity in identities:
            processed.setdefault(identity.stream_id, set()).update(range(identity.frame_index + 1))
    evaluation = score(identities, truth, processed, size, run_id)
    if any(identity.track_id != UNTRACKED for identity in identities):
        evaluation.by_track = score(named_by_track(identities), truth, processed, size, run_id)
        evaluation.first_name_ms = time_to_first_name(identities)
    identified = [event for event in events if event["stage"] == "identify"]
    evaluation.identified = len(identified)
    evaluation.thumbnails = sum(1 for event in identified if event.get("data_size_bytes"))
    evaluation.duplicates = duplicates
    measure_latency(evaluation, *after_warmup(identities, events, warmup_s, window_s), warmup_s)
    return evaluation


def after_warmup(identities: list[IdentityMessage], events: list[dict], warmup_s: float,
                 window_s: float | None = None) -> tuple[list[IdentityMessage], list[dict]]:
    """The faces scheduled `warmup_s` or more after the first identity was delivered (for `window_s`, when given),
    and the stage events of their frames: a release's start-up, and the backlog queued before identify was ready,
    left out; a release that keeps running measured over a window of its own."""
    if not (warmup_s or window_s) or not identities:
        return identities, events
    since_ns = min(identity.delivered_ns for identity in identities) + round(warmup_s * 1e9)
    until_ns = None if window_s is None else since_ns + round(window_s * 1e9)
    kept = [identity for identity in identities
            if identity.scheduled_ns >= since_ns and (until_ns is None or identity.scheduled_ns < until_ns)]
    frames = {(identity.stream_id, identity.frame_index) for identity in kept}
    return kept, [event for event in events if (event["stream_id"], event["frame_index"]) in frames]


def measure_latency(evaluation: Evaluation, identities: list[IdentityMessage], events: list[dict],
                    warmup_s: float = 0.0) -> None:
    """The latency breakdown and end to end's quantiles of these faces, onto `evaluation`."""
    evaluation.warmup_s = warmup_s
    evaluation.latency_ms = latency_breakdown(events, identities)
    on_time = [end_to_end_ms(i.scheduled_ns, i.delivered_ns) for i in identities if i.face_index >= 0]
    if on_time:
        evaluation.end_to_end_tail = tail_of(on_time)


def print_evaluation(evaluation: Evaluation) -> None:
    e = evaluation
    print(f"run {e.run_id}: {e.frames} frames, {e.truth_faces} ground-truth faces, {e.detections} detections, "
          f"{e.duplicates} duplicate identities removed")
    print(f"  detection precision {e.detection_precision:.1%}  recall {e.detection_recall:.1%}")
    print(f"  identification rate (detected enrolled faces named correctly) {e.identification_rate:.1%}; "
          f"unknown {e.unknown}; confusions {e.confusions or 'none'}")
    if e.stranger_faces:
        print(f"  FALSE IDENTIFICATION RATE {e.false_identification_rate:.1%} of detected stranger faces "
              f"({e.strangers_named}/{e.matched_strangers}) named as someone enrolled")
    print(f"  END-TO-END ACCURACY {e.end_to_end_accuracy:.1%} of enrolled people's ground-truth faces correctly "
          f"identified (each face as it was answered)")
    if e.by_track is not None:
        t = e.by_track
        print(f"  BY TRACK (each face with its track's final name): END-TO-END ACCURACY {t.end_to_end_accuracy:.1%}; "
              f"identification rate {t.identification_rate:.1%}; strangers named {t.false_identification_rate:.1%} "
              f"({t.strangers_named}/{t.matched_strangers}); confusions {t.confusions or 'none'}")
    if e.first_name_ms is not None:
        f = e.first_name_ms
        print(f"  time to a track's first name: p50 {f.p50_ms:.0f} ms, mean {f.mean_ms:.0f} ms, p99 {f.p99_ms:.0f} ms "
              f"over {f.count} named tracks")
    if e.identified:
        print(f"  thumbnails through Kafka: {e.thumbnails} of {e.identified} identified faces "
              f"({e.thumbnails / e.identified:.0%}); the rest named from their track")
    if e.latency_ms:
        if e.warmup_s:
            print(f"  latency of the faces scheduled {e.warmup_s:g} s or more after the first identity:")
        print(f"  {'stage':<15}{'mean ms':>7}{'p50 ms':>10}{'p99 ms':>10}{'count':>8}   paper mean")
        for stage in _PRINTED:
            if stage in e.latency_ms:
                s = e.latency_ms[stage]
                paper = PAPER.mean_ms.get("e2e" if stage == "end_to_end" else stage)
                name = f"  {stage}" if stage in BROKER_WAIT else stage  # a part of the broker wait above it
                print(f"  {name:<15}{s.mean_ms:>7.1f}{s.p50_ms:>10.1f}{s.p99_ms:>10.1f}{s.count:>8}"
                      f"   {'' if paper is None else f'{paper:>6.1f}'}")
