"""`aitax run`: the stage processes against the local stack, the way Deployments would run them on a cluster.

Producers (ingest-detect) ingest for `--duration` seconds and then drain: they finish the frames already queued
and wait for every face's acknowledgement. Consumers (identify) run until the group has no lag left, so every
face that was produced is identified before the run ends. Ctrl-C starts the same drain early.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from ground import children
from ground.errors import UserError
from ground.paths import aitax_home
from pipeline.schema import DEFAULT_KEYING

DRAIN_TIMEOUT_S = 300
READY_TIMEOUT_S = 180


@dataclass(frozen=True)
class LocalPipelineRun:
    video: Path  # every producer's video (looped)
    gallery: Path
    producers: int = 1  # ingest-detect processes
    consumers: int = 2  # identify processes
    duration_s: float = 60.0  # of ingestion
    run_id: str | None = None  # default: a new one
    events_dir: Path | None = None  # default: .aitax/runs/RUN_ID
    pace: str = "native"
    keying: str = DEFAULT_KEYING

    def __post_init__(self) -> None:
        if self.producers < 1 or self.consumers < 1:
            raise UserError(f"--producers {self.producers} --consumers {self.consumers}: need at least one of each")
        if self.duration_s <= 0:
            raise UserError(f"--duration {self.duration_s}: must be positive")


def run_local_pipeline(run: LocalPipelineRun, bootstrap: str, default_events: str) -> int:
    """Run the stages against `bootstrap`; events go to the run's folder and to `default_events`. Returns the
    exit status (130 when interrupted), raises UserError when a stage failed or faces were left unidentified."""
    from tqdm import tqdm

    from pipeline.frames import open_video
    from pipeline.gallery import load_gallery
    from pipeline.runtime import new_run_id
    from pipeline.schema import FACES_TOPIC
    from pipeline.transport.admin import group_lag, partition_count, require_brokers

    open_video(str(run.video)).release()
    load_gallery(run.gallery)
    require_brokers(bootstrap)
    partitions = partition_count(bootstrap, FACES_TOPIC)
    if run.consumers > partitions:
        # An identify process beyond the partition count gets none: it would never report ready.
        raise UserError(f"--consumers {run.consumers}: the {FACES_TOPIC} topic has {partitions} partitions, so at "
                        f"most {partitions} identify processes can share its faces")
    run_id = run.run_id or new_run_id()
    events_dir = run.events_dir or aitax_home() / "runs" / run_id
    logs = events_dir / "logs"
    events = ",".join(filter(lambda spec: spec != "none", [f"file:{events_dir}", default_events]))
    common = ["--bootstrap", bootstrap, "--events", events]
    print(f"run {run_id}: {run.producers} ingest-detect + {run.consumers} identify processes; "
          f"events and logs in {events_dir}")

    consumers = [children.spawn(f"identify-{i}", ["identify", "--gallery", str(run.gallery), *common], logs)
                 for i in range(1, run.consumers + 1)]
    try:
        # Producers start once every consumer has loaded its model: start-up is not measured as broker wait.
        children.wait_reported(consumers, children.READY, READY_TIMEOUT_S, "identify processes")
    except UserError:
        children.stop(consumers, 30)
        raise
    producers = [children.spawn(f"ingest-detect-{i}", ["ingest-detect", "--video", str(run.video), "--stream-id",
                                                       f"cam-{i}", "--run-id", run_id, "--loop", "--pace", run.pace,
                                                       "--keying", run.keying, *common], logs)
                 for i in range(1, run.producers + 1)]
    interrupted = False
    try:
        with tqdm(total=int(run.duration_s), desc="ingesting", unit="s") as bar:
            started = time.monotonic()
            while (elapsed := time.monotonic() - started) < run.duration_s:
                if not all(child.running() for child in producers + consumers):
                    break  # a stage died: stop and report it
                time.sleep(1)
                bar.update(int(elapsed) - bar.n)
    except KeyboardInterrupt:
        interrupted = True
        print("interrupted: draining in-flight faces")
    children.stop(producers, DRAIN_TIMEOUT_S)  # producers drain and flush before exiting
    drain_deadline = time.monotonic() + DRAIN_TIMEOUT_S
    lag = -1
    with tqdm(desc="identifying backlog", unit="face") as bar:
        while time.monotonic() < drain_deadline and all(child.running() for child in consumers):
            lag = group_lag(bootstrap, "identify", FACES_TOPIC)
            bar.set_postfix(lag=lag)
            if lag == 0:
                break
            time.sleep(1)
    children.stop(consumers, 60)

    failed = children.failed(producers + consumers)
    for child in producers + consumers:
        print(f"  {child.name:<18} exit {child.returncode}: {child.tail(1)}")
    print(f"run id: {run_id}")
    if failed:
        raise UserError(f"{', '.join(child.name for child in failed)} failed; see {logs}")
    if lag != 0:
        raise UserError(f"the identify group still lags by {lag} faces after {DRAIN_TIMEOUT_S} s")
    return 130 if interrupted else 0
