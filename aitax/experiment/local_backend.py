"""The local backend: the same spec as processes against the local stack (`aitax stack up`).

Each replica is one process: `aitax ingest-detect` / `aitax identify` for mode real, and
`aitax emulate-producers` / `aitax emulate-consumers --instances N` for mode emulated. A phase runs through the
load engine, as `aitax run` and the sweep do: consumers ready before producers, producers offer the phase's load
for its duration, consumers finish the backlog, and the phase's `RunResult` is kept with its results.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from aitax.common.errors import UserError
from aitax.common.paths import aitax_home
from aitax.experiment.spec import CONSUMER_STAGE, KAFKA, PRODUCER_STAGE, ExperimentSpec
from aitax.load.engine import REAL_DRAIN_S
from aitax.runs.results import RunResult


class LocalBackend:
    def __init__(self, spec: ExperimentSpec, bootstrap: str | None = None, events: str | None = None,
                 log: Callable[[str], None] = print) -> None:
        self.spec = spec
        self.bootstrap_arg = bootstrap
        self.events = events
        self.log = log
        self.bootstrap = ""

    def prepare(self) -> None:
        """Everything checked before the first process starts: brokers, files, commands, replica counts."""
        from aitax.pipeline.transport.admin import require_brokers
        from aitax.stack.stack import current_config, resolve_bootstrap

        spec = self.spec
        producer, consumer = PRODUCER_STAGE[spec.mode], CONSUMER_STAGE[spec.mode]
        for index, phase in enumerate(spec.phases):
            for stage in (producer, consumer):
                if phase.replicas.get(stage, 0) < 1:
                    raise UserError(f"{spec.source}: phases[{index}].replicas.{stage}: the local backend needs at "
                                    "least 1 process of each stage")
        if spec.mode == "real":
            if spec.video is None or spec.gallery is None:
                raise UserError(f"{spec.source}: video and gallery: the local backend needs both for mode: real")
            from aitax.pipeline.frames import open_video
            from aitax.pipeline.gallery import load_gallery

            open_video(str(spec.video)).release()
            load_gallery(spec.gallery)
        else:
            looks_like_file = "/" in spec.profile or spec.profile.endswith((".yaml", ".yml"))
            if looks_like_file and not Path(spec.profile).is_file():
                raise UserError(f"{spec.source}: profile: {spec.profile}: no such file")
        self.bootstrap = resolve_bootstrap(self.bootstrap_arg)
        require_brokers(self.bootstrap)
        if KAFKA in spec.stages:
            config = current_config()
            wanted = {phase.replicas[KAFKA] for phase in spec.phases if KAFKA in phase.replicas}
            running = config.brokers if config is not None else None
            if running is None or wanted != {running}:
                raise UserError(f"{spec.source}: replicas.kafka {sorted(wanted)}: the local backend does not scale "
                                f"brokers and the local stack runs {running}; use `aitax stack up --brokers N` and "
                                "a spec with that count (or none)")
        self.log(f"local stack: brokers {self.bootstrap}")

    def run_phase(self, index: int, run_id: str, factor: float | None = None) -> tuple[dict[str, int], RunResult]:
        """One phase through the load engine (at `factor`: a search's probe): the replicas it ran and what it
        measured."""
        from aitax.emulation.profile import load_profile
        from aitax.load.engine import local_stack_for, print_result, run_load, run_local_pipeline
        from aitax.load.local import LocalLoad
        from aitax.runs.results import Driver, Workload
        from aitax.stack.stack import default_events

        phase, mode = self.spec.phases[index], self.spec.mode
        producers, consumers = phase.replicas[PRODUCER_STAGE[mode]], phase.replicas[CONSUMER_STAGE[mode]]
        if mode == "real":
            workload = Workload(mode="real", producers=producers, consumers=consumers, duration_s=phase.duration_s,
                                video=str(self.spec.video), gallery=str(self.spec.gallery), drain_s=REAL_DRAIN_S)
            result = run_local_pipeline(workload, Driver(), run_id, self.bootstrap, events=self.events)
        else:
            workload, offered = phase.emulated_workload(
                self.spec.profile, {"producers": producers, "consumers": consumers}, phase.instances,
                load_profile(self.spec.profile).offered_faces_per_s(1, 1.0), factor)
            load = LocalLoad(workload, Driver(), run_id, self.bootstrap, aitax_home() / "runs" / run_id / "logs",
                             self.events or default_events())
            load.check()
            result = run_load(load, offered_faces_per_s=offered, stack=local_stack_for(self.bootstrap))
            print_result(result)
            if result.process_failures:
                raise UserError(f"phase {phase.name}: {result.process_failures[0]}")
        return {CONSUMER_STAGE[mode]: consumers, PRODUCER_STAGE[mode]: producers}, result

    def restore(self) -> None:
        """Nothing to restore: every process of a phase has exited when the phase ends."""
