"""Run a spec's phases on a backend, collect each phase's results from Elasticsearch, restore at the end."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from aitax.experiment.results import PhaseResult, check_elasticsearch, stage_summaries
from aitax.experiment.spec import ExperimentSpec
from ground.errors import UserError

# Events reach Elasticsearch through a sink that flushes every second: wait a little before querying.
EVENTS_SETTLE_S = 3.0


class Backend(Protocol):
    def prepare(self) -> None: ...

    def run_phase(self, index: int, run_id: str) -> dict[str, int]: ...

    def restore(self) -> None: ...


def run_experiment(spec: ExperimentSpec, backend: Backend, elasticsearch_url: str | None, out_dir: Path,
                   log: Callable[[str], None] = print) -> tuple[list[PhaseResult], Path]:
    """Every check happens in `prepare` (and the Elasticsearch check) before the first phase changes anything."""
    backend.prepare()
    if elasticsearch_url:
        check_elasticsearch(elasticsearch_url)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out_dir.mkdir(parents=True, exist_ok=True)
    out_file = out_dir / f"{spec.name}-{stamp}.json"
    results: list[PhaseResult] = []
    try:
        for index, phase in enumerate(spec.phases):
            run_id = f"{spec.name}-{phase.name}-{stamp}"
            wanted = ", ".join(f"{stage}={count}" for stage, count in phase.replicas.items())
            log(f"phase {index + 1}/{len(spec.phases)} {phase.name}: {wanted}, factor {phase.factor:g}, "
                f"{phase.duration_s:g} s, run id {run_id}")
            started = time.time()
            replicas = backend.run_phase(index, run_id)
            result = PhaseResult(phase=phase.name, run_id=run_id, started_at=started, ended_at=time.time(),
                                 factor=phase.factor, replicas=replicas)
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
    return results, out_file


def _write(path: Path, spec: ExperimentSpec, results: list[PhaseResult]) -> None:
    # Rewritten after every phase: an interrupted experiment keeps the phases it finished.
    document = {"experiment": spec.name, "mode": spec.mode, "source": spec.source,
                "phases": [result.to_json() for result in results]}
    path.write_text(json.dumps(document, indent=2) + "\n")


def _summary(result: PhaseResult) -> str:
    ready = ", ".join(f"{stage} {count}" for stage, count in result.replicas.items())
    stages = "; ".join(f"{stage}: {s.events} events, compute p50 {s.compute_ms['p50']} ms"
                       for stage, s in result.stages.items())
    return f"replicas {ready}" + (f"; {stages}" if stages else f" ({result.note})" if result.note else "")
