"""Tools over runs and devices: `audit` and `collect` (a run's topics read back), `calibrate` (a device's curve)
and `profile` (an emulation profile from a real run's events)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from aitax.commands.options import BOOTSTRAP, COUNTS, FILE, options
from aitax.common.errors import UserError

_run_topics = options(
    BOOTSTRAP,
    click.option("--topic-prefix", default="", help="the run's topics are PREFIXfaces, PREFIXidentities, ..."),
)


def register(root: click.Group) -> None:
    """Add this module's commands, in the order `aitax --help` lists them."""
    for command in (audit_command, collect_command, calibrate_command, profile_command):
        root.add_command(command)


@click.command(
    "audit", short_help="account for a run's faces once its consumers are idle: in `faces`, identified, lost",
    help="Reads the `faces` and `identities` topics of a run (real or emulated, local or in a cluster) and prints "
         "the accounting `aitax faults` uses as JSON: distinct faces the brokers hold, how many have an identity, "
         "duplicates, dead letters, the longest gap between appends. Exit 1 if a face the brokers hold was never "
         "identified.")
@click.option("--run-id", required=True, help="the run whose faces to account for")
@_run_topics
def audit_command(run_id: str, bootstrap: str | None, topic_prefix: str) -> int:
    from dataclasses import asdict

    from aitax.emulation.faults import audit_topics
    from aitax.pipeline.schema import Topics
    from aitax.pipeline.transport.admin import require_brokers
    from aitax.stack.stack import resolve_bootstrap

    brokers = resolve_bootstrap(bootstrap)
    topics = Topics.with_prefix(topic_prefix)
    require_brokers(brokers, topics=(topics.faces, topics.identities))
    audit = audit_topics(brokers, run_id, topics)
    print(json.dumps(asdict(audit)))
    return 0 if audit.lost == 0 else 1


@click.command(
    "collect", short_help="a consumer group's state and a run read back from its topics, as one JSON line",
    help="What the experiment driver asks from inside a pod of the release (where the brokers are reachable): "
         "with --group, the group's state on the faces topic (members, members holding partitions, lag); with "
         "--run-id, the run's faces the brokers hold and the timestamps of its identities. Thumbnails are never "
         "printed.")
@click.option("--group", help="consumer group whose state on the faces topic to report")
@click.option("--run-id", help="the run to read back from the faces and identities topics")
@click.option("--since-ms", type=int, metavar="EPOCH_MS",
              help="the run began after this time: older records are not read (default: all)")
@_run_topics
def collect_command(group: str | None, run_id: str | None, since_ms: int | None, bootstrap: str | None,
                    topic_prefix: str) -> int:
    from aitax.pipeline.schema import Topics
    from aitax.pipeline.transport.admin import require_brokers
    from aitax.pipeline.transport.readback import Collected, group_state, read_run
    from aitax.stack.stack import resolve_bootstrap

    if not group and not run_id:
        raise UserError("collect: give --group, --run-id or both")
    brokers = resolve_bootstrap(bootstrap)
    topics = Topics.with_prefix(topic_prefix)
    require_brokers(brokers, topics=(topics.faces, topics.identities))
    collected = Collected(
        group=group_state(brokers, group, topics.faces) if group else None,
        readback=read_run(brokers, run_id, topics.faces, topics.identities, since_ms) if run_id else None)
    print(collected.model_dump_json(), flush=True)
    return 0


@click.command(
    "calibrate", short_help="this machine's device curve (time per batch) for --accelerator FILE",
    help="Times the real compute of a stage on this machine and writes a curve file that `aitax emulate "
         "--accelerator FILE` reads: identify, thumbnail decode + FaceNet per batch of --batches thumbnails through "
         "--runtime in --precision; detect, MTCNN with alignment and thumbnails one frame per call on a video's "
         "frames. STAGE: identify or detect.")
@click.argument("stage", type=click.Choice(("identify", "detect")), metavar="STAGE")
@click.option("--out", type=FILE, required=True, help="curve YAML to write")
@click.option("--runtime", type=click.Choice(("openvino", "tensorflow", "cuda")), default="openvino",
              help="the networks' runtime (default openvino; cuda: an NVIDIA GPU, the gpu extra; tensorflow: "
                   "identify only)")
@click.option("--precision", type=click.Choice(("auto", "fp32", "bf16")), default="auto",
              help="identify: FaceNet's arithmetic (default auto: bf16 where the CPU has it)")
@click.option("--threads", type=int, default=1, show_default=True, help="identify: FaceNet's threads")
@click.option("--batches", type=COUNTS, default="1,2,4,8,16,32,64", show_default=True, metavar="N,N,...",
              help="identify: batch sizes to time")
@click.option("--repeats", type=int, default=10, show_default=True, help="timed runs per batch size")
@click.option("--video", help="detect: the video whose frames to time (`aitax make-video`)")
@click.option("--frames", type=int, default=20, show_default=True, help="detect: frames of the video to cycle")
@click.option("--min-face-size", type=int, default=40, show_default=True, help="detect: MTCNN's smallest face")
def calibrate_command(stage: str, out: Path, runtime: str, precision: str, threads: int, batches: tuple[int, ...],
                      repeats: int, video: str | None, frames: int, min_face_size: int) -> int:
    from tqdm import tqdm

    from aitax.emulation.calibrate import calibrate_detect, calibrate_identify
    from aitax.emulation.curves import load_curve

    if repeats < 1 or threads < 1 or frames < 1:
        raise UserError(f"--repeats {repeats} --threads {threads} --frames {frames}: each at least 1")
    if stage == "identify":
        with tqdm(total=len(batches), desc="batch sizes", unit="size") as bar:
            path = calibrate_identify(out, runtime, precision, threads, batches, repeats,
                                      progress=lambda _: bar.update())
    else:
        from aitax.pipeline.frames import open_video

        if not video:
            raise UserError("calibrate detect: --video VIDEO, the frames to time (e.g. from `aitax make-video`)")
        if runtime == "tensorflow":
            raise UserError("calibrate detect --runtime tensorflow: MTCNN runs through openvino or cuda")
        open_video(video).release()  # a bad path is one line before the models load
        with tqdm(total=1, desc="frames", unit="curve") as bar:
            path = calibrate_detect(out, video, min_face_size, frames, repeats, progress=lambda _: bar.update(),
                                    runtime=runtime)
    curve = load_curve(str(path))
    print(f"wrote {path}: {curve.name}, " + ", ".join(f"batch {n}: {ms:.2f} ms ({ms / n:.2f} per item)"
                                                      for n, ms in curve.points))
    return 0


@click.command("profile", short_help="derive an emulation profile from a real run's events",
               help="Derive an emulation profile from a real run's events: its compute times, thumbnail sizes and "
                    "faces per frame.")
@click.option("--run", "run_id", required=True, help="run id")
@click.option("--events", help="JSONL folder or file of the run (default: the local Elasticsearch)")
@click.option("--out", type=FILE, required=True, help="profile YAML to write")
def profile_command(run_id: str, events: str | None, out: Path) -> int:
    from aitax.emulation.profile import derive_profile
    from aitax.stack.stack import local_elasticsearch_url
    from aitax.telemetry.event_sources import load_events

    source = events or local_elasticsearch_url("--events")
    profile = derive_profile(load_events(run_id, source).documents, run_id)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(profile.to_yaml())
    means = {stage: round(d.mean(), 1) for stage, d in profile.compute_ms.items()}
    print(f"wrote {out}: mean compute ms {means}, thumbnail {profile.thumbnail_bytes.mean():,.0f} bytes, "
          f"{profile.mean_faces_per_frame():.2f} faces/frame")
    return 0
