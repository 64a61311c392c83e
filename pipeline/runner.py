"""`aitax run`: the stage processes against the local stack, the way Deployments would run them on a cluster.

Producers (ingest-detect) ingest for `--duration` seconds and then drain: they finish the frames already queued
and wait for every face's acknowledgement. Consumers (identify) run until the group has no lag left, so every
face that was produced is identified before the run ends. Ctrl-C starts the same drain early.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from aitax.errors import UserError
from aitax.paths import aitax_home

DRAIN_TIMEOUT_S = 300


@dataclass
class StageProcess:
    name: str
    process: subprocess.Popen
    log: Path

    def tail(self, lines: int = 3) -> str:
        try:
            return " | ".join(self.log.read_text(errors="replace").strip().splitlines()[-lines:])
        except OSError:
            return ""


def _spawn(name: str, argv: list[str], logs: Path) -> StageProcess:
    log = logs / f"{name}.log"
    with open(log, "w") as out:
        process = subprocess.Popen([sys.executable, "-m", "aitax.cli", *argv], stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)  # Ctrl-C reaches only us
    return StageProcess(name, process, log)


def _stop(processes: list[StageProcess], timeout_s: float) -> None:
    for stage in processes:
        if stage.process.poll() is None:
            stage.process.send_signal(signal.SIGINT)
    deadline = time.monotonic() + timeout_s
    for stage in processes:
        try:
            stage.process.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            stage.process.kill()
            stage.process.wait()


def _wait_ready(consumers: list[StageProcess], timeout_s: float = 180) -> None:
    """Producers start once every consumer has loaded its model: start-up is not measured as broker wait."""
    from pipeline.cli import READY_LINE

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(READY_LINE in c.log.read_text(errors="replace") for c in consumers):
            return
        failed = [c for c in consumers if c.process.poll() is not None]
        if failed:
            _stop(consumers, 30)
            raise UserError(f"{failed[0].name} exited during start-up: {failed[0].tail()}")
        time.sleep(0.5)
    _stop(consumers, 30)
    raise UserError(f"identify processes not ready after {timeout_s:.0f} s")


def run_local(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from aitax.stack.stack import resolve_bootstrap
    from pipeline.cli import new_run_id
    from pipeline.frames import open_video
    from pipeline.gallery import load_gallery
    from pipeline.schema import FACES_TOPIC
    from pipeline.transport.admin import group_lag, partition_count, require_brokers

    if args.producers < 1 or args.consumers < 1:
        raise UserError(f"--producers {args.producers} --consumers {args.consumers}: need at least one of each")
    if args.duration <= 0:
        raise UserError(f"--duration {args.duration}: must be positive")
    open_video(str(args.video)).release()
    load_gallery(args.gallery)
    bootstrap = resolve_bootstrap(args.bootstrap)
    require_brokers(bootstrap)
    partitions = partition_count(bootstrap, FACES_TOPIC)
    if args.consumers > partitions:
        # An identify process beyond the partition count gets none: it would never report ready.
        raise UserError(f"--consumers {args.consumers}: the {FACES_TOPIC} topic has {partitions} partitions, so at "
                        f"most {partitions} identify processes can share its faces")
    run_id = args.run_id or new_run_id()
    events_dir = args.events_dir or aitax_home() / "runs" / run_id
    logs = events_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    from pipeline.cli import default_events

    events = ",".join(filter(lambda spec: spec != "none", [f"file:{events_dir}", default_events()]))
    common = ["--bootstrap", bootstrap, "--events", events]
    print(f"run {run_id}: {args.producers} ingest-detect + {args.consumers} identify processes; "
          f"events and logs in {events_dir}")

    consumers = [_spawn(f"identify-{i}", ["identify", "--gallery", str(args.gallery), *common], logs)
                 for i in range(1, args.consumers + 1)]
    _wait_ready(consumers)
    producers = [_spawn(f"ingest-detect-{i}", ["ingest-detect", "--video", str(args.video), "--stream-id",
                                               f"cam-{i}", "--run-id", run_id, "--loop", "--pace", args.pace,
                                               "--keying", args.keying, *common], logs)
                 for i in range(1, args.producers + 1)]
    interrupted = False
    try:
        with tqdm(total=int(args.duration), desc="ingesting", unit="s") as bar:
            started = time.monotonic()
            while (elapsed := time.monotonic() - started) < args.duration:
                if any(p.process.poll() is not None for p in producers + consumers):
                    break  # a stage died: stop and report it
                time.sleep(1)
                bar.update(int(elapsed) - bar.n)
    except KeyboardInterrupt:
        interrupted = True
        print("interrupted: draining in-flight faces")
    _stop(producers, DRAIN_TIMEOUT_S)  # producers drain and flush before exiting
    drain_deadline = time.monotonic() + DRAIN_TIMEOUT_S
    lag = -1
    with tqdm(desc="identifying backlog", unit="face") as bar:
        while time.monotonic() < drain_deadline and all(c.process.poll() is None for c in consumers):
            lag = group_lag(bootstrap, "identify", FACES_TOPIC)
            bar.set_postfix(lag=lag)
            if lag == 0:
                break
            time.sleep(1)
    _stop(consumers, 60)

    failed = [p for p in producers + consumers if p.process.returncode not in (0, None)]
    for stage in producers + consumers:
        print(f"  {stage.name:<18} exit {stage.process.returncode}: {stage.tail(1)}")
    print(f"run id: {run_id}")
    if failed:
        raise UserError(f"{', '.join(p.name for p in failed)} failed; see {logs}")
    if lag != 0:
        raise UserError(f"the identify group still lags by {lag} faces after {DRAIN_TIMEOUT_S} s")
    return 130 if interrupted else 0
