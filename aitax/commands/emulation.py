"""Emulator commands: `emulate` (the sweep), `emulate-scaling` (Fig. 15), the two stage-process commands a
Deployment runs (`emulate-producers`, `emulate-consumers`), and `profile` (derive one from a real run)."""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from aitax.commands.options import (
    BOOTSTRAP,
    COUNTS,
    Parsed,
    batching,
    driver,
    driver_timing,
    kafka_client_option,
    keying,
    measurement,
    options,
    results_linger,
    stage_options,
)
from aitax.common.errors import UserError
from aitax.emulation.curves import BASELINE_CURVE
from aitax.telemetry.applications import APPLICATIONS

if TYPE_CHECKING:  # the runtime pulls in the Prometheus client: only the stage commands load it
    from aitax.pipeline.runtime import StageSettings
    from aitax.pipeline.transport.batcher import BatchPolicy


def _parse_factors(text: str) -> list[float]:
    try:
        return [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError("expected numbers separated by commas, e.g. 1,2,4,8") from None


def _parse_duration_ms(text: str) -> float:
    from aitax.telemetry.quantiles import parse_duration_ms

    try:
        return parse_duration_ms(text)
    except ValueError as error:  # Parsed names the value itself
        raise ValueError(str(error).removeprefix(f"{text!r}: ")) from None


FACTORS = Parsed("F,F,...", _parse_factors)
DURATION = Parsed("TIME", _parse_duration_ms)
FILE = click.Path(dir_okay=False, path_type=Path)
FOLDER = click.Path(file_okay=False, path_type=Path)
DEFAULT_FACTORS = "1,2,4,8,16,32"


def _accelerator(command):
    from aitax.emulation.curves import built_in_curves

    return click.option("--accelerator", multiple=True, metavar="NAME|FILE",
                        help="a device's time per batch in place of a stage's profile times (the curve file names "
                             f"its stage; repeat for both stages): shipped {', '.join(built_in_curves())}, or a file "
                             "`aitax calibrate` wrote. The factor still raises the load and divides the other "
                             "stages")(command)


_compute = click.option("--compute", type=click.Choice(("sleep", "cpu")), default="sleep",
                        help="what the profile's compute does for its time: sleep (default; the host's cores stay "
                             "free, as with an accelerator, the paper's emulator) or cpu (it takes that much CPU "
                             "time on a host core, as the CPU pipeline the profile was measured on did). A curve "
                             "says this itself (host_cpu)")

# An emulated stage process's options (emulate-producers, -detectors, -consumers), what a Deployment passes.
_stage_process = options(
    click.option("--instances", type=int, default=1, show_default=True, help="emulated instances in this process"),
    click.option("--factor", type=float, default=1.0, help="AI acceleration factor: sleeps are divided by it"),
    click.option("--profile", default="paper", help="built-in profile (paper, paper-video) or a YAML file"),
    click.option("--run-id", envvar="AITAX_RUN_ID", show_envvar=True, default="emulated", show_default=True,
                 help="run id of the faces"),
    click.option("--topic-prefix", default="", help="use PREFIXfaces, PREFIXidentities, PREFIXfaces.dlq"),
    _accelerator,
    _compute,
    stage_options,
)

_run_topics = options(
    BOOTSTRAP,
    click.option("--topic-prefix", default="", help="the run's topics are PREFIXfaces, PREFIXidentities, ..."),
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
    for command in (emulate_command, emulate_scaling_command, faults_command, audit_command, collect_command,
                    emulate_producers_command, emulate_detectors_command, emulate_consumers_command,
                    calibrate_command, profile_command):
        root.add_command(command)


# `emulate`: what load, where results go, how it runs, and what stands in for a stage's compute.
_sweep_load = options(
    click.option("--factors", type=FACTORS, default=DEFAULT_FACTORS, show_default=True,
                 help="AI acceleration factors to sweep"),
    click.option("--duration", type=float, default=30.0, show_default=True, help="seconds of load per factor"),
    click.option("--warmup", type=float, default=15.0,
                 help="seconds of unmeasured 1x load first, so cold brokers do not skew 1x (default 15; 0: none); on a "
                      "testbed the brokers run it out of their CPU slices"),
    click.option("--workload", type=click.Choice(tuple(APPLICATIONS)), default="face-recognition",
                 help="face-recognition (default), or object-detection: the paper's second application (Sec. 6): "
                      "every frame through Kafka at 30 FPS x factor to a 687 ms R-CNN"),
    click.option("--producers", type=int,
                 help="emulated ingest/detect instances (default 4; object-detection: 1 stream)"),
    click.option("--consumers", type=int,
                 help="emulated identify (object-detection: detection) instances (default 8; object-detection: 24, "
                      "enough for one 30 FPS stream at 687 ms per frame)"),
    click.option("--processes", type=int, default=2, help="OS processes per side (default 2: two cores)"),
    click.option("--stages", type=click.Choice((2, 3)), default=2,
                 help="face-recognition's design: 2 (default) or 3, frames (random bytes of the measured JPEG size) "
                      "through Kafka to emulated detect instances, one per stream (the paper's Fig. 3a)"),
    click.option("--brokers", type=int, help="brokers the running stack must have (checked, not started)"),
    click.option("--profile", help="built-in profile (paper, paper-video, object-detection) or a YAML file "
                                   "(default: the workload's: paper, object-detection)"),
    click.option("--face-scale", type=float, default=1.0, help="thumbnail size factor (Fig. 15c: 0.5, 0.25)"),
)

_sweep_output = options(
    click.option("--out", type=FILE, help="results JSON (default .aitax/emulation/RUN/results.json)"),
    click.option("--plots", type=FOLDER, help="folder for the plots: Fig. 10/11, latency quantiles on "
                                              "log-probability axes, throughput against latency"),
    click.option("--html", type=FILE, metavar="FILE", help="one self-contained page: the table and the plots"),
)

_sweep_runs = options(
    kafka_client_option,
    click.option("--repeat", type=int, default=1, show_default=True,
                 help="runs per factor, taken round the factors; tables show median and min-max"),
    click.option("--in-flight", type=COUNTS, default=(), metavar="N,N,...",
                 help="closed loop: one run per count of frames each stream keeps between ingest and their last "
                      "identity (a concurrency sweep, per factor) instead of the fps x factor schedule"),
    click.option("--latency-bound", type=DURATION,
                 help="search for the highest factor between the lowest and highest of --factors whose --quantile "
                      "of end to end stays within TIME (e.g. 500ms) and holds every other condition: "
                      "latency-bounded throughput, by bisection"),
    click.option("--quantile", type=float, default=0.99, show_default=True,
                 help="the quantile --latency-bound applies to"),
    click.option("--stop-after", type=int, default=2, metavar="N",
                 help="end the sweep after N factors in a row past the knee or unstable; the rest are listed as "
                      "not run (default 2; 0: run every factor)"),
    click.option("--drain", type=float, default=15.0, show_default=True,
                 help="seconds after each load for the consumers to catch up; what is left is the point's backlog"),
)

_sweep_devices = options(
    _accelerator,
    click.option("--baseline", default=BASELINE_CURVE, metavar="NAME|FILE",
                 help="the CPU curve an identify device's speed-up is read against, at the batch each point formed "
                      f"(default {BASELINE_CURVE}: this project's 2-core EPYC, OpenVINO bf16, 1 thread)"),
    _compute,
    click.option("--max-batch", type=int,
                 help="the emulated identify's largest batch (default 1: one face at a time, as the paper's "
                      "identify; a device curve gains from more)"),
)


@click.command(
    "emulate", short_help="sweep AI acceleration factors with emulated stages; find where the brokers break",
    help="For each factor: the real stage loops and Kafka code with compute replaced by sleeps (measured time / "
         "factor) and thumbnails by random bytes of the measured sizes; prints offered vs achieved throughput, "
         "latency and its breakdown, a stability verdict, broker disk/CPU and what saturated first.")
@options(_sweep_load, _sweep_output, _sweep_runs, _sweep_devices, measurement(ramp_up_s=2.0), keying, driver_timing)
def emulate_command(factors: list[float], duration: float, warmup: float, workload: str, producers: int | None,
                    consumers: int | None, processes: int, stages: int, brokers: int | None, profile: str | None,
                    face_scale: float, out: Path | None, plots: Path | None,
                    html: Path | None, kafka_client: str, repeat: int, in_flight: tuple[int, ...],
                    latency_bound: float | None, quantile: float, stop_after: int, drain: float,
                    accelerator: tuple[str, ...], baseline: str, compute: str, max_batch: int | None,
                    ramp_up: float, ramp_down: float, quantiles: tuple[float, ...], keying: str,
                    timing: dict[str, float]) -> int:
    from aitax.emulation.curves import load_curve
    from aitax.emulation.sweep import SweepSpec, run_sweep, search_latency_bound
    from aitax.stack.stack import running_config

    config = running_config()
    if brokers is not None and brokers != config.brokers:
        raise UserError(f"--brokers {brokers}: the running stack has {config.brokers}; "
                        f"`aitax stack down && aitax stack up --brokers {brokers}` first")
    if face_scale <= 0 or face_scale > 1:
        raise UserError(f"--face-scale {face_scale}: must be in (0, 1]")
    app = APPLICATIONS[workload]
    if stages == 3 and app.split is None:
        raise UserError(f"--stages 3: {app.name} has two stages; three are for an application that splits one")
    accelerator_curves(accelerator)  # every curve readable before anything starts
    load_curve(baseline)
    emulated = app.emulated
    loaded, profile_name = _sweep_profile(profile or emulated.profile, face_scale)
    spec = SweepSpec(factors, duration, emulated.producers if producers is None else producers,
                     emulated.consumers if consumers is None else consumers, processes, loaded, profile_name,
                     kafka_client, warmup_s=warmup, keying=keying, ramp_up_s=ramp_up,
                     ramp_down_s=ramp_down, repeats=repeat, quantiles=quantiles, in_flight=in_flight,
                     latency_bound_ms=latency_bound, latency_bound_quantile=quantile, stages=stages,
                     driver_settings=driver(timing, max_batch=max_batch), drain_s=drain, stop_after=stop_after,
                     accelerators=accelerator, compute=compute, baseline=baseline)
    if latency_bound is not None:
        sweep = search_latency_bound(spec, config, out=out)
    else:
        sweep = run_sweep(spec, config, out=out)
    _print_sweep(sweep, plots, html)
    return 0


def _sweep_profile(name: str, face_scale: float):
    """The sweep's profile and the name its stage processes load it by: with thumbnails scaled, a file of its own."""
    from aitax.emulation.profile import load_profile

    profile = load_profile(name)
    if face_scale != 1:
        profile = profile.scaled_faces(face_scale)
        path = Path(os.environ.get("TMPDIR", "/tmp")) / f"aitax-profile-{os.getpid()}.yaml"
        path.write_text(profile.to_yaml())
        name = str(path)
    return profile, name


def _print_sweep(sweep, plots: Path | None, html: Path | None) -> None:
    """The sweep's table, and its plots and page where asked for."""
    from aitax.emulation.plots import print_table, write_html, write_plots

    print_table(sweep)
    if plots or html:
        with tempfile.TemporaryDirectory() as scratch:
            figures = write_plots(sweep, plots or Path(scratch))
            if plots:
                for path in figures:
                    print(f"wrote {path}")
            if html:
                print(f"wrote {write_html(sweep, figures, html)}")


@click.command(
    "emulate-scaling",
    short_help="the paper's Fig. 15: highest stable factor per broker count, drives, face size",
    help="Repeats the sweep per configuration. brokers/drives restart Kafka (fresh storage) with each value and "
         "restore the original shape at the end; face-size scales the thumbnails. DIMENSION, what to vary: brokers, "
         "drives or face-size.")
@click.argument("dimension", type=click.Choice(("brokers", "drives", "face-size")), metavar="DIMENSION")
@click.option("--values", type=FACTORS, required=True, help="e.g. 3,4,6,8 or 1,0.5,0.25,0.125")
@click.option("--factors", type=FACTORS, default=DEFAULT_FACTORS, show_default=True,
              help="AI acceleration factors to sweep")
@click.option("--duration", type=float, default=20.0, show_default=True, help="seconds per factor")
@click.option("--warmup", type=float, default=20.0,
              help="seconds of unmeasured 1x load after each Kafka restart (default 20; 0: none)")
@click.option("--producers", type=int, default=4, show_default=True, help="emulated ingest/detect instances")
@click.option("--consumers", type=int, default=8, show_default=True, help="emulated identify instances")
@click.option("--processes", type=int, default=2, show_default=True, help="OS processes per side")
@click.option("--profile", default="paper", help="built-in profile or YAML file")
@click.option("--out", type=FILE, help="results JSON")
@click.option("--latency-bound", type=DURATION,
              help="per configuration, search for the highest factor whose --quantile stays within TIME "
                   "(latency-bounded throughput) instead of sweeping --factors")
@click.option("--quantile", type=float, default=0.99, show_default=True, help="for --latency-bound")
def emulate_scaling_command(dimension: str, values: list[float], factors: list[float], duration: float,
                            warmup: float, producers: int, consumers: int, processes: int, profile: str,
                            out: Path | None, latency_bound: float | None, quantile: float) -> int:
    from aitax.emulation.profile import load_profile
    from aitax.emulation.sweep import SweepSpec, run_scaling
    from aitax.stack.stack import running_config
    from aitax.telemetry.results import write_results

    running_config()  # brokers/drives restart a running Kafka; they never start a stack that is down
    limits = {"brokers": (3, 8), "drives": (1, 4), "face-size": (0.01, 1)}[dimension]
    bad = [v for v in values if not limits[0] <= v <= limits[1]]
    if bad:
        raise UserError(f"--values {bad[0]:g}: {dimension} must be between {limits[0]:g} and {limits[1]:g}")
    spec = SweepSpec(factors, duration, producers, consumers, processes, load_profile(profile), profile,
                     warmup_s=warmup, latency_bound_ms=latency_bound, latency_bound_quantile=quantile)
    scaling = run_scaling(dimension, values, spec)
    print()
    for line in scaling.table("below the knee" if latency_bound is None else f"within {latency_bound:g} ms"):
        print(line)
    if out:
        write_results(scaling, out)
    return 0


@click.command("faults", short_help="fault scenarios under emulated load: lost, duplicated, stall",
               help="Runs the emulated pipeline at a steady rate while a broker, the KRaft controller, two brokers, "
                    "a consumer or Elasticsearch fails, then accounts for every face. `node-failure` runs on "
                    "`aitax cluster` instead: a node holding a broker loses power under the release's emulated load "
                    "(--release, --namespace), then comes back.")
@click.option("--scenarios", default="all", show_default=True,
              help="comma-separated names, or all (the local stack's; node-failure only by name)")
@click.option("--factor", type=float, default=2.0, show_default=True, help="acceleration factor of the load")
@click.option("--release", default="aitax", show_default=True, help="node-failure: the release on the cluster")
@click.option("--namespace", default="aitax", show_default=True, help="node-failure: the release's namespace")
@click.option("--down", "down_s", type=float, default=30.0, show_default=True,
              help="node-failure: seconds the node stays down")
@click.option("--json", "json_out", type=FILE, help="write the results as JSON")
def faults_command(scenarios: str, factor: float, release: str, namespace: str, down_s: float,
                   json_out: Path | None) -> int:
    from aitax.common.paths import aitax_home
    from aitax.emulation.faults import SCENARIOS, print_table, run_disk_full, run_scenario
    from aitax.telemetry.results import FaultResults, write_results

    every = [*SCENARIOS, "broker-disk-full"]
    names = every if scenarios == "all" else scenarios.split(",")
    unknown = [n for n in names if n not in [*every, "node-failure"]]
    if unknown:
        raise UserError(f"--scenarios {unknown[0]!r}: choose from {', '.join(every)}, node-failure")
    local = [n for n in names if n not in ("broker-disk-full", "node-failure")]
    config = _local_stack(local) if local else None  # checked before any scenario runs
    results = []
    for name in names:
        print(f"== {name}", flush=True)
        if name == "broker-disk-full":  # a Kafka-only stack of its own, on size-limited filesystems
            results.append(run_disk_full(aitax_home() / "faults"))
        elif name == "node-failure":  # on the cluster of this machine, not the local stack
            from aitax.cluster.node import RealCluster
            from aitax.experiment.node_failure import run_node_failure

            cluster = RealCluster()
            if not cluster.is_running():
                raise UserError("node-failure runs on `aitax cluster`, which is not running: `aitax cluster up "
                                "--nodes 3` and a release with mode=emulated, prometheus.enabled=true")
            results.append(run_node_failure(cluster, release, namespace, down_s=down_s, factor=factor))
        else:
            results.append(run_scenario(name, config, factor=factor))
    print_table(results)
    if json_out:
        write_results(FaultResults(results=results), json_out)
    return 0 if all(r.verdict.held for r in results) else 1


def _local_stack(scenarios: list[str]):
    from aitax.stack.stack import running_config

    config = running_config()
    if not config.elasticsearch and "elasticsearch-outage" in scenarios:
        raise UserError("the elasticsearch-outage scenario needs the local stack with Elasticsearch")
    return config


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
    from aitax.common.children import READY, report
    from aitax.emulation.workers import run_producer_instances
    from aitax.pipeline.runtime import open_telemetry, stop_flag
    from aitax.pipeline.transport import make_consumer, make_producer
    from aitax.pipeline.transport.admin import require_brokers

    if in_flight is not None and in_flight < 1:
        raise UserError(f"--in-flight {in_flight}: at least 1 frame per stream")
    if in_flight is not None and stages == 3:
        raise UserError("--in-flight: a closed loop runs two stages, not --stages 3")
    loaded, topics, curves = _stage_setup(settings, factor, profile, accelerator, topic_prefix)
    producer = make_producer(settings.kafka_client, settings.bootstrap)
    # A closed loop learns of completed frames from the identities, in a group of its own that commits nothing.
    identities = (make_consumer(settings.kafka_client, settings.bootstrap,
                                f"closed-loop-{run_id}-{stream_prefix}", [topics.identities])
                  if in_flight else None)
    sink, metrics = open_telemetry(settings, "emulator", f"emulate-producers-{os.getpid()}")
    stop = stop_flag()
    try:
        # After the metrics server is up: in a fresh release the topics Job runs once every pod is ready.
        require_brokers(settings.bootstrap, topics=[topics.faces if stages == 2 else topics.frames])
        producer.connect([topics.faces if stages == 2 else topics.frames])
        report(READY)  # a run's clock starts with the frames
        deadline = time.monotonic() + duration if duration else float("inf")
        stats = run_producer_instances(instances, f"{run_id}-{stream_prefix}", loaded, factor, producer, sink,
                                       run_id, topics, lambda: stop[0] or time.monotonic() >= deadline,
                                       keying=keying, in_flight=in_flight, identities=identities, stages=stages,
                                       curves=curves, on_cpu=compute == "cpu")
    finally:
        if identities is not None:
            identities.close()
        sink.close()
        metrics.close()
    return _report_produced("emulate-producers", stats)


def _report_produced(command: str, stats: list) -> int:
    """Report and print what producing instances did (frames, faces: none when they send frames, records
    acknowledged, bytes, delivery failures); exit 1 on a failed delivery."""
    from aitax.common.children import SUMMARY, report

    summary = {"frames": sum(s.frames for s in stats), "faces": sum(getattr(s, "faces", 0) for s in stats),
               "acknowledged": sum(s.acknowledged for s in stats), "bytes": sum(s.bytes_sent for s in stats),
               "failed": sum(len(s.failed) for s in stats)}
    report(SUMMARY, **summary)
    print(f"{command}: {json.dumps(summary)}", flush=True)
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
    from aitax.common.children import READY, report
    from aitax.emulation.workers import run_detector_instances
    from aitax.pipeline.runtime import open_telemetry, stop_flag
    from aitax.pipeline.transport import make_consumer, make_producer
    from aitax.pipeline.transport.admin import require_brokers

    loaded, topics, curves = _stage_setup(settings, factor, profile, accelerator, topic_prefix)
    sink, metrics = open_telemetry(settings, "emulator", f"emulate-detectors-{os.getpid()}")
    try:
        # As detect: its topics (existing, its ACLs granted), after the metrics server is up.
        require_brokers(settings.bootstrap, topics=[topics.frames, topics.faces])
        consumers = [make_consumer(settings.kafka_client, settings.bootstrap, group, [topics.frames])
                     for _ in range(instances)]
        producer = make_producer(settings.kafka_client, settings.bootstrap)
        producer.connect([topics.faces])
        stop = stop_flag()
        try:
            stats = run_detector_instances(consumers, producer, loaded, factor, sink, run_id, topics,
                                           lambda: stop[0], keying=keying, on_ready=lambda: report(READY),
                                           batching=batching, curves=curves, on_cpu=compute == "cpu")
        finally:
            for client in (*consumers, producer):
                client.close()
    finally:
        sink.close()
        metrics.close()
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
    from aitax.common.children import READY, SUMMARY, report
    from aitax.emulation.workers import run_consumer_instances
    from aitax.pipeline.runtime import open_telemetry, stop_flag
    from aitax.pipeline.transport import make_consumer, make_producer
    from aitax.pipeline.transport.admin import require_brokers

    loaded, topics, curves = _stage_setup(settings, factor, profile, accelerator, topic_prefix)
    sink, metrics = open_telemetry(settings, "emulator", f"emulate-consumers-{os.getpid()}")
    try:
        # As identify: its topics (existing, its ACLs granted) before the idempotent producer (a refused producer
        # id is fatal to it), after the metrics server (a fresh release's topics Job waits for every pod's).
        require_brokers(settings.bootstrap, topics=[topics.faces, topics.identities])
        consumers = [make_consumer(settings.kafka_client, settings.bootstrap, group, [topics.faces])
                     for _ in range(instances)]
        # One producer shared by the instances.
        producer = make_producer(settings.kafka_client, settings.bootstrap, linger_ms=results_linger_ms,
                                 idempotent=True)
        producer.connect([topics.identities])
        stop = stop_flag()
        try:
            # The sweep starts its producers once every instance has partitions: group formation is not broker wait.
            stats = run_consumer_instances(consumers, producer, loaded, factor, sink, topics, lambda: stop[0],
                                           batching=batching, on_ready=lambda: report(READY),
                                           only_run=run_id if skip_other_runs else None, curves=curves,
                                           on_cpu=compute == "cpu")
        finally:
            producer.close()  # the identities first: what the group commits must be durable
            stuck = close_within(consumers, CONSUMER_CLOSE_S)
    finally:
        sink.close()
        metrics.close()
    summary = {"faces": sum(s.faces for s in stats), "duplicates": sum(s.duplicates for s in stats)}
    report(SUMMARY, **summary)
    print(f"emulate-consumers: {json.dumps(summary)}", flush=True)
    if stuck:
        # Its offsets are committed; the coordinator drops the member after its session timeout. Waiting longer
        # would only get this process killed and its run's summary lost.
        print(f"emulate-consumers: {stuck} consumer(s) did not leave group {group} within "
              f"{CONSUMER_CLOSE_S:g} s; exiting without them", flush=True)
        os._exit(0)
    return 0


CONSUMER_CLOSE_S = 20.0  # leaving the group; librdkafka holds a LeaveGroup behind a pending JoinGroup


def close_within(clients: list, timeout_s: float) -> int:
    """Close the clients side by side; return how many had not closed after `timeout_s`."""
    import threading

    threads = [threading.Thread(target=client.close, name="close", daemon=True) for client in clients]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout_s
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return sum(thread.is_alive() for thread in threads)


def _stage_setup(settings: StageSettings, factor: float, profile: str, accelerator: Iterable[str],
                 topic_prefix: str):
    """What the emulated stage processes check and resolve before starting: (profile, topics, the device curves by
    stage)."""
    from aitax.emulation.profile import load_profile
    from aitax.pipeline.schema import DEFAULT_TOPICS, Topics
    from aitax.pipeline.transport.admin import require_brokers

    if factor <= 0:
        raise UserError(f"--factor {factor}: must be > 0")
    loaded = load_profile(profile)
    curves = accelerator_curves(accelerator)
    require_brokers(settings.bootstrap)
    return loaded, Topics.with_prefix(topic_prefix) if topic_prefix else DEFAULT_TOPICS, curves


@click.command(
    "calibrate", short_help="this machine's device curve (time per batch) for --accelerator FILE",
    help="Times the real compute of a stage on this machine and writes a curve file that `aitax emulate "
         "--accelerator FILE` reads: identify, thumbnail decode + FaceNet per batch of --batches thumbnails through "
         "--runtime in --precision; detect, MTCNN with alignment and thumbnails one frame per call on a video's "
         "frames. STAGE: identify or detect.")
@click.argument("stage", type=click.Choice(("identify", "detect")), metavar="STAGE")
@click.option("--out", type=FILE, required=True, help="curve YAML to write")
@click.option("--runtime", type=click.Choice(("openvino", "tensorflow", "cuda")), default="openvino",
              help="identify: FaceNet's runtime (default openvino; cuda: an NVIDIA GPU, the gpu extra)")
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
        open_video(video).release()  # a bad path is one line before the models load
        with tqdm(total=1, desc="frames", unit="curve") as bar:
            path = calibrate_detect(out, video, min_face_size, frames, repeats, progress=lambda _: bar.update())
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
    from aitax.telemetry.report_sources import load_events

    source = events or local_elasticsearch_url("--events")
    profile = derive_profile(load_events(run_id, source).documents, run_id)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(profile.to_yaml())
    means = {stage: round(d.mean(), 1) for stage, d in profile.compute_ms.items()}
    print(f"wrote {out}: mean compute ms {means}, thumbnail {profile.thumbnail_bytes.mean():,.0f} bytes, "
          f"{profile.mean_faces_per_frame():.2f} faces/frame")
    return 0
