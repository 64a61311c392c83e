"""Emulator drivers: `emulate` (the sweep), `emulate-scaling` (Fig. 15) and `faults`, each running the emulated stage
processes (`aitax.commands.emulated_stages`)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import click

from aitax.commands.emulated_stages import accelerator_curves, accelerator_option, compute_option
from aitax.commands.options import (
    COUNTS,
    DIR,
    FILE,
    Parsed,
    driver,
    driver_timing,
    kafka_client_option,
    keying,
    measurement,
    options,
)
from aitax.common.errors import UserError
from aitax.emulation.curves import BASELINE_CURVE
from aitax.runs.applications import APPLICATIONS


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
DEFAULT_FACTORS = "1,2,4,8,16,32"

def _workload_file(context: click.Context, value: str) -> str:
    """The application `--workload` names; a workload file's options become the command's defaults (the eager
    option is read first), so a flag given overrides the file."""
    from aitax.emulation.sweep_files import workload_options

    if value in APPLICATIONS:
        return value
    path = Path(value)
    if not path.is_file():
        raise UserError(f"--workload {value}: neither an application ({', '.join(APPLICATIONS)}) nor a workload file")
    given = workload_options(path)
    context.default_map = {**(context.default_map or {}), **given}
    return given.get("workload", "face-recognition")


def _driver_file(context: click.Context, value: Path | None) -> None:
    """A driver file's options as the command's defaults, as for `--workload`'s file."""
    from aitax.emulation.sweep_files import driver_options

    if value is not None:
        context.default_map = {**(context.default_map or {}), **driver_options(value)}


def register(root: click.Group) -> None:
    """Add this module's commands, in the order `aitax --help` lists them."""
    for command in (emulate_command, emulate_scaling_command, faults_command):
        root.add_command(command)


# `emulate`: what load, where results go, how it runs, and what stands in for a stage's compute.
_sweep_load = options(
    click.option("--factors", type=FACTORS, default=DEFAULT_FACTORS, show_default=True,
                 help="AI acceleration factors to sweep"),
    click.option("--duration", type=float, default=30.0, show_default=True, help="seconds of load per factor"),
    click.option("--warmup", type=float, default=15.0,
                 help="seconds of unmeasured 1x load first, so cold brokers do not skew 1x (default 15; 0: none); on a "
                      "testbed the brokers run it out of their CPU slices"),
    click.option("--workload", default="face-recognition", metavar="APPLICATION|FILE", is_eager=True,
                 callback=lambda context, _, value: _workload_file(context, value),
                 help="face-recognition (default), or object-detection: the paper's second application (Sec. 6): "
                      "every frame through Kafka at 30 FPS x factor to a 687 ms R-CNN; or a workload file (its "
                      "application and load, e.g. benchmarks/workloads/*.yaml; flags given override it)"),
    click.option("--driver", type=FILE, is_eager=True, expose_value=False,
                 callback=lambda context, _, value: _driver_file(context, value),
                 help="a driver file: the Kafka client, keying, batcher delay, results linger and largest batch "
                      "(e.g. benchmarks/drivers/*.yaml; flags given override it)"),
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
    click.option("--plots", type=DIR, help="folder for the plots: Fig. 10/11, latency quantiles on "
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
    accelerator_option,
    click.option("--baseline", default=BASELINE_CURVE, metavar="NAME|FILE",
                 help="the CPU curve an identify device's speed-up is read against, at the batch each point formed "
                      f"(default {BASELINE_CURVE}: this project's 2-core EPYC, OpenVINO bf16, 1 thread)"),
    compute_option,
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
    from aitax.emulation.sweep import SweepPlan, SweepSpec, emulated_workload, run_sweep, search_latency_bound
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
    plan = SweepPlan(factors, repeats=repeat, in_flight=in_flight, warmup_s=warmup, stop_after=stop_after)
    load = emulated_workload(emulated.producers if producers is None else producers,
                             emulated.consumers if consumers is None else consumers, processes, duration,
                             profile_name, ramp_up_s=ramp_up, ramp_down_s=ramp_down, quantiles=list(quantiles),
                             latency_bound_ms=latency_bound, latency_bound_quantile=quantile, stages=stages,
                             drain_s=drain, accelerators=list(accelerator), compute=compute)
    clients = driver(timing, max_batch=max_batch, kafka_client=kafka_client, keying=keying)
    spec = SweepSpec(plan, load, clients, loaded, baseline=baseline)
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
    from aitax.emulation.sweep import SweepPlan, SweepSpec, emulated_workload, run_scaling
    from aitax.runs.results import Driver, write_results
    from aitax.stack.stack import running_config

    running_config()  # brokers/drives restart a running Kafka; they never start a stack that is down
    limits = {"brokers": (3, 8), "drives": (1, 4), "face-size": (0.01, 1)}[dimension]
    bad = [v for v in values if not limits[0] <= v <= limits[1]]
    if bad:
        raise UserError(f"--values {bad[0]:g}: {dimension} must be between {limits[0]:g} and {limits[1]:g}")
    load = emulated_workload(producers, consumers, processes, duration, profile, latency_bound_ms=latency_bound,
                             latency_bound_quantile=quantile)
    spec = SweepSpec(SweepPlan(factors, warmup_s=warmup), load, Driver(), load_profile(profile))
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
    from aitax.runs.results import FaultResults, write_results

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
            from aitax.cluster.real_cluster import RealCluster
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
