"""Open-set face recognition on hard videos nothing was tuned on, scored as NIST scores 1:N identification.

    .venv/bin/python benchmarks/recognition_bench.py [--seeds 1001,1002,1003] [--seconds 40] [--gallery G.npz]
                                                      [--min-face-sizes 20,30,40] [--det det.png]

For each seed, composes a video with `make-video --augment hard --strangers packaged` (faces 100-430 px, rolled,
lit, blurred, compressed, occluded, over clutter; about 30% of the faces are strangers who share no person with
the calibration set), then runs the pipeline's own compute on every frame: decode, resize, MTCNN, aligned
thumbnail, PNG, FaceNet, the gallery's open-set decision (the real `MtcnnFaceFinder` and `FaceNetIdentifier`,
without Kafka: Kafka cannot change a name). Prints per seed and pooled: detection recall, identification rate of
enrolled people (rank 1, 1 - FNIR), false identification rate of strangers (FPIR), the threshold and
identify ms per face; then recall and names by face height at each smallest face MTCNN looks for, beside what
each costs a frame in CPU on one core; draws the pooled DET curve. Not a test: a benchmark of accuracy on inputs
of your choosing.
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="1001,1002,1003", help="video seeds (default 1001,1002,1003)")
    parser.add_argument("--seconds", type=float, default=40.0, help="length of each video (default 40)")
    parser.add_argument("--gallery", type=Path, help="a gallery (default: enroll the train split, calibrated)")
    parser.add_argument("--augment", default="hard", choices=("hard", "small"),
                        help="the videos' faces: hard (100-430 px at 1920x1080), or small (40-200 px), as make-video")
    parser.add_argument("--min-face-sizes", default="20,30,40",
                        help="MTCNN's smallest face in px at 960x540, each run on every frame (default 20,30,40)")
    parser.add_argument("--det", type=Path, default=Path("recognition_det.png"), help="the pooled DET curve PNG")
    args = parser.parse_args()
    seeds = [int(seed) for seed in args.seeds.split(",")]
    sizes = [int(size) for size in args.min_face_sizes.split(",")]

    from tqdm import tqdm

    from pipeline.assets import ensure_assets
    from pipeline.evaluate import Evaluation, plot_det, score
    from pipeline.facenet import FaceEmbedder
    from pipeline.facenet_keras import set_tf_threads
    from pipeline.frames import read_frames
    from pipeline.gallery import load_gallery
    from pipeline.identify import FaceNetIdentifier
    from pipeline.ingest_detect import MtcnnFaceFinder
    from pipeline.inputs import compose_video, enroll_gallery
    from pipeline.schema import FaceMessage, FaceMeta, IdentityMessage
    from pipeline.synth_video import load_truth
    from telemetry.timing import Stopwatch

    set_tf_threads(1, 1)  # one core, as an ingest-detect container has: its CPU time is its time
    workdir = Path(tempfile.mkdtemp(prefix="recognition-bench-"))
    gallery_path = args.gallery or workdir / "gallery.npz"
    if args.gallery is None:
        enroll_gallery(None, gallery_path)
    gallery = load_gallery(gallery_path)
    finders = {size: MtcnnFaceFinder(min_face_size=size, frame_size=(960, 540)) for size in sizes}
    identifier = FaceNetIdentifier(FaceEmbedder(ensure_assets().facenet_weights), gallery)

    pooled = {size: Evaluation(f"min face {size}") for size in sizes}
    detect_ms: dict[int, list[float]] = {size: [] for size in sizes}
    identify_ms: list[float] = []
    for seed in seeds:
        video = workdir / f"{args.augment}-{seed}.mp4"
        compose_video(None, video, args.seconds, 10.0, seed, augment=args.augment, strangers="packaged")
        truth = load_truth(video)
        identities: dict[int, list] = {size: [] for size in sizes}
        for frame in tqdm(read_frames(str(video), "bench", (960, 540), pace="max"), total=len(truth["frames"]),
                          desc=f"seed {seed}", unit="frame"):
            for size, finder in finders.items():  # interleaved: the machine's noise falls on every size alike
                started = time.process_time()
                found = finder(frame.rgb, Stopwatch())
                detect_ms[size].append((time.process_time() - started) * 1000)
                faces = [FaceMessage(FaceMeta("bench", "bench", frame.index, i, len(found), face.box,
                                              face.confidence, face.encoding, 0, 0, 0, 0, 0, 0), face.thumbnail)
                         for i, face in enumerate(found)]
                if not faces:
                    continue
                started = time.process_time()
                matches = identifier(faces, Stopwatch())
                identify_ms.append((time.process_time() - started) * 1000 / len(faces))
                identities[size] += [IdentityMessage.answering(face.meta, match, appended_ns=0, requested_ns=0,
                                                               fetched_ns=0, identify_start_ns=0, identified_ns=0,
                                                               batch_size=len(faces))
                                     for face, match in zip(faces, matches, strict=True)]
        for size in sizes:
            evaluation = score(identities[size], truth, {"bench": set(range(len(truth["frames"])))}, (960, 540),
                               "bench")
            print(f"seed {seed}, min face {size}: {_line(evaluation)}")
            pooled[size].add(evaluation)

    calibration = gallery.calibration
    for size in sizes:
        print(f"pooled over {len(seeds)} videos, min face {size}: {_line(pooled[size])}")
    print(_size_table(pooled, detect_ms))
    print(f"threshold {gallery.threshold:.4f}" + (f" ({calibration.describe()})" if calibration else " (fixed)"))
    print(f"identify CPU per face (decode + FaceNet + decision, batches as found per frame): "
          f"median {statistics.median(identify_ms):.1f} ms")
    if plot_det(pooled[sizes[-1]], gallery.threshold, args.det):
        print(f"DET curve (min face {sizes[-1]}): {args.det}")
    return 0


def _size_table(pooled: dict, detect_ms: dict[int, list[float]]) -> str:
    """Recall by face height at each smallest face, then what each costs a frame on one core (the 10 FPS budget
    of an ingest-detect is 100 ms a frame, decoding and resizing included)."""
    from pipeline.evaluate import HEIGHT_BINS

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
