"""The local backend: the same spec as processes against the local stack (`aitax stack up`).

Each replica is one process: `aitax ingest-detect` / `aitax identify` for mode real (through `aitax run`'s
runner: consumers ready before producers, producers drain, consumers finish the backlog), and
`aitax emulate-producers` / `aitax emulate-consumers --instances N` for mode emulated.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

from aitax.experiment.spec import CONSUMER_STAGE, KAFKA, PRODUCER_STAGE, ExperimentSpec
from ground import children
from ground.errors import UserError
from ground.paths import aitax_home

STOP_TIMEOUT_S = 120


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
        from aitax.stack.stack import current_config, resolve_bootstrap
        from pipeline.transport.admin import require_brokers

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
            from pipeline.frames import open_video
            from pipeline.gallery import load_gallery

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

    def run_phase(self, index: int, run_id: str) -> dict[str, int]:
        phase = self.spec.phases[index]
        if self.spec.mode == "real":
            return self._run_real(index, run_id)
        consumers = phase.replicas[CONSUMER_STAGE["emulated"]]
        producers = phase.replicas[PRODUCER_STAGE["emulated"]]
        logs = aitax_home() / "runs" / run_id / "logs"
        common = ["--factor", f"{phase.factor:g}", "--profile", self.spec.profile, "--run-id", run_id]
        env = {"AITAX_BOOTSTRAP": self.bootstrap, "AITAX_RUN_ID": run_id,
               **({"AITAX_EVENTS": self.events} if self.events else {})}
        consumer_processes = [children.spawn(f"emulate-consumers-{i}", ["emulate-consumers", "--instances",
                                                                        str(phase.instances["consumers"]), *common],
                                             logs, env) for i in range(1, consumers + 1)]
        producer_processes = [children.spawn(f"emulate-producers-{i}", ["emulate-producers", "--instances",
                                                                        str(phase.instances["producers"]), *common],
                                             logs, env) for i in range(1, producers + 1)]
        everyone = consumer_processes + producer_processes
        try:
            deadline = time.monotonic() + phase.duration_s
            while time.monotonic() < deadline:
                dead = children.failed(everyone)
                if dead:
                    raise UserError(f"{dead[0].name} exited with {dead[0].returncode}; see {logs}")
                time.sleep(0.5)
        finally:
            # Producers stop first so the consumers can finish what was produced.
            children.stop(producer_processes, STOP_TIMEOUT_S)
            children.stop(consumer_processes, STOP_TIMEOUT_S)
        # A child stopped before its signal handler was installed (a short phase) exits by SIGINT: not a failure.
        failed = children.failed(everyone, accepted=(0, -signal.SIGINT, 130))
        if failed:
            raise UserError(f"{', '.join(child.name for child in failed)} failed; see {logs}")
        return {CONSUMER_STAGE["emulated"]: consumers, PRODUCER_STAGE["emulated"]: producers}

    def restore(self) -> None:
        """Nothing to restore: every process of a phase has exited when the phase ends."""

    def _run_real(self, index: int, run_id: str) -> dict[str, int]:
        from aitax.load.local import LocalPipelineRun, run_local_pipeline
        from aitax.stack.stack import default_events

        phase = self.spec.phases[index]
        producers, consumers = phase.replicas["ingest-detect"], phase.replicas["identify"]
        status = run_local_pipeline(LocalPipelineRun(video=self.spec.video, gallery=self.spec.gallery,
                                                     producers=producers, consumers=consumers,
                                                     duration_s=phase.duration_s, run_id=run_id),
                                    self.bootstrap, self.events or default_events())
        if status != 0:
            raise UserError(f"phase {phase.name} ended with status {status}")
        return {"identify": consumers, "ingest-detect": producers}
