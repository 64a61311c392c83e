"""The local backend: the same spec as processes against the local stack (`aitax stack up`).

Each replica is one process: `aitax ingest-detect` / `aitax identify` for mode real (through `aitax run`'s
runner: consumers ready before producers, producers drain, consumers finish the backlog), and
`aitax emulate-producers` / `aitax emulate-consumers --instances N` for mode emulated.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from aitax.errors import UserError
from aitax.experiment.spec import CONSUMER_STAGE, KAFKA, PRODUCER_STAGE, ExperimentSpec
from aitax.paths import aitax_home

EMULATOR_COMMANDS = ("emulate-producers", "emulate-consumers")
STOP_TIMEOUT_S = 120


def available_commands() -> set[str]:
    """The `aitax` subcommands this checkout has (the emulator's may not exist yet)."""
    from aitax.cli import build_parser

    parser = build_parser()
    for action in parser._subparsers._group_actions:  # argparse keeps subcommands only here
        if isinstance(action, argparse._SubParsersAction):
            return set(action.choices)
    return set()


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
            missing = [c for c in EMULATOR_COMMANDS if c not in available_commands()]
            if missing:
                raise UserError(f"`aitax {missing[0]}` is not available in this checkout: mode: emulated needs the "
                                "acceleration emulator")
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
        logs.mkdir(parents=True, exist_ok=True)
        common = ["--factor", f"{phase.factor:g}", "--profile", self.spec.profile, "--run-id", run_id]
        env = {"AITAX_BOOTSTRAP": self.bootstrap, "AITAX_RUN_ID": run_id,
               **({"AITAX_EVENTS": self.events} if self.events else {})}
        started = [
            *(self._spawn(f"emulate-consumers-{i}", ["emulate-consumers", "--instances",
                                                     str(phase.instances["consumers"]), *common], env, logs)
              for i in range(1, consumers + 1)),
            *(self._spawn(f"emulate-producers-{i}", ["emulate-producers", "--instances",
                                                     str(phase.instances["producers"]), *common], env, logs)
              for i in range(1, producers + 1)),
        ]
        try:
            deadline = time.monotonic() + phase.duration_s
            while time.monotonic() < deadline:
                dead = [(name, p) for name, p in started if p.poll() not in (None, 0)]
                if dead:
                    raise UserError(f"{dead[0][0]} exited with {dead[0][1].returncode}; see {logs}")
                time.sleep(0.5)
        finally:
            # Producers stop first so the consumers can finish what was produced.
            _stop([s for s in started if s[0].startswith("emulate-producers")])
            _stop([s for s in started if s[0].startswith("emulate-consumers")])
        failed = [name for name, p in started if p.returncode not in (0, -signal.SIGINT, 130)]
        if failed:
            raise UserError(f"{', '.join(failed)} failed; see {logs}")
        return {CONSUMER_STAGE["emulated"]: consumers, PRODUCER_STAGE["emulated"]: producers}

    def restore(self) -> None:
        """Nothing to restore: every process of a phase has exited when the phase ends."""

    def _run_real(self, index: int, run_id: str) -> dict[str, int]:
        from pipeline.runner import run_local
        from pipeline.schema import DEFAULT_KEYING

        phase = self.spec.phases[index]
        producers, consumers = phase.replicas["ingest-detect"], phase.replicas["identify"]
        status = run_local(argparse.Namespace(
            video=self.spec.video, gallery=self.spec.gallery, producers=producers, consumers=consumers,
            duration=phase.duration_s, run_id=run_id, events_dir=None, pace="native", bootstrap=self.bootstrap,
            keying=DEFAULT_KEYING))
        if status != 0:
            raise UserError(f"phase {phase.name} ended with status {status}")
        return {"identify": consumers, "ingest-detect": producers}

    @staticmethod
    def _spawn(name: str, argv: list[str], env: dict[str, str], logs: Path) -> tuple[str, subprocess.Popen]:
        with open(logs / f"{name}.log", "w") as out:
            process = subprocess.Popen([sys.executable, "-m", "aitax.cli", *argv], stdout=out,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       env={**os.environ, **env}, start_new_session=True)
        return name, process


def _stop(processes: list[tuple[str, subprocess.Popen]]) -> None:
    for _, process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for _, process in processes:
        try:
            process.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
