"""The emulated stage commands a Deployment runs (`emulate-producers`, `emulate-detectors`, `emulate-consumers`):
the real stage loops and Kafka code, their compute replaced by a profile's times or a device's curve."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

import click

from aitax.commands.options import (
    batching,
    keying,
    options,
    results_linger,
    stage_options,
)
from aitax.common.errors import UserError

if TYPE_CHECKING:  # the runtime pulls in the Prometheus client: only the stage commands load it
    from aitax.pipeline.runtime import StageSettings
    from aitax.pipeline.transport.batcher import BatchPolicy


def accelerator_option(command):
    """`--accelerator`: a device's curve in place of a stage's profile times (emulated stages and the sweep)."""
    from aitax.emulation.curves import built_in_curves

    return click.option("--accelerator", multiple=True, metavar="NAME|FILE",
                        help="a device's time per batch in place of a stage's profile times (the curve file names "
                             f"its stage; repeat for both stages): shipped {', '.join(built_in_curves())}, or a file "
                             "`aitax calibrate` wrote. The factor still raises the load and divides the other "
                             "stages")(command)


compute_option = click.option("--compute", type=click.Choice(("sleep", "cpu")), default="sleep",
                              help="what the profile's compute does for its time: sleep (default; the host's cores "
                                   "stay free, as with an accelerator, the paper's emulator) or cpu (it takes that "
                                   "much CPU time on a host core, as the CPU pipeline the profile was measured on "
                                   "did). A curve says this itself (host_cpu)")

# An emulated stage process's options (emulate-producers, -detectors, -consumers), what a Deployment passes.
_stage_process = options(
    click.option("--instances", type=int, default=1, show_default=True, help="emulated instances in this process"),
    click.option("--factor", type=float, default=1.0, help="AI acceleration factor: sleeps are divided by it"),
    click.option("--profile", default="paper", help="built-in profile (paper, paper-video) or a YAML file"),
    click.option("--run-id", envvar="AITAX_RUN_ID", show_envvar=True, default="emulated", show_default=True,
                 help="run id of the faces"),
    click.option("--topic-prefix", default="", help="use PREFIXfaces, PREFIXidentities, PREFIXfaces.dlq"),
    accelerator_option,
    compute_option,
    stage_options,
)


def accelerator_curves(names: Iterable[str]) -> dict:
    """The curves of `--accelerator`, by the stage each replaces; two for one stage is a UserError."""
    from aitax.emulation.curves import load_curve

    curves: dict = {}
    for name in names:
        curve = load_curve(name)
        if curve.stage in curves:
            raise UserError(f"--accelerator {name}: {curves[curve.stage].name} already replaces {curve.stage}")
        curves[curve.stage] = curve
    return curves


def register(root: click.Group) -> None:
    """Add this module's commands, in the order `aitax --help` lists them."""
    for command in (emulate_producers_command, emulate_detectors_command, emulate_consumers_command):
        root.add_command(command)


@click.command("emulate-producers", short_help="emulated ingest/detect instances (one process)",
               help="N emulated ingest/detect instances, each on its own schedule, sharing one Kafka producer.")
@_stage_process
@click.option("--stream-prefix", default="stream", help="stream ids are PREFIX-0 .. PREFIX-(N-1)")
@click.option("--duration", type=float, help="stop after this many seconds (default: until signalled)")
@click.option("--in-flight", type=int, metavar="N", envvar="AITAX_IN_FLIGHT", show_envvar=True,
              help="closed loop: each stream keeps N frames between ingest and their last identity (default: open "
                   "loop, fps x factor; the chart's emulator.producers.inFlight, an experiment phase's in_flight)")
@click.option("--stages", type=click.Choice((2, 3)), default=2,
              help="3: ingest instances that publish frames (random bytes of a measured JPEG's size) to the frames "
                   "topic, for emulate-detectors (the paper's Fig. 3a)")
@keying
def emulate_producers_command(instances: int, factor: float, profile: str, run_id: str, topic_prefix: str,
                              accelerator: tuple[str, ...], compute: str, settings: StageSettings,
                              stream_prefix: str, duration: float | None, in_flight: int | None, stages: int,
                              keying: str) -> int:
    from aitax.emulation.workers import run_producer_instances
    from aitax.pipeline.stage_process import stage_process

    if in_flight is not None and in_flight < 1:
        raise UserError(f"--in-flight {in_flight}: at least 1 frame per stream")
    if in_flight is not None and stages == 3:
        raise UserError("--in-flight: a closed loop runs two stages, not --stages 3")
    emulated, topics = _stage_setup(settings, factor, profile, accelerator, compute, topic_prefix)
    # A closed loop learns of completed frames from the identities, in a group of its own that commits nothing.
    with stage_process(settings, "emulator", "emulate-producers", reads=[topics.identities] if in_flight else [],
                       writes=[topics.faces if stages == 2 else topics.frames],
                       group=f"closed-loop-{run_id}-{stream_prefix}" if in_flight else None) as process:
        process.ready()  # a run's clock starts with the frames
        deadline = time.monotonic() + duration if duration else float("inf")
        stats = run_producer_instances(instances, f"{run_id}-{stream_prefix}", emulated, process.producer,
                                       process.sink, run_id, topics,
                                       lambda: process.stop() or time.monotonic() >= deadline, keying=keying,
                                       in_flight=in_flight, identities=process.consumers[0] if in_flight else None,
                                       stages=stages)
    return _report_produced("emulate-producers", stats)


def _report_produced(command: str, stats: list) -> int:
    """Report and print what producing instances did (frames, faces: none when they send frames, records
    acknowledged, bytes, delivery failures); exit 1 on a failed delivery."""
    from aitax.pipeline.stage_process import finish

    summary = {"frames": sum(s.frames for s in stats), "faces": sum(getattr(s, "faces", 0) for s in stats),
               "acknowledged": sum(s.acknowledged for s in stats), "bytes": sum(s.bytes_sent for s in stats),
               "failed": sum(len(s.failed) for s in stats)}
    finish(command, summary, json.dumps(summary))
    return 1 if summary["failed"] else 0


@click.command("emulate-detectors",
               short_help="emulated three-stage detect instances (one process): frames -> faces",
               help="N emulated detect instances, each its own consumer of the frames topic in the group, through "
                    "the real frame hand-off and detect loop with detection's compute as a sleep.")
@_stage_process
@click.option("--group", default="detect", show_default=True, help="consumer group")
@keying
@batching(4, "frames whose faces are acknowledged and committed together")
def emulate_detectors_command(instances: int, factor: float, profile: str, run_id: str, topic_prefix: str,
                              accelerator: tuple[str, ...], compute: str, settings: StageSettings, group: str,
                              keying: str, batching: BatchPolicy) -> int:
    from aitax.emulation.workers import run_detector_instances
    from aitax.pipeline.stage_process import stage_process

    emulated, topics = _stage_setup(settings, factor, profile, accelerator, compute, topic_prefix)
    with stage_process(settings, "emulator", "emulate-detectors", reads=[topics.frames], writes=[topics.faces],
                       group=group, consumers=instances) as process:
        stats = run_detector_instances(process.consumers, process.producer, emulated, process.sink, run_id,
                                       topics, process.stop, keying=keying, on_ready=process.ready,
                                       batching=batching)
    return _report_produced("emulate-detectors", stats)


@click.command("emulate-consumers", short_help="emulated identify instances (one process)",
               help="M emulated identify instances, each its own consumer in the group, committing after results "
                    "are durable.")
@_stage_process
@click.option("--group", default="identify", show_default=True, help="consumer group")
@batching(1, "faces (1: the paper's per-face identify)")
@results_linger
@click.option("--skip-other-runs", is_flag=True,
              help="identify only faces of --run-id: other runs' are skipped and committed (for topics other runs "
                   "share)")
def emulate_consumers_command(instances: int, factor: float, profile: str, run_id: str, topic_prefix: str,
                              accelerator: tuple[str, ...], compute: str, settings: StageSettings, group: str,
                              batching: BatchPolicy, results_linger_ms: float, skip_other_runs: bool) -> int:
    from aitax.emulation.workers import run_consumer_instances
    from aitax.pipeline.stage_process import CONSUMER_CLOSE_S, finish, stage_process

    emulated, topics = _stage_setup(settings, factor, profile, accelerator, compute, topic_prefix)
    # One producer shared by the instances, idempotent: an identity is never published twice.
    with stage_process(settings, "emulator", "emulate-consumers", reads=[topics.faces], writes=[topics.identities],
                       group=group, consumers=instances, idempotent=True, linger_ms=results_linger_ms) as process:
        # The sweep starts its producers once every instance has partitions: group formation is not broker wait.
        stats = run_consumer_instances(process.consumers, process.producer, emulated, process.sink, topics,
                                       process.stop, batching=batching, on_ready=process.ready,
                                       only_run=run_id if skip_other_runs else None)
    summary = {"faces": sum(s.faces for s in stats), "duplicates": sum(s.duplicates for s in stats)}
    finish("emulate-consumers", summary, json.dumps(summary))
    if process.stuck:
        # Its offsets are committed; the coordinator drops the member after its session timeout. Waiting longer
        # would only get this process killed and its run's summary lost.
        print(f"emulate-consumers: {process.stuck} consumer(s) did not leave group {group} within "
              f"{CONSUMER_CLOSE_S:g} s; exiting without them", flush=True)
        os._exit(0)
    return 0


def _stage_setup(settings: StageSettings, factor: float, profile: str, accelerator: Iterable[str], compute: str,
                 topic_prefix: str):
    """What the emulated stage processes check and resolve before starting: (the emulated compute, topics)."""
    from aitax.emulation.profile import load_profile
    from aitax.emulation.workers import EmulatedCompute
    from aitax.pipeline.schema import DEFAULT_TOPICS, Topics
    from aitax.pipeline.transport.admin import require_brokers

    if factor <= 0:
        raise UserError(f"--factor {factor}: must be > 0")
    emulated = EmulatedCompute(load_profile(profile), factor, accelerator_curves(accelerator), compute == "cpu")
    require_brokers(settings.bootstrap)
    return emulated, Topics.with_prefix(topic_prefix) if topic_prefix else DEFAULT_TOPICS
