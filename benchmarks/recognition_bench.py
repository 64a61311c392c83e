"""Open-set face recognition on hard videos nothing was tuned on, scored as NIST scores 1:N identification.

    .venv/bin/python benchmarks/recognition_bench.py [--seeds 1001,1002,1003] [--seconds 40] [--gallery G.npz]
                                                      [--min-face-sizes 20,30,40] [--det det.png]
                                                      [--detector mtcnn|yunet]

For each seed, composes a video with `make-video --augment hard --strangers packaged` (faces 100-430 px, rolled,
lit, blurred, compressed, occluded, over clutter; about 30% of the faces are strangers who share no person with
the calibration set), then runs the pipeline's own compute on every frame: decode, resize, the detector (--detector),
aligned thumbnail, PNG, FaceNet, the gallery's open-set decision (the real `FaceFinder` and `FaceNetIdentifier`,
without Kafka: Kafka cannot change a name). Prints per seed and pooled: detection recall, identification rate of
enrolled people (rank 1, 1 - FNIR), false identification rate of strangers (FPIR), the threshold and
identify ms per face; then recall and names by face height at each smallest face the detector looks for, beside what
each costs a frame in CPU on one core; draws the pooled DET curve.

Then, at the pipeline's smallest face (--track-size, default 40), the same detections followed as tracks
(`pipeline.tracking`) and named both ways side by side: per frame (every face alone, the paper's), per track with
every thumbnail sent, and per track with a sample sent (--sample, default sample:10). For each: thumbnails that would
cross Kafka, identify CPU per frame, enrolled appearances named (undetected ones count as missed; the misses split
into never detected and called unknown) as each face was answered and with its track's final name, strangers named
and confusions. Not a test: a benchmark of accuracy on inputs of your choosing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="1001,1002,1003", help="video seeds (default 1001,1002,1003)")
    parser.add_argument("--seconds", type=float, default=40.0, help="length of each video (default 40)")
    parser.add_argument("--gallery", type=Path, help="a gallery (default: enroll the train split, calibrated)")
    parser.add_argument("--augment", default="hard", choices=("hard", "small"),
                        help="the videos' faces: hard (100-430 px at 1920x1080), or small (40-200 px), as make-video")
    parser.add_argument("--min-face-sizes", default="20,30,40",
                        help="the detector's smallest face in px at 960x540, each on every frame (default 20,30,40)")
    parser.add_argument("--detector", default="mtcnn", choices=("mtcnn", "yunet"),
                        help="the face detector (default mtcnn, the paper's and the pipeline's)")
    parser.add_argument("--det", type=Path, default=Path("recognition_det.png"), help="the pooled DET curve PNG")
    parser.add_argument("--track-size", type=int, default=40,
                        help="the smallest face of the per-frame / per-track comparison (default 40, the pipeline's)")
    parser.add_argument("--sample", default="sample:10", help="the sampled send policy compared (default sample:10)")
    parser.add_argument("--videos", help="score these videos (comma-separated, each with its .truth.json sidecar: "
                                         "held-out footage, e.g. from benchmarks/heldout_video.py) instead of "
                                         "composing one per seed")
    return parser.parse_args()


def main() -> int:
    args = _arguments()
    seeds = [int(seed) for seed in args.seeds.split(",")]
    sizes = [int(size) for size in args.min_face_sizes.split(",")]
    if args.track_size not in sizes:
        sizes.append(args.track_size)

    from tqdm import tqdm

    from aitax.pipeline.assets import ensure_assets
    from aitax.pipeline.evaluate import Evaluation, plot_det, score
    from aitax.pipeline.facenet import FaceEmbedder
    from aitax.pipeline.facenet_keras import set_tf_threads
    from aitax.pipeline.frames import read_frames
    from aitax.pipeline.gallery import load_gallery
    from aitax.pipeline.identify import FaceNetIdentifier
    from aitax.pipeline.ingest_detect import FaceFinder
    from aitax.pipeline.inputs import compose_video, enroll_gallery
    from aitax.pipeline.synth_video import load_truth
    from aitax.telemetry.timing import Stopwatch

    set_tf_threads(1, 1)  # one core, as an ingest-detect container has: its CPU time is its time
    workdir = Path(tempfile.mkdtemp(prefix="recognition-bench-"))
    gallery_path = args.gallery or workdir / "gallery.npz"
    if args.gallery is None:
        enroll_gallery(None, gallery_path)
    gallery = load_gallery(gallery_path)
    finders = {size: FaceFinder(min_face_size=size, frame_size=(960, 540), detector=args.detector) for size in sizes}
    identifier = FaceNetIdentifier(FaceEmbedder(ensure_assets().facenet_weights), gallery)

    # per frame (untracked faces), per track sending every face, per track sending a sample
    modes = {"per frame": None, "per track, every face": "every", f"per track, {args.sample}": args.sample}
    by_mode = {mode: TrackedRun(mode, send, gallery, identifier.embedder, finders[args.track_size].look)
               for mode, send in modes.items()}
    pooled = {size: Evaluation(f"min face {size}") for size in sizes}
    detect_ms: dict[int, list[float]] = {size: [] for size in sizes}
    identify_ms: list[float] = []
    videos = ([Path(video) for video in args.videos.split(",")] if args.videos else
              [workdir / f"{args.augment}-{seed}.mp4" for seed in seeds])
    for seed, video in zip(seeds if not args.videos else range(len(videos)), videos, strict=True):
        if not args.videos:
            compose_video(None, video, args.seconds, 10.0, seed, augment=args.augment, strangers="packaged")
        truth = load_truth(video)
        identities: dict[int, list] = {size: [] for size in sizes}
        for run in by_mode.values():
            run.start_video()
        for frame in tqdm(read_frames(str(video), "bench", (960, 540), pace="max"), total=len(truth["frames"]),
                          desc=video.name, unit="frame"):
            for size, finder in finders.items():  # interleaved: the machine's noise falls on every size alike
                started = time.process_time()
                found = finder(frame.rgb, Stopwatch(), frame.full)
                detect_ms[size].append((time.process_time() - started) * 1000)
                if size == args.track_size:
                    by_mode["per frame"].frame(frame, found)
                    # the tracked runs' detection looks where their tracks say too (both follow the same faces)
                    hints = by_mode["per track, every face"].publication.hints(frame)
                    followed = finder(frame.rgb, Stopwatch(), frame.full, hints) if hints else found
                    for run in list(by_mode.values())[1:]:
                        run.frame(frame, followed)
                identities[size] += _identified_alone(identifier, frame.index, found, identify_ms)
        for size in sizes:
            evaluation = score(identities[size], truth, {"bench": set(range(len(truth["frames"])))}, (960, 540),
                               "bench")
            print(f"{video.name}, min face {size}: {_line(evaluation)}")
            pooled[size].add(evaluation)
        for run in by_mode.values():
            run.score_video(truth)

    calibration = gallery.calibration
    for size in sizes:
        print(f"pooled over {len(videos)} videos, min face {size}: {_line(pooled[size])}")
    print(_size_table(pooled, detect_ms))
    print(f"threshold {gallery.threshold:.4f}" + (f" ({calibration.describe()})" if calibration else " (fixed)"))
    print(f"identify CPU per face (decode + FaceNet + decision, batches as found per frame): "
          f"median {statistics.median(identify_ms):.1f} ms")
    if plot_det(pooled[sizes[-1]], gallery.threshold, args.det):
        print(f"DET curve (min face {sizes[-1]}): {args.det}")
    print(f"\nper frame against per track, min face {args.track_size}, pooled over {len(videos)} videos:")
    print(_modes_table(list(by_mode.values())))
    return 0


class TrackedRun:
    """One way of naming the detections of the comparison's smallest face: its tracks (none: per frame), its own
    identify compute (its own track evidence), and what it answered."""

    def __init__(self, mode: str, send: str | None, gallery, embedder, look) -> None:
        from aitax.pipeline.evaluate import Evaluation
        from aitax.pipeline.identify import FaceNetIdentifier

        self.mode, self.send, self.look = mode, send, look
        self.identifier = FaceNetIdentifier(embedder, gallery, evidence="frame" if send is None else "track")
        self.as_answered, self.by_track = Evaluation(mode), Evaluation(mode)
        self.faces = self.thumbnails = self.frames = 0
        self.identify_ms = 0.0
        self.seed = 0

    def start_video(self) -> None:
        from aitax.pipeline.ingest_detect import EarlierFrames, FaceRecords
        from aitax.pipeline.tracking import SendPolicy, StreamTracks

        self.seed += 1  # each video its own run: tracks never carry across videos
        self.publication = FaceRecords(tracks=None if self.send is None else StreamTracks(SendPolicy.parse(self.send)))
        # the detect loop's: a face that starts its track is looked for in the frames before
        self.earlier = EarlierFrames(self.look) if self.publication.looks_back() else None
        self.identities: list = []

    def frame(self, frame, found: list) -> None:
        """The frame's faces as the detect loop publishes them (`FaceRecords`: tracks, the send policy, the faces
        missed in earlier frames or found there looking back, reported late), read back and identified."""
        from aitax.pipeline.ingest_detect import Detected
        from aitax.pipeline.schema import IdentityMessage, decode_face
        from aitax.telemetry.timing import Stopwatch

        self.frames += 1
        records = self.publication.publish(Detected(frame, found, f"bench-{self.seed}", 0, 0, self.earlier,
                                                    Stopwatch())).records
        if self.earlier is not None:
            self.earlier.keep(frame)
        faces = [decode_face(record.value, record.headers) for record in records]
        if not faces:
            return
        started = time.process_time()
        matches = self.identifier(faces, Stopwatch())
        self.identify_ms += (time.process_time() - started) * 1000
        self.faces += len(faces)
        self.thumbnails += sum(1 for face in faces if face.thumbnail)
        self.identities += [IdentityMessage.answering(face.meta, match, appended_ns=0, requested_ns=0, fetched_ns=0,
                                                      identify_start_ns=0, identified_ns=frame.index,
                                                      batch_size=len(faces))
                            for face, match in zip(faces, matches, strict=True)]

    def score_video(self, truth: dict) -> None:
        from aitax.pipeline.evaluate import named_by_track, score

        frames = {"bench": set(range(len(truth["frames"])))}
        self.as_answered.add(score(self.identities, truth, frames, (960, 540), self.mode))
        self.by_track.add(score(named_by_track(self.identities), truth, frames, (960, 540), self.mode))


def _modes_table(runs: list[TrackedRun]) -> str:
    rows = [["", "thumbnails / faces", "identify CPU ms/frame", "enrolled named (as answered)",
             "enrolled named (track's name)", "strangers named", "confusions"]]
    for run in runs:
        answered, final = run.as_answered, run.by_track
        rows.append([run.mode, f"{run.thumbnails} / {run.faces} ({run.thumbnails / max(1, run.faces):.0%})",
                     f"{run.identify_ms / max(1, run.frames):.1f}", _named(answered), _named(final),
                     f"{final.false_identification_rate:.1%} ({final.strangers_named}/{final.matched_strangers})",
                     str(sum(final.confusions.values()) - final.strangers_named)])
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return "\n".join("  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)) for row in rows)


def _named(evaluation) -> str:
    """Enrolled appearances named, as a share and as counts (a bar like 97% must not be met by rounding), and what
    the rest were: never detected, or detected and called unknown (a confusion is counted apart)."""
    enrolled = evaluation.truth_faces - evaluation.stranger_faces
    undetected = enrolled - (evaluation.matched - evaluation.matched_strangers)
    return (f"{evaluation.end_to_end_accuracy:.1%} ({evaluation.correct}/{enrolled}; "
            f"{undetected} undetected, {evaluation.unknown} unknown)")


def _identified_alone(identifier, frame_index: int, found: list, identify_ms: list[float]) -> list:
    """The frame's faces, untracked, each named from itself (the paper's way); its CPU per face into `identify_ms`."""
    from aitax.pipeline.schema import FaceMessage, FaceMeta, IdentityMessage
    from aitax.telemetry.timing import Stopwatch

    faces = [FaceMessage(FaceMeta("bench", "bench", frame_index, i, len(found), face.box, face.confidence,
                                  face.encoding, 0, 0, 0, 0, 0, 0), face.thumbnail) for i, face in enumerate(found)]
    if not faces:
        return []
    started = time.process_time()
    matches = identifier(faces, Stopwatch())
    identify_ms.append((time.process_time() - started) * 1000 / len(faces))
    return [IdentityMessage.answering(face.meta, match, appended_ns=0, requested_ns=0, fetched_ns=0,
                                      identify_start_ns=0, identified_ns=0, batch_size=len(faces))
            for face, match in zip(faces, matches, strict=True)]


def _size_table(pooled: dict, detect_ms: dict[int, list[float]]) -> str:
    """Recall by face height at each smallest face, then what each costs a frame on one core (the 10 FPS budget
    of an ingest-detect is 100 ms a frame, decoding and resizing included)."""
    from aitax.pipeline.evaluate import HEIGHT_BINS

    sizes = list(pooled)
    lows = sorted({low for evaluation in pooled.values() for low in evaluation.by_height})
    rows = [["face height px (960x540)", "faces", *(f"recall @{size}" for size in sizes),
             *(f"named @{size}" for size in sizes)]]
    for low in lows:
        high = next((edge for edge in HEIGHT_BINS if edge > low), None)
        counts = {size: pooled[size].by_height.get(low, [0, 0, 0, 0]) for size in sizes}
        faces, enrolled = counts[sizes[0]][0], counts[sizes[0]][2]
        rows.append([f"{low}-{high}" if high else f"{low}+", str(faces),
                     *(f"{counts[size][1] / faces:.1%}" if faces else "-" for size in sizes),
                     *(f"{counts[size][3] / enrolled:.1%}" if enrolled else "-" for size in sizes)])
    rows.append(["all enrolled appearances named", "", *("" for _ in sizes),
                 *(f"{pooled[size].end_to_end_accuracy:.1%}" for size in sizes)])
    rows.append(["detect CPU ms/frame, median / p95", "",
                 *(f"{statistics.median(detect_ms[size]):.0f} / "
                   f"{statistics.quantiles(detect_ms[size], n=20)[-1]:.0f}" for size in sizes), *("" for _ in sizes)])
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return "\n".join("  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)) for row in rows)


def _line(evaluation) -> str:
    e = evaluation
    return (f"{e.truth_faces} faces ({e.stranger_faces} of strangers), detection recall {e.detection_recall:.1%}; "
            f"enrolled named correctly {e.identification_rate:.1%} (FNIR {1 - e.identification_rate:.1%}); "
            f"strangers named FPIR {e.false_identification_rate:.1%} ({e.strangers_named}/{e.matched_strangers}); "
            f"confusions {e.confusions or 'none'}")


if __name__ == "__main__":
    sys.exit(main())
