"""Tools over runs and devices: `audit` and `collect` (a run's topics read back), `calibrate` (a device's curve),
`gpu-bundle` and `gpu-check` (calibrating on a lent GPU machine) and `profile` (an emulation profile from a real run's
events)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from aitax.commands.options import BOOTSTRAP, COUNTS, DIR, FILE, options
from aitax.common.errors import UserError

_run_topics = options(
    BOOTSTRAP,
    click.option("--topic-prefix", default="", help="the run's topics are PREFIXfaces, PREFIXidentities, ..."),
)


def register(root: click.Group) -> None:
    """Add this module's commands, in the order `aitax --help` lists them."""
    for command in (audit_command, collect_command, calibrate_command, gpu_bundle_command, gpu_check_command,
                    profile_command):
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
@click.option("--precision", type=click.Choice(("auto", "fp32", "bf16", "int8")), default="auto",
              help="identify: FaceNet's arithmetic (default auto: bf16 where the CPU has it, else int8)")
@click.option("--threads", type=int, default=1, show_default=True, help="identify: FaceNet's threads")
@click.option("--batches", type=COUNTS, default="1,2,4,8,16,32,64", show_default=True, metavar="N,N,...",
              help="identify: batch sizes to time")
@click.option("--repeats", type=int, default=10, show_default=True, help="timed runs per batch size")
@click.option("--video", help="detect: the video whose frames to time (`aitax make-video`)")
@click.option("--frames", type=int, default=20, show_default=True, help="detect: frames of the video to cycle")
@click.option("--min-face-size", type=int, default=40, show_default=True, help="detect: MTCNN's smallest face")
@click.option("--conversions", type=DIR, metavar="DIR",
              help="cuda: the networks of a GPU bundle (`aitax gpu-bundle`), not those kept from the downloaded "
                   "weights: for a GPU machine without TensorFlow or the weights")
@click.option("--name", help="the curve's name (default: its runtime and precision, or mtcnn and its face size)")
def calibrate_command(stage: str, out: Path, runtime: str, precision: str, threads: int, batches: tuple[int, ...],
                      repeats: int, video: str | None, frames: int, min_face_size: int,
                      conversions: Path | None, name: str | None) -> int:
    from tqdm import tqdm

    from aitax.emulation.calibrate import calibrate_detect, calibrate_identify
    from aitax.emulation.curves import load_curve

    if repeats < 1 or threads < 1 or frames < 1:
        raise UserError(f"--repeats {repeats} --threads {threads} --frames {frames}: each at least 1")
    if conversions is not None and runtime != "cuda":
        raise UserError(f"--conversions {conversions}: a GPU bundle runs through --runtime cuda, not {runtime}")
    if stage == "identify":
        with tqdm(total=len(batches), desc="batch sizes", unit="size") as bar:
            path = calibrate_identify(out, runtime, precision, threads, batches, repeats,
                                      progress=lambda _: bar.update(), conversions=conversions, name=name)
    else:
        from aitax.pipeline.frames import open_video

        if not video:
            raise UserError("calibrate detect: --video VIDEO, the frames to time (e.g. from `aitax make-video`)")
        if runtime == "tensorflow":
            raise UserError("calibrate detect --runtime tensorflow: MTCNN runs through openvino or cuda")
        open_video(video).release()  # a bad path is one line before the models load
        with tqdm(total=1, desc="frames", unit="curve") as bar:
            path = calibrate_detect(out, video, min_face_size, frames, repeats, progress=lambda _: bar.update(),
                                    runtime=runtime, conversions=conversions, name=name)
    curve = load_curve(str(path))
    print(f"wrote {path}: {curve.name}, " + ", ".join(f"batch {n}: {ms:.2f} ms ({ms / n:.2f} per item)"
                                                      for n, ms in curve.points))
    return 0


@click.command(
    "gpu-bundle", short_help="what a lent GPU machine needs to check and calibrate the cuda runtime (64 MiB)",
    help="Writes DIR for a GPU machine with PyTorch but no TensorFlow, weights or package registry: the networks' "
         "ONNX conversions (FaceNet's weights in fp16, to fit 64 MiB), frames of --video with the CPU detector's "
         "findings, aligned faces with the CPU path's embeddings, and the wheels the device's Python lacks. "
         "`scripts/device-calibrate.sh` uses it there (docs/accelerators.md).")
@click.argument("folder", type=DIR, metavar="DIR")
@click.option("--video", required=True, help="the video whose frames and faces to take (`aitax make-video`)")
@click.option("--frames", type=int, default=25, show_default=True, help="frames whose boxes the device checks")
@click.option("--thumbnails", type=int, default=100, show_default=True,
              help="aligned faces whose embeddings the device checks")
@click.option("--min-face-size", type=int, default=40, show_default=True, help="MTCNN's smallest face")
def gpu_bundle_command(folder: Path, video: str, frames: int, thumbnails: int, min_face_size: int) -> int:
    from tqdm import tqdm

    from aitax.emulation.device_bundle import write_bundle
    from aitax.pipeline.frames import open_video

    if frames < 1 or thumbnails < 1:
        raise UserError(f"--frames {frames} --thumbnails {thumbnails}: each at least 1")
    open_video(video).release()  # a bad path is one line before the models load
    steps = ("conversions", "frames", "embeddings", "wheels")
    with tqdm(total=len(steps), desc="gpu bundle", unit="step") as bar:
        manifest = write_bundle(folder, video, frames, thumbnails, min_face_size,
                                progress=lambda step: (bar.set_postfix_str(step), bar.update()))
    size = sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())
    print(f"wrote {folder}: {size / 2**20:.1f} MiB, {len(manifest['frames'])} frames, {thumbnails} faces; FaceNet's "
          f"fp16 weights give embeddings within cosine {manifest['weights_rounding_min_cosine']:.7f} of the full ones")
    return 0


@click.command(
    "gpu-check", short_help="the cuda runtime against the CPU path's embeddings and boxes, from a GPU bundle",
    help="Runs a GPU bundle's networks through the cuda runtime (PyTorch) and compares them with the CPU path's "
         "references it carries: FaceNet's embeddings (cosine >= 0.9999) and MTCNN's boxes, confidences and "
         "landmarks. Prints each condition; exit 1 if one does not hold.")
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path), metavar="DIR")
@click.option("--out", type=FILE, help="also write the result as JSON here")
@click.option("--device", default="cuda", show_default=True,
              help="torch device: cuda, or cpu to try the bundle on a machine without a GPU")
def gpu_check_command(folder: Path, out: Path | None, device: str) -> int:
    from aitax.emulation.device_bundle import check_bundle

    result = check_bundle(folder, device)
    for condition in result["conditions"]:
        print(f"{'holds' if condition['holds'] else 'FAILS'}  {condition['condition']}: {condition['measured']}")
    if out is not None:
        out.write_text(json.dumps(result, indent=1))
    return 0 if result["holds"] else 1


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
