"""Run a spec's phases on a backend, collect each phase's results from Elasticsearch, restore at the end."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from aitax.experiment.results import check_elasticsearch, stage_summaries
from aitax.experiment.spec import KAFKA, MIN_KAFKA_REPLICAS, ExperimentSpec
from common.errors import UserError
from common.paper import HIGHEST_STABLE_FACTOR
from telemetry.results import (
    ExperimentResult,
    FactorRuns,
    PhaseResult,
    RunResult,
    ScalingResult,
    ScalingRow,
    SweepResult,
    format_spread,
    write_results,
)

# Events reach Elasticsearch through a sink that flushes every second: wait a little before querying.
EVENTS_SETTLE_S = 3.0


class Backend(Protocol):
    def prepare(self) -> None: ...

    def run_phase(self, index: int, run_id: str) -> tuple[dict[str, int], RunResult]:
        """Run one phase through the load engine: the replicas that ran, and its `RunResult`."""

    def restore(self) -> None: ...


def run_experiment(spec: ExperimentSpec, backend: Backend, elasticsearch_url: str | None, out_dir: Path,
                   log: Callable[[str], None] = print, repeats: int = 1) -> tuple[list[PhaseResult], Path]:
    """Every check happens in `prepare` (and the Elasticsearch check) before the first phase changes anything.
    With `repeats`, the whole sequence of phases runs that many times (a drift of the machine then spreads over
    every phase) and each phase ends with its median and spread."""
    if repeats < 1:
        raise UserError(f"--repeat {repeats}: at least 1")
    backend.prepare()
    if elasticsearch_url:
        check_elasticsearch(elasticsearch_url)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out_dir.mkdir(parents=True, exist_ok=True)
    out_file = out_dir / f"{spec.name}-{stamp}.json"
    results: list[PhaseResult] = []
    try:
        for repeat, (index, phase) in itertools.product(range(1, repeats + 1), enumerate(spec.phases)):
            run_id = f"{spec.name}-{phase.name}-{stamp}" + (f"-r{repeat}" if repeats > 1 else "")
            wanted = ", ".join(f"{stage}={count}" for stage, count in phase.replicas.items())
            log(f"phase {index + 1}/{len(spec.phases)} {phase.name}"
                f"{f' (repeat {repeat}/{repeats})' if repeats > 1 else ''}: {wanted}, factor {phase.factor:g}, "
                f"{phase.duration_s:g} s, run id {run_id}")
            started = time.time()
            replicas, run = backend.run_phase(index, run_id)
            result = PhaseResult(phase=phase.name, run_id=run_id, started_at=started, ended_at=time.time(),
                                 factor=phase.factor, replicas=replicas, repeat=repeat,
                                 run=run.model_copy(update={"repeat": repeat}))
            if elasticsearch_url:
                time.sleep(EVENTS_SETTLE_S)
                try:
                    result.stages = stage_summaries(elasticsearch_url, run_id)
                except UserError as error:  # the phase ran: keep going, and say why its results are missing
                    result.note = f"results not collected: {error}"
            else:
                result.note = "no Elasticsearch given: events not collected"
            results.append(result)
            _write(out_file, spec, results)
            log(f"  done: {_summary(result)}")
    finally:
        backend.restore()
    if repeats > 1:
        for line in repeat_summary(spec, results):
            log(line)
    scaling = by_brokers(spec, results)
    if scaling is not None:
        for line in ["the phases by broker count (the paper's Fig. 15a):", *scaling.table()]:
            log(line)
    return results, out_file


def repeat_summary(spec: ExperimentSpec, results: list[PhaseResult]) -> list[str]:
    """Per phase over its repeats: how many held, and the median (min-max) of throughput and p99."""
    lines = []
    for phase in spec.phases:
        runs = [r.run for r in results if r.phase == phase.name]
        if not runs:
            continue
        group = FactorRuns(phase.factor, runs[0].workload.in_flight, runs)
        rate = group.spread(lambda run: run.achieved_faces_per_s)
        p99 = group.spread(lambda run: run.latency.p99_ms if run.latency else None)
        lines.append(f"{phase.name}: held {group.stable_repeats}/{len(runs)}, {format_spread(rate, 1)} faces/s, "
                     f"p99 {format_spread(p99)} ms (median (min-max) over repeats)")
    return lines


def by_brokers(spec: ExperimentSpec, results: list[PhaseResult]) -> ScalingResult | None:
    """Phases at two or more broker counts, read as the paper's Fig. 15a: per count, its phases are one sweep over
    their factors, read by the sweep's own rules (the highest factor whose latency did not run away, every factor
    below it held too; and the highest also below the knee)."""
    counts = sorted({result.replicas[KAFKA] for result in results if KAFKA in result.replicas})
    if len(counts) < 2:
        return None
    rows = []
    for brokers in counts:
        runs = sorted((r.run for r in results if r.replicas.get(KAFKA) == brokers), key=lambda run: run.workload.factor)
        sweep = SweepResult(run_id=f"{spec.name}-{brokers}-brokers", profile=spec.profile,
                            replication_factor=MIN_KAFKA_REPLICAS,
                            brokers=brokers, drives_per_broker=1, duration_s=runs[0].workload.duration_s,
                            kafka_client=runs[0].driver.kafka_client, repeats=max(run.repeat for run in runs),
                            runs=runs)
        rows.append(ScalingRow(value=brokers, paper=HIGHEST_STABLE_FACTOR["brokers"].get(brokers), sweep=sweep))
    return ScalingResult(dimension="brokers", rows=rows)


def _write(path: Path, spec: ExperimentSpec, results: list[PhaseResult]) -> None:
    write_results(ExperimentResult(experiment=spec.name, mode=spec.mode, source=spec.source, phases=results), path)


def _summary(result: PhaseResult) -> str:
    ready = ", ".join(f"{stage} {count}" for stage, count in result.replicas.items())
    stages = "; ".join(f"{stage}: {s.events} events, compute p50 {s.compute_ms['p50']} ms"
                       for stage, s in result.stages.items())
    verdict = f"; {'stable' if result.run.stable else 'UNSTABLE'}"
    return (f"replicas {ready}{verdict}"
            + (f"; {stages}" if stages else f" ({result.note})" if result.note else ""))
