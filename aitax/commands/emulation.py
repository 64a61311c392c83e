"""Emulator commands: `emulate` (the sweep), `emulate-scaling` (Fig. 15), the two stage-process commands a
Deployment runs (`emulate-producers`, `emulate-consumers`), and `profile` (derive one from a real run)."""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
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
from common.errors import UserError
from emulation.curves import BASELINE_CURVE
from telemetry.applications import APPLICATIONS


def _factors(text: str) -> list[float]:
    try:
        return [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected numbers separated by commas, e.g. 1,2,4,8") from None


def _duration_ms(text: str) -> float:
    from telemetry.quantiles import parse_duration_ms

    try:
        return parse_duration_ms(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _stage_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--instances", type=int, default=1, help="emulated instances in this process (default 1)")
    parser.add_argument("--factor", type=float, default=1.0, help="AI acceleration factor: sleeps are divided by it")
    parser.add_argument("--profile", default="paper", help="built-in profile (paper, paper-video) or a YAML file")
    parser.add_argument("--run-id", default=os.environ.get("AITAX_RUN_ID", "emulated"), help="run id of the faces")
    parser.add_argument("--topic-prefix", default="", help="use PREFIXfaces, PREFIXidentities, PREFIXfaces.dlq")
    _add_accelerator(parser)
    _add_compute(parser)
    add_kafka_options(parser)


def _add_accelerator(parser: argparse.ArgumentParser) -> None:
    from emulation.curves import built_in_curves

    parser.add_argument("--accelerator", action="append", default=[], metavar="NAME|FILE",
                        help="a device's time per batch in place of a stage's profile times (the curve file names "
                             f"its stage; repeat for both stages): shipped {', '.join(built_in_curves())}, or a file "
                             "`aitax calibrate` wrote. The factor still raises the load and divides the other stages")


def _add_compute(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--compute", choices=("sleep", "cpu"), default="sleep",
                        help="what the profile's compute does for its time: sleep (default; the host's cores stay "
                             "free, as with an accelerator, the paper's emulator) or cpu (it takes that much CPU time "
                             "on a host core, as the CPU pipeline the profile was measured on did). A curve says "
                             "this itself (host_cpu)")


def accelerator_curves(names: list[str]) -> dict:
    """The curves of `--accelerator`, by the stage each replaces; two for one stage is a UserError."""
    from emulation.curves import load_curve

    curves: dict = {}
    for name in names:
        curve = load_curve(name)
        if curve.stage in curves:
            raise UserError(f"--accelerator {name}: {curves[curve.stage].name} already replaces {curve.stage}")
        curves[curve.stage] = curve
    return curves


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add this module's commands, in the order `aitax --help` lists them."""
    for add_command in (
        _emulate_command,
        _emulate_scaling_command,
        _faults_command,
        _audit_command,
        _collect_command,
        _emulate_producers_command,
        _emulate_detectors_command,
        _emulate_consumers_command,
        _calibrate_command,
        _profile_command,
    ):
        add_command(subparsers)


def _emulate_command(subparsers: argparse._SubParsersAction) -> None:
    sweep = subparsers.add_parser(
        "emulate", help="sweep AI acceleration factors with emulated stages; find where the brokers break",
        description="For each factor: the real stage loops and Kafka code with compute replaced by sleeps "
                    "(measured time / factor) and thumbnails by random bytes of the measured sizes; prints offered "
                    "vs achieved throughput, latency and its breakdown, a stability verdict, broker disk/CPU and "
                    "what saturated first.")
    sweep.add_argument("--factors", type=_factors, default=[1, 2, 4, 8, 16, 32], help="default 1,2,4,8,16,32")
    sweep.add_argument("--duration", type=float, default=30.0, help="seconds of load per factor (default 30)")
    sweep.add_argument("--warmup", type=float, default=15.0,
                       help="seconds of unmeasured 1x load first, so cold brokers do not skew 1x (default 15; 0: none)")
    sweep.add_argument("--workload", default="face-recognition", choices=tuple(APPLICATIONS),
                       help="face-recognition (default), or object-detection: the paper's second application "
                            "(Sec. 6): every frame through Kafka at 30 FPS x factor to a 687 ms R-CNN")
    sweep.add_argument("--producers", type=int,
                       help="emulated ingest/detect instances (default 4; object-detection: 1 stream)")
    sweep.add_argument("--consumers", type=int,
                       help="emulated identify (object-detection: detection) instances (default 8; object-detection: "
                            "24, enough for one 30 FPS stream at 687 ms per frame)")
    sweep.add_argument("--processes", type=int, default=2, help="OS processes per side (default 2: two cores)")
    sweep.add_argument("--stages", type=int, choices=(2, 3), default=2,
                       help="face-recognition's design: 2 (default) or 3, frames (random bytes of the measured JPEG "
                            "size) through Kafka to emulated detect instances, one per stream (the paper's Fig. 3a)")
    sweep.add_argument("--brokers", type=int, help="brokers the running stack must have (checked, not started)")
    sweep.add_argument("--profile", help="built-in profile (paper, paper-video, object-detection) or a YAML file "
                                          "(default: the workload's: paper, object-detection)")
    sweep.add_argument("--face-scale", type=float, default=1.0, help="thumbnail size factor (Fig. 15c: 0.5, 0.25)")
    sweep.add_argument("--disk-write-mbps", type=float, default=2200.0,
                       help="storage write capacity per broker, MB/s, for utilisation (default 2200: this machine)")
    sweep.add_argument("--out", type=Path, help="results JSON (default .aitax/emulation/RUN/results.json)")
    sweep.add_argument("--plots", type=Path, help="folder for the plots: Fig. 10/11, latency quantiles on "
                                                  "log-probability axes, throughput against latency")
    sweep.add_argument("--html", type=Path, metavar="FILE", help="one self-contained page: the table and the plots")
    sweep.add_argument("--kafka-client", default="confluent-kafka", choices=("confluent-kafka", "kafka-python"))
    sweep.add_argument("--repeat", type=int, default=1,
                       help="runs per factor, taken round the factors; tables show median and min-max (default 1)")
    sweep.add_argument("--in-flight", type=counts, default=(), metavar="N,N,...",
                       help="closed loop: one run per count of frames each stream keeps between ingest and their "
                            "last identity (a concurrency sweep, per factor) instead of the fps x factor schedule")
    sweep.add_argument("--latency-bound", type=_duration_ms, metavar="TIME",
                       help="search for the highest factor between the lowest and highest of --factors whose "
                            "--quantile of end to end stays within TIME (e.g. 500ms) and holds every other "
                            "condition: latency-bounded throughput, by bisection")
    sweep.add_argument("--quantile", type=float, default=0.99,
                       help="the quantile --latency-bound applies to (default 0.99)")
    sweep.add_argument("--stop-after", type=int, default=2, metavar="N",
                       help="end the sweep after N factors in a row past the knee or unstable; the rest are listed "
                            "as not run (default 2; 0: run every factor)")
    sweep.add_argument("--drain", type=float, default=15.0,
                       help="seconds after each load for the consumers to catch up; what is left is the point's "
                            "backlog (default 15)")
    _add_accelerator(sweep)
    sweep.add_argument("--baseline", default=BASELINE_CURVE, metavar="NAME|FILE",
                       help="the CPU curve an identify device's speed-up is read against, at the batch each point "
                            f"formed (default {BASELINE_CURVE}: this project's 2-core EPYC, OpenVINO bf16, 1 thread)")
    _add_compute(sweep)
    sweep.add_argument("--max-batch", type=int,
                       help="the emulated identify's largest batch (default 1: one face at a time, as the paper's "
                            "identify; a device curve gains from more)")
    add_measurement(sweep, ramp_up_s=2.0)
    add_keying(sweep)
    add_driver_timing(sweep)
    sweep.set_defaults(func=_emulate)


def _emulate_scaling_command(subparsers: argparse._SubParsersAction) -> None:
    scaling = subparsers.add_parser(
        "emulate-scaling", help="the paper's Fig. 15: highest stable factor per broker count, drives, face size",
        description="Repeats the sweep per configuration. brokers/drives restart Kafka (fresh storage) with each "
                    "value and restore the original shape at the end; face-size scales the thumbnails.")
    scaling.add_argument("dimension", choices=("brokers", "drives", "face-size"), help="what to vary")
    scaling.add_argument("--values", type=_factors, required=True, help="e.g. 3,4,6,8 or 1,0.5,0.25,0.125")
    scaling.add_argument("--factors", type=_factors, default=[1, 2, 4, 8, 16, 32], help="default 1,2,4,8,16,32")
    scaling.add_argument("--duration", type=float, default=20.0, help="seconds per factor (default 20)")
    scaling.add_argument("--warmup", type=float, default=20.0,
                         help="seconds of unmeasured 1x load after each Kafka restart (default 20; 0: none)")
    scaling.add_argument("--producers", type=int, default=4, help="emulated ingest/detect instances (default 4)")
    scaling.add_argument("--consumers", type=int, default=8, help="emulated identify instances (default 8)")
    scaling.add_argument("--processes", type=int, default=2, help="OS processes per side (default 2)")
    scaling.add_argument("--profile", default="paper", help="built-in profile or YAML file")
    scaling.add_argument("--out", type=Path, help="results JSON")
    scaling.add_argument("--latency-bound", type=_duration_ms, metavar="TIME",
                         help="per configuration, search for the highest factor whose --quantile stays within TIME "
                              "(latency-bounded throughput) instead of sweeping --factors")
    scaling.add_argument("--quantile", type=float, default=0.99, help="for --latency-bound (default 0.99)")
    scaling.set_defaults(func=_emulate_scaling)


def _faults_command(subparsers: argparse._SubParsersAction) -> None:
    faults = subparsers.add_parser("faults", help="fault scenarios under emulated load: lost, duplicated, stall",
                                   description="Runs the emulated pipeline at a steady rate while a broker, the "
                                               "KRaft controller, two brokers, a consumer or Elasticsearch fails, "
                                               "then accounts for every face.")
    faults.add_argument("--scenarios", default="all", help="comma-separated names, or all")
    faults.add_argument("--factor", type=float, default=2.0, help="acceleration factor of the load (default 2)")
    faults.add_argument("--json", type=Path, help="write the results as JSON")
    faults.set_defaults(func=_faults)


def _audit_command(subparsers: argparse._SubParsersAction) -> None:
    audit = subparsers.add_parser(
        "audit", help="account for a run's faces once its consumers are idle: in `faces`, identified, lost",
        description="Reads the `faces` and `identities` topics of a run (real or emulated, local or in a cluster) "
                    "and prints the accounting `aitax faults` uses as JSON: distinct faces the brokers hold, how "
                    "many have an identity, duplicates, dead letters, the longest gap between appends. Exit 1 if "
                    "a face the brokers hold was never identified.")
    audit.add_argument("--run-id", required=True, help="the run whose faces to account for")
    audit.add_argument("--bootstrap", help="Kafka brokers (default: $AITAX_BOOTSTRAP, else the local stack)")
    audit.add_argument("--topic-prefix", default="", help="the run's topics are PREFIXfaces, PREFIXidentities, ...")
    audit.set_defaults(func=_audit)


def _collect_command(subparsers: argparse._SubParsersAction) -> None:
    collect = subparsers.add_parser(
        "collect", help="a consumer group's state and a run read back from its topics, as one JSON line",
        description="What the experiment driver asks from inside a pod of the release (where the brokers are "
                    "reachable): with --group, the group's state on the faces topic (members, members holding "
                    "partitions, lag); with --run-id, the run's faces the brokers hold and the timestamps of its "
                    "identities. Thumbnails are never printed.")
    collect.add_argument("--group", help="consumer group whose state on the faces topic to report")
    collect.add_argument("--run-id", help="the run to read back from the faces and identities topics")
    collect.add_argument("--since-ms", type=int, metavar="EPOCH_MS",
                         help="the run began after this time: older records are not read (default: all)")
    collect.add_argument("--bootstrap", help="Kafka brokers (default: $AITAX_BOOTSTRAP, else the local stack)")
    collect.add_argument("--topic-prefix", default="", help="the run's topics are PREFIXfaces, PREFIXidentities, ...")
    collect.set_defaults(func=_collect)


def _emulate_producers_command(subparsers: argparse._SubParsersAction) -> None:
    producers = subparsers.add_parser("emulate-producers", help="emulated ingest/detect instances (one process)",
                                      description="N emulated ingest/detect instances, each on its own schedule, "
                                                  "sharing one Kafka producer.")
    _stage_options(producers)
    producers.add_argument("--stream-prefix", default="stream", help="stream ids are PREFIX-0 .. PREFIX-(N-1)")
    producers.add_argument("--duration", type=float, help="stop after this many seconds (default: until signalled)")
    producers.add_argument("--in-flight", type=int, metavar="N",
                           help="closed loop: each stream keeps N frames between ingest and their last identity "
                                "(default: open loop, fps x factor)")
    producers.add_argument("--stages", type=int, choices=(2, 3), default=2,
                           help="3: ingest instances that publish frames (random bytes of a measured JPEG's size) "
                                "to the frames topic, for emulate-detectors (the paper's Fig. 3a)")
    add_keying(producers)
    producers.set_defaults(func=_emulate_producers)


def _emulate_detectors_command(subparsers: argparse._SubParsersAction) -> None:
    detectors = subparsers.add_parser(
        "emulate-detectors", help="emulated three-stage detect instances (one process): frames -> faces",
        description="N emulated detect instances, each its own consumer of the frames topic in the group, through "
                    "the real frame hand-off and detect loop with detection's compute as a sleep.")
    _stage_options(detectors)
    detectors.add_argument("--group", default="detect", help="consumer group (default detect)")
    add_keying(detectors)
    add_batching(detectors, 4, "frames whose faces are acknowledged and committed together")
    detectors.set_defaults(func=_emulate_detectors)


def _emulate_consumers_command(subparsers: argparse._SubParsersAction) -> None:
    consumers = subparsers.add_parser("emulate-consumers", help="emulated identify instances (one process)",
                                      description="M emulated identify instances, each its own consumer in the "
                                                  "group, committing after results are durable.")
    _stage_options(consumers)
    consumers.add_argument("--group", default="identify", help="consumer group (default identify)")
    add_batching(consumers, 1, "faces (1: the paper's per-face identify)")
    add_results_linger(consumers)
    consumers.add_argument("--skip-other-runs", action="store_true",
                           help="identify only faces of --run-id: other runs' are skipped and committed (for topics "
                                "other runs share)")
    consumers.set_defaults(func=_emulate_consumers)


def _calibrate_command(subparsers: argparse._SubParsersAction) -> None:
    calibrate = subparsers.add_parser(
        "calibrate", help="this machine's device curve (time per batch) for --accelerator FILE",
        description="Times the real compute of a stage on this machine and writes a curve file that "
                    "`aitax emulate --accelerator FILE` reads: identify, thumbnail decode + FaceNet per batch of "
                    "--batches thumbnails through --runtime in --precision; detect, MTCNN with alignment and "
                    "thumbnails one frame per call on a video's frames.")
    calibrate.add_argument("stage", choices=("identify", "detect"))
    calibrate.add_argument("--out", type=Path, required=True, help="curve YAML to write")
    calibrate.add_argument("--runtime", default="openvino", choices=("openvino", "tensorflow", "cuda"),
                           help="identify: FaceNet's runtime (default openvino; cuda: an NVIDIA GPU, the gpu extra)")
    calibrate.add_argument("--precision", default="auto", choices=("auto", "fp32", "bf16"),
                           help="identify: FaceNet's arithmetic (default auto: bf16 where the CPU has it)")
    calibrate.add_argument("--threads", type=int, default=1, help="identify: FaceNet's threads (default 1)")
    calibrate.add_argument("--batches", type=counts, default=(1, 2, 4, 8, 16, 32, 64), metavar="N,N,...",
                           help="identify: batch sizes to time (default 1,2,4,8,16,32,64)")
    calibrate.add_argument("--repeats", type=int, default=10, help="timed runs per batch size (default 10)")
    calibrate.add_argument("--video", help="detect: the video whose frames to time (`aitax make-video`)")
    calibrate.add_argument("--frames", type=int, default=20, help="detect: frames of the video to cycle (default 20)")
    calibrate.add_argument("--min-face-size", type=int, default=40, help="detect: MTCNN's smallest face (default 40)")
    calibrate.set_defaults(func=_calibrate)


def _profile_command(subparsers: argparse._SubParsersAction) -> None:
    profile = subparsers.add_parser("profile", help="derive an emulation profile from a real run's events")
    profile.add_argument("--run", required=True, help="run id")
    profile.add_argument("--events", help="JSONL folder or file of the run (default: the local Elasticsearch)")
    profile.add_argument("--out", type=Path, required=True, help="profile YAML to write")
    profile.set_defaults(func=_profile)

def _emulate(args: argparse.Namespace) -> int:
    from emulation.curves import load_curve
    from emulation.plots import print_table, write_html, write_plots
    from emulation.profile import load_profile
    from emulation.sweep import SweepSpec, run_sweep, search_latency_bound
    from stack.stack import running_config

    config = running_config()
    if args.brokers is not None and args.brokers != config.brokers:
        raise UserError(f"--brokers {args.brokers}: the running stack has {config.brokers}; "
                        f"`aitax stack down && aitax stack up --brokers {args.brokers}` first")
    if args.face_scale <= 0 or args.face_scale > 1:
        raise UserError(f"--face-scale {args.face_scale}: must be in (0, 1]")
    app = APPLICATIONS[args.workload]
    if args.stages == 3 and app.split is None:
        raise UserError(f"--stages 3: {app.name} has two stages; three are for an application that splits one")
    accelerator_curves(args.accelerator)  # every curve readable before anything starts
    load_curve(args.baseline)
    workload = app.emulated
    profile_name = args.profile or workload.profile
    producers = workload.producers if args.producers is None else args.producers
    consumers = workload.consumers if args.consumers is None else args.consumers
    profile = load_profile(profile_name)
    if args.face_scale != 1:
        profile = profile.scaled_faces(args.face_scale)
        profile_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"aitax-profile-{os.getpid()}.yaml"
        profile_path.write_text(profile.to_yaml())
        profile_name = str(profile_path)
    spec = SweepSpec(args.factors, args.duration, producers, consumers, args.processes, profile,
                     profile_name, args.kafka_client, args.disk_write_mbps * 1e6, warmup_s=args.warmup,
                     keying=args.keying, ramp_up_s=args.ramp_up, ramp_down_s=args.ramp_down, repeats=args.repeat,
                     quantiles=args.quantiles, in_flight=args.in_flight, latency_bound_ms=args.latency_bound,
                     latency_bound_quantile=args.quantile, stages=args.stages,
                     driver_settings=driver(args, max_batch=args.max_batch), drain_s=args.drain,
                     stop_after=args.stop_after, accelerators=tuple(args.accelerator), compute=args.compute,
                     baseline=args.baseline)
    if args.latency_bound is not None:
        sweep = search_latency_bound(spec, config, out=args.out)
    else:
        sweep = run_sweep(spec, config, out=args.out)
    print_table(sweep)
    if args.plots or args.html:
        with tempfile.TemporaryDirectory() as scratch:
            figures = write_plots(sweep, args.plots or Path(scratch))
            if args.plots:
                for path in figures:
                    print(f"wrote {path}")
            if args.html:
                print(f"wrote {write_html(sweep, figures, args.html)}")
    return 0


def _emulate_scaling(args: argparse.Namespace) -> int:
    from emulation.profile import load_profile
    from emulation.sweep import SweepSpec, run_scaling
    from stack.stack import running_config
    from telemetry.results import write_results

    running_config()  # brokers/drives restart a running Kafka; they never start a stack that is down
    limits = {"brokers": (3, 8), "drives": (1, 4), "face-size": (0.01, 1)}[args.dimension]
    bad = [v for v in args.values if not limits[0] <= v <= limits[1]]
    if bad:
        raise UserError(f"--values {bad[0]:g}: {args.dimension} must be between {limits[0]:g} and {limits[1]:g}")
    spec = SweepSpec(args.factors, args.duration, args.producers, args.consumers, args.processes,
                     load_profile(args.profile), args.profile, warmup_s=args.warmup,
                     latency_bound_ms=args.latency_bound, latency_bound_quantile=args.quantile)
    scaling = run_scaling(args.dimension, args.values, spec)
    highest = "highest stable" if args.latency_bound is None else f"within {args.latency_bound:g} ms"
    print(f"\n{'configuration':<22}{highest:>15}{'paper (Fig. 15)':>17}")
    for row in scaling.rows:
        ours, paper = row.sweep.highest_stable_factor, row.paper
        print(f"{args.dimension + ' ' + format(row.value, 'g'):<22}"
              f"{'none' if ours is None else format(ours, '.3g') + 'x':>15}"
              f"{'-' if paper is None else format(paper, 'g') + 'x':>17}")
    if args.out:
        write_results(scaling, args.out)
    return 0


def _faults(args: argparse.Namespace) -> int:
    from common.paths import aitax_home
    from emulation.faults import SCENARIOS, print_table, run_disk_full, run_scenario
    from stack.stack import running_config
    from telemetry.results import FaultResults, write_results

    every = [*SCENARIOS, "broker-disk-full"]
    names = every if args.scenarios == "all" else args.scenarios.split(",")
    unknown = [n for n in names if n not in every]
    if unknown:
        raise UserError(f"--scenarios {unknown[0]!r}: choose from {', '.join(every)}")
    config = running_config()
    if not config.elasticsearch and "elasticsearch-outage" in names:
        raise UserError("the elasticsearch-outage scenario needs the local stack with Elasticsearch")
    results = []
    for name in names:
        print(f"== {name}", flush=True)
        if name == "broker-disk-full":  # a Kafka-only stack of its own, on size-limited filesystems
            results.append(run_disk_full(aitax_home() / "faults"))
        else:
            results.append(run_scenario(name, config, factor=args.factor))
    print_table(results)
    if args.json:
        write_results(FaultResults(results=results), args.json)
    return 0 if all(r.verdict.held for r in results) else 1


def _audit(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from emulation.faults import audit_topics
    from pipeline.schema import Topics
    from pipeline.transport.admin import require_brokers
    from stack.stack import resolve_bootstrap

    bootstrap = resolve_bootstrap(args.bootstrap)
    topics = Topics.with_prefix(args.topic_prefix)
    require_brokers(bootstrap, topics=(topics.faces, topics.identities))
    audit = audit_topics(bootstrap, args.run_id, topics)
    print(json.dumps(asdict(audit)))
    return 0 if audit.lost == 0 else 1


def _collect(args: argparse.Namespace) -> int:
    from pipeline.schema import Topics
    from pipeline.transport.admin import require_brokers
    from pipeline.transport.readback import Collected, group_state, read_run
    from stack.stack import resolve_bootstrap

    if not args.group and not args.run_id:
        raise UserError("collect: give --group, --run-id or both")
    bootstrap = resolve_bootstrap(args.bootstrap)
    topics = Topics.with_prefix(args.topic_prefix)
    require_brokers(bootstrap, topics=(topics.faces, topics.identities))
    collected = Collected(
        group=group_state(bootstrap, args.group, topics.faces) if args.group else None,
        readback=read_run(bootstrap, args.run_id, topics.faces, topics.identities, args.since_ms)
        if args.run_id else None)
    print(collected.model_dump_json(), flush=True)
    return 0


def _emulate_producers(args: argparse.Namespace) -> int:
    from common.children import READY, report
    from emulation.workers import run_producer_instances
    from pipeline.runtime import open_telemetry, stop_flag
    from pipeline.transport import make_consumer, make_producer
    from pipeline.transport.admin import require_brokers

    if args.in_flight is not None and args.in_flight < 1:
        raise UserError(f"--in-flight {args.in_flight}: at least 1 frame per stream")
    if args.in_flight is not None and args.stages == 3:
        raise UserError("--in-flight: a closed loop runs two stages, not --stages 3")
    profile, settings, topics, curves = _stage_setup(args)
    producer = make_producer(settings.kafka_client, settings.bootstrap)
    # A closed loop learns of completed frames from the identities, in a group of its own that commits nothing.
    identities = (make_consumer(settings.kafka_client, settings.bootstrap,
                                f"{args.run_id}-{args.stream_prefix}-closed-loop", [topics.identities])
                  if args.in_flight else None)
    sink, metrics = open_telemetry(settings, "emulator", f"emulate-producers-{os.getpid()}")
    stop = stop_flag()
    try:
        # After the metrics server is up: in a fresh release the topics Job runs once every pod is ready.
        require_brokers(settings.bootstrap, topics=[topics.faces if args.stages == 2 else topics.frames])
        report(READY)  # a run's clock starts with the frames
        deadline = time.monotonic() + args.duration if args.duration else float("inf")
        stats = run_producer_instances(args.instances, f"{args.run_id}-{args.stream_prefix}", profile, args.factor,
                                       producer, sink, args.run_id, topics,
                                       lambda: stop[0] or time.monotonic() >= deadline,
                                       keying=args.keying, in_flight=args.in_flight, identities=identities,
                                       stages=args.stages, curves=curves, on_cpu=args.compute == "cpu")
    finally:
        if identities is not None:
            identities.close()
        sink.close()
        metrics.close()
    return _report_produced("emulate-producers", stats)


def _report_produced(command: str, stats: list) -> int:
    """Report and print what producing instances did (frames, faces: none when they send frames, records
    acknowledged, bytes, delivery failures); exit 1 on a failed delivery."""
    from common.children import SUMMARY, report

    summary = {"frames": sum(s.frames for s in stats), "faces": sum(getattr(s, "faces", 0) for s in stats),
               "acknowledged": sum(s.acknowledged for s in stats), "bytes": sum(s.bytes_sent for s in stats),
               "failed": sum(len(s.failed) for s in stats)}
    report(SUMMARY, **summary)
    print(f"{command}: {json.dumps(summary)}", flush=True)
    return 1 if summary["failed"] else 0


def _emulate_detectors(args: argparse.Namespace) -> int:
    from common.children import READY, report
    from emulation.workers import run_detector_instances
    from pipeline.runtime import open_telemetry, stop_flag
    from pipeline.transport import make_consumer, make_producer

    profile, settings, topics, curves = _stage_setup(args)
    consumers = [make_consumer(settings.kafka_client, settings.bootstrap, args.group, [topics.frames])
                 for _ in range(args.instances)]
    producer = make_producer(settings.kafka_client, settings.bootstrap)
    sink, metrics = open_telemetry(settings, "emulator", f"emulate-detectors-{os.getpid()}")
    stop = stop_flag()
    try:
        stats = run_detector_instances(consumers, producer, profile, args.factor, sink, args.run_id, topics,
                                       lambda: stop[0], keying=args.keying, on_ready=lambda: report(READY),
                                       batching=batch_policy(args), curves=curves, on_cpu=args.compute == "cpu")
    finally:
        for client in (*consumers, producer):
            client.close()
        sink.close()
        metrics.close()
    return _report_produced("emulate-detectors", stats)


def _emulate_consumers(args: argparse.Namespace) -> int:
    from common.children import READY, SUMMARY, report
    from emulation.workers import run_consumer_instances
    from pipeline.runtime import open_telemetry, stop_flag
    from pipeline.transport import make_consumer, make_producer

    profile, settings, topics, curves = _stage_setup(args)
    consumers = [make_consumer(settings.kafka_client, settings.bootstrap, args.group, [topics.faces])
                 for _ in range(args.instances)]
    # One producer shared by the instances.
    producer = make_producer(settings.kafka_client, settings.bootstrap, linger_ms=args.results_linger_ms,
                             idempotent=True)
    sink, metrics = open_telemetry(settings, "emulator", f"emulate-consumers-{os.getpid()}")
    stop = stop_flag()
    try:
        # The sweep starts its producers once every instance has partitions: group formation is not broker wait.
        stats = run_consumer_instances(consumers, producer, profile, args.factor, sink, topics, lambda: stop[0],
                                       batching=batch_policy(args), on_ready=lambda: report(READY),
                                       only_run=args.run_id if args.skip_other_runs else None, curves=curves,
                                       on_cpu=args.compute == "cpu")
    finally:
        producer.close()  # the identities first: what the group commits must be durable
        stuck = close_within(consumers, CONSUMER_CLOSE_S)
        sink.close()
        metrics.close()
    summary = {"faces": sum(s.faces for s in stats), "duplicates": sum(s.duplicates for s in stats)}
    report(SUMMARY, **summary)
    print(f"emulate-consumers: {json.dumps(summary)}", flush=True)
    if stuck:
        # Its offsets are committed; the coordinator drops the member after its session timeout. Waiting longer
        # would only get this process killed and its run's summary lost.
        print(f"emulate-consumers: {stuck} consumer(s) did not leave group {args.group} within "
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


def _stage_setup(args: argparse.Namespace):
    """What the emulated stage processes check and resolve before starting: (profile, settings, topics, the
    device curves by stage)."""
    from emulation.profile import load_profile
    from pipeline.schema import DEFAULT_TOPICS, Topics
    from pipeline.transport.admin import require_brokers

    if args.factor <= 0:
        raise UserError(f"--factor {args.factor}: must be > 0")
    profile = load_profile(args.profile)
    curves = accelerator_curves(args.accelerator)
    settings = stage_settings(args)
    require_brokers(settings.bootstrap)
    return (profile, settings, Topics.with_prefix(args.topic_prefix) if args.topic_prefix else DEFAULT_TOPICS,
            curves)


def _calibrate(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from emulation.calibrate import calibrate_detect, calibrate_identify
    from emulation.curves import load_curve

    if args.repeats < 1 or args.threads < 1 or args.frames < 1:
        raise UserError(f"--repeats {args.repeats} --threads {args.threads} --frames {args.frames}: each at least 1")
    if args.stage == "identify":
        with tqdm(total=len(args.batches), desc="batch sizes", unit="size") as bar:
            path = calibrate_identify(args.out, args.runtime, args.precision, args.threads, args.batches,
                                      args.repeats, progress=lambda _: bar.update())
    else:
        from pipeline.frames import open_video

        if not args.video:
            raise UserError("calibrate detect: --video VIDEO, the frames to time (e.g. from `aitax make-video`)")
        video = args.video
        open_video(video).release()  # a bad path is one line before the models load
        with tqdm(total=1, desc="frames", unit="curve") as bar:
            path = calibrate_detect(args.out, video, args.min_face_size, args.frames, args.repeats,
                                    progress=lambda _: bar.update())
    curve = load_curve(str(path))
    print(f"wrote {path}: {curve.name}, " + ", ".join(f"batch {n}: {ms:.2f} ms ({ms / n:.2f} per item)"
                                                      for n, ms in curve.points))
    return 0


def _profile(args: argparse.Namespace) -> int:
    from emulation.profile import derive_profile
    from stack.stack import local_elasticsearch_url
    from telemetry.report_sources import load_events

    source = args.events or local_elasticsearch_url("--events")
    profile = derive_profile(load_events(args.run, source).documents, args.run)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(profile.to_yaml())
    means = {stage: round(d.mean(), 1) for stage, d in profile.compute_ms.items()}
    print(f"wrote {args.out}: mean compute ms {means}, thumbnail {profile.thumbnail_bytes.mean():,.0f} bytes, "
          f"{profile.mean_faces_per_frame():.2f} faces/frame")
    return 0
