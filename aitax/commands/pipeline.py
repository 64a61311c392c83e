"""The pipeline's drivers: a local run of its stage processes, two designs side by side, the demo, a run scored
against its ground truth, and the core-scaling study."""

from __future__ import annotations

from pathlib import Path

import click

from aitax.commands.options import (
    BOOTSTRAP,
    COUNTS,
    DIR,
    FILE,
    driver,
    driver_timing,
    keying,
    measurement,
    send,
)
from aitax.commands.stages import PACE
from aitax.common.errors import UserError, invalid
from aitax.pipeline.inputs import compose_video, enroll_gallery
from aitax.runs.applications import APPLICATIONS


def register(root: click.Group) -> None:
    """Add this module's commands, in the order `aitax --help` lists them."""
    for command in (run, compare_stages, demo, evaluate, core_scaling):
        root.add_command(command)


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
    from aitax.runs.results import Driver
    from aitax.stack.stack import resolve_bootstrap

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
    from aitax.runs.results import Workload

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
