"""One load engine: consumers started and ready, producers offering the workload for its duration, a drain, then
the faces read back and judged. `aitax run`, the emulation sweep and scaling study, local experiment phases and
the fault scenarios all run their load through `run_load` and get the same `RunResult`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Protocol

from aitax.common.errors import UserError
from aitax.load.local import LocalLoad
from aitax.load.resources import Sampler, Usage, resources
from aitax.runs.applications import application
from aitax.runs.results import RESULT_FILE, Driver, RunResult, Startup, Workload, judge, write_results
from aitax.stack.config import StackConfig
from aitax.telemetry.latency import (
    BROKER_WAIT,
    LatencySummary,
    Timeline,
    batch_size_p50,
    broker_wait_ms,
    dominant_wait,
    summarize,
)

REAL_DRAIN_S = 300.0  # a real run ends once every face produced is identified, or after this
DISRUPTION_JOIN_S = 120.0


class Load(Protocol):
    """One run's stages, wherever they run: local processes (`LocalLoad`) or a release's pods
    (`aitax.experiment.cluster_load.ClusterLoad`)."""

    workload: Workload
    driver: Driver
    run_id: str

    def start_consumers(self) -> None:
        """Start the consumers; return once each holds its partitions (start-up is not broker wait)."""

    def start_producers(self) -> None:
        """Start the producers; return once their frames flow (the run's clock starts then)."""

    def pids(self) -> dict[str, list[int]]:
        """Local process ids by role, for the resource sampler (none for pods)."""

    def alive(self) -> bool:
        """Nothing has failed so far."""

    def finish_producers(self, interrupted: bool) -> None:
        """End the offered load; each producer flushes and waits for its acknowledgements."""

    def drain(self, timeout_s: float, on_lag: Callable[[int], None]) -> int:
        """Wait for the consumers to catch up; return the faces still queued."""

    def stop(self) -> list[str]:
        """Stop whatever still runs; one note per process that had to be killed (its measurement was done)."""

    def failures(self) -> list[str]: ...

    def produced(self) -> tuple[int, float]:
        """Faces acknowledged to the producers, and their mean thumbnail bytes."""

    def identities(self) -> tuple[Sequence[Timeline], int]:
        """The run's results (first of each face or frame) on the results' timeline, and the duplicates removed."""


class ResourceSampler(Protocol):
    """What the brokers and the load spent over a window: the local stack's processes (`load.resources.Sampler`)
    or a release's pods (`aitax.experiment.cluster_resources.ClusterResources`)."""

    def __enter__(self) -> ResourceSampler: ...

    def __exit__(self, *_: object) -> None: ...

    def watch(self, role: str, pids: list[int]) -> None: ...

    def usage(self, start: float, end: float) -> Usage: ...


@contextlib.contextmanager
def terminated_as_interrupt() -> Iterator[None]:
    """SIGTERM (a supervisor's or a script's stop) ends the load as Ctrl-C does: Python's default for it would exit
    at once, leaving the children (each in its own session) running and nothing collected. Ctrl-C itself may be
    ignored: a process started in the background by a non-interactive shell inherits SIGINT ignored."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield
        return
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_load(load: Load, *, offered_faces_per_s: float | None = None, stack: StackConfig | None = None,
             sampler: ResourceSampler | None = None,
             disruption: Callable[[], None] | None = None, disruption_after_s: float | None = None,
             progress: bool = False, repeat: int = 1) -> RunResult:
    """Run `load`'s workload once. `offered_faces_per_s`: what the producers' schedule offers (None for a
    real video). `stack`: the local brokers, sampled for CPU, disk and their own meters; `sampler`: where else the
    resources come from (a release's Prometheus). `disruption` runs in a thread `disruption_after_s` into the load
    (default: a quarter in; a fault scenario). Ctrl-C or SIGTERM during the load ends it early and still drains
    and collects."""
    from tqdm import tqdm

    workload = load.workload
    notes: list[str] = []
    interrupted = False
    if sampler is None and stack is not None:
        sampler = Sampler(stack)
    _join_load_slice(stack)
    try:
        with sampler or contextlib.nullcontext():
            ready_s = _start(load)
            if sampler is not None:
                for role, pids in load.pids().items():
                    sampler.watch(role, pids)
            spawned, spawned_ns = time.monotonic(), time.time_ns()
            disrupter = _start_later(disruption, workload.duration_s / 4 if disruption_after_s is None
                                     else disruption_after_s)
            try:
                with terminated_as_interrupt(), \
                        tqdm(total=round(workload.duration_s), desc="load", unit="s", disable=not progress) as bar:
                    while (elapsed := time.monotonic() - spawned) < workload.duration_s and load.alive():
                        time.sleep(min(1.0, workload.duration_s - elapsed))
                        bar.update(round(time.monotonic() - spawned) - bar.n)
            except KeyboardInterrupt:
                interrupted = True
                notes.append("interrupted: the load ended early, in-flight faces drained")
            load.finish_producers(interrupted)
            ended, ended_ns = time.monotonic(), time.time_ns()
            if disrupter is not None:
                disrupter.join(DISRUPTION_JOIN_S)
            with tqdm(desc="draining", unit="face", disable=not progress) as bar:
                backlog = load.drain(workload.drain_s, on_lag=lambda lag: bar.set_postfix(lag=lag))
            usage = _window_usage(sampler, spawned + workload.ramp_up_s, ended - workload.ramp_down_s, notes)
    finally:
        notes += load.stop()
    produced, face_bytes = load.produced()
    identities, duplicates = load.identities()
    # The window starts with the schedule (once the producer processes are up, not at their spawn) and holds the
    # faces captured in it: a producer that cannot keep to its schedule falls behind it, and its faces are still
    # the window's (their schedule delay grows, as it should).
    schedule_start_ns = min((i.scheduled_ns for i in identities), default=spawned_ns)
    measured_from_ns = schedule_start_ns + round(workload.ramp_up_s * 1e9)
    measured_to_ns = schedule_start_ns + round((workload.duration_s - workload.ramp_down_s) * 1e9)
    measured = [i for i in identities if measured_from_ns <= i.captured_ns < measured_to_ns]
    in_window = sum(measured_from_ns <= i.delivered_ns < measured_to_ns for i in identities)
    offered = None if offered_faces_per_s is None else round(offered_faces_per_s * workload.window_s)
    latency = summarize(measured, workload.quantiles)
    first_result_s = min(((i.delivered_ns - schedule_start_ns) / 1e9 for i in identities), default=None)
    warmup = summarize([i for i in identities if i.captured_ns < measured_from_ns], workload.quantiles)
    if backlog:
        notes.append(f"{backlog} faces still queued after a {workload.drain_s:g} s drain")
    failures = load.failures()
    return RunResult(
        run_id=load.run_id, workload=workload, driver=load.driver, repeat=repeat,
        brokers=stack.brokers if stack else None, drives_per_broker=stack.log_dirs_per_broker if stack else None,
        testbed=f"{stack.testbed.design} at 1/{stack.testbed.scale:g}" if stack and stack.testbed else None,
        load_started_ns=schedule_start_ns, load_ended_ns=ended_ns, window_start_ns=measured_from_ns,
        window_end_ns=measured_to_ns, offered_faces_per_s=offered_faces_per_s,
        achieved_faces_per_s=in_window / workload.window_s,
        produced_faces=produced, identified_faces=len(identities), duplicates=duplicates, backlog_faces=backlog,
        face_bytes_mean=face_bytes, latency=latency,
        startup=Startup(ready_s=ready_s, first_result_s=first_result_s, warmup=warmup),
        verdict=judge(latency, offered_faces=offered, identified_in_window=in_window,
                      produced_faces=produced, identified_faces=len(identities), backlog_faces=backlog,
                      drained=workload.mode == "real",
                      latency_bound=None if workload.latency_bound_ms is None
                      else (workload.latency_bound_quantile, workload.latency_bound_ms),
                      process_failures=failures),
        resources=None if usage is None else resources(usage, latency),
        process_failures=failures, interrupted=interrupted, notes=notes)


def _start(load: Load) -> dict[str, float]:
    """Consumers, then producers, each role ready before the next starts; each role's seconds to ready."""
    ready_s = {}
    for role, start in zip(_roles(load), (load.start_consumers, load.start_producers), strict=True):
        began = time.monotonic()
        start()  # returns once every process of the role reported ready
        ready_s[role] = round(time.monotonic() - began, 2)
    return ready_s


def _roles(load: Load) -> tuple[str, str]:
    """The consumers' and the producers' stage commands, as start-up reports them."""
    w = load.workload
    if w.mode != "real":
        return "emulated consumers", "emulated producers"
    producer, middle, consumer = application(w.application).stages(w.stages)
    return consumer.command + (f" and {middle.command}" if middle else ""), producer.command


def _join_load_slice(stack: StackConfig | None) -> None:
    """On a testbed, this process joins the load's CPU slice: the load's processes start from here, inherit it, and
    never count as the brokers'."""
    if stack is not None and stack.testbed is not None:
        from aitax.stack import cpu_slices

        cpu_slices.place(stack, cpu_slices.CLIENTS, os.getpid())


def _window_usage(sampler: ResourceSampler | None, start: float, end: float, notes: list[str]) -> Usage | None:
    """The brokers' usage over the measurement window (by the clock the sampler keeps). A source that fails (a
    release's Prometheus gone) costs the run its resources, noted, not its result."""
    if sampler is None:
        return None
    try:
        return sampler.usage(start, end)
    except UserError as error:
        notes.append(f"resources not measured: {error}")
        return None


def _start_later(action: Callable[[], None] | None, delay_s: float) -> threading.Thread | None:
    if action is None:
        return None

    def later() -> None:
        time.sleep(delay_s)
        action()

    thread = threading.Thread(target=later, name="disruption", daemon=True)
    thread.start()
    return thread


def local_stack_for(bootstrap: str) -> StackConfig | None:
    """The local stack when `bootstrap` is its brokers (then a run samples them), else None."""
    from aitax.stack.stack import current_config

    config = current_config()
    return config if config is not None and config.bootstrap_servers == bootstrap else None


def print_result(result: RunResult) -> None:
    """The run in a few lines, then each condition of its verdict and whether it held."""
    latency = result.latency
    offered = "" if result.offered_faces_per_s is None else f" of {result.offered_faces_per_s:.1f} offered"
    app = application(result.workload.application)
    unit, done = f"{app.unit}s", app.answered
    print(f"run {result.run_id}: {result.produced_faces} {unit} acknowledged, {result.identified_faces} {done} "
          f"({result.duplicates} duplicates removed), {result.achieved_faces_per_s:.1f}{offered} {unit}/s")
    if latency is not None:
        steps = latency.breakdown_ms
        print(f"  end to end (from the schedule to the durable result) {tail_line(latency)}; broker wait "
              f"{latency.broker_wait_share:.0%} "
              f"of it, by owner: " + ", ".join(f"{part} {steps.get(part, 0.0):.1f} ms" for part in BROKER_WAIT)
              + f" ({dominant_wait(steps)} dominates); batch size p50 {batch_size_p50(latency.batch_sizes) or 0:g}")
    if latency is not None and app.paper_breakdown is not None:
        print(f"  per {app.unit}: ingest {steps['ingest']:.1f} ms, broker wait {broker_wait_ms(steps):.0f} ms, "
              f"{app.consumer.command} {steps['identify']:.1f} ms ({app.paper_breakdown})")
    if result.startup is not None:
        print_startup(result.startup, unit, result.workload.ramp_up_s)
    if result.resources is not None:
        print(f"  saturated: {result.resources.saturated}")
    for condition in result.verdict.conditions:
        print(f"  [{'held' if condition.held else 'FAILED'}] {condition.name}: {condition.measured} "
              f"(required: {condition.required})")
    for line in result.process_failures + result.notes:
        print(f"  {line}")


def tail_line(latency: LatencySummary) -> str:
    """p50, then the mean and p90 also as multiples of it: how much of the window a tail holds."""
    times = (lambda ms: f" ({ms / latency.p50_ms:.1f}x p50)") if latency.p50_ms > 0 else (lambda ms: "")
    p90 = latency.tail.quantiles_ms.get("p90")
    return (f"p50 {latency.p50_ms:.0f} ms, mean {latency.mean_ms:.0f} ms{times(latency.mean_ms)}, "
            + ("" if p90 is None else f"p90 {p90:.0f} ms{times(p90)}, ") + f"p99 {latency.p99_ms:.0f} ms")


def print_startup(startup: Startup, unit: str, ramp_up_s: float) -> None:
    """Start-up on lines of its own: none of it is in the window's latency above."""
    ready = ", then ".join(f"{role} ready in {seconds:.1f} s" for role, seconds in startup.ready_s.items())
    first = "no result" if startup.first_result_s is None else \
        f"first result {startup.first_result_s:.1f} s after the load began"
    print(f"  start-up (before the load and its clock): {ready}; {first}")
    if startup.warmup is not None:
        warmup = startup.warmup
        print(f"  warm-up (the load's first {ramp_up_s:g} s, not in the window): {warmup.faces} {unit}, end to end "
              f"mean {warmup.mean_ms:.0f} ms, p50 {warmup.p50_ms:.0f} ms, p99 {warmup.p99_ms:.0f} ms")


def run_local_pipeline(workload: Workload, driver: Driver, run_id: str | None, bootstrap: str,
                       events_dir: Path | None = None, events: str | None = None) -> RunResult:
    """The real stages as local processes (`aitax run`, the demo, a local experiment phase): events go to the
    run's folder and to `events` (default: the local stack's), the result is written beside them. A failed
    stage or faces left unidentified are a UserError."""
    from aitax.common.paths import aitax_home
    from aitax.pipeline.runtime import new_run_id
    from aitax.stack.stack import default_events

    run_id = run_id or new_run_id()
    events_dir = events_dir or aitax_home() / "runs" / run_id
    sinks = ",".join(spec for spec in (f"file:{events_dir}", events or default_events()) if spec != "none")
    load = LocalLoad(workload, driver, run_id, bootstrap, events_dir / "logs", sinks)
    stack = local_stack_for(bootstrap)
    if load.frames_through_kafka and stack is not None:
        from aitax.stack import kafka

        kafka.ensure_topics(stack, stack.topics(load.topics, frames=True,
                                                detections=load.application.results == "detections"))
    load.check()
    producer, middle, consumer = load.application.stages(workload.stages)
    detect = f" + {workload.producers} {middle.command}" if middle else ""
    print(f"run {run_id}: {workload.producers} {producer.command}{detect} + {workload.consumers} {consumer.command} "
          f"processes; events and logs in {events_dir}")
    result = run_load(load, stack=stack, progress=True)
    print_result(result)
    print(f"result: {write_results(result, events_dir / RESULT_FILE)}")
    if result.process_failures:
        failed = ", ".join(line.split(":")[0] for line in result.process_failures)
        raise UserError(f"{failed} failed; see {events_dir / 'logs'}")
    if result.backlog_faces:
        raise UserError(f"the {consumer.command} group still lags by {result.backlog_faces} "
                        f"{load.application.unit}s after {workload.drain_s:.0f} s")
    return result
