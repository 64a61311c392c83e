"""Faults under load: the emulated pipeline runs at a steady rate while a broker, the KRaft controller, two
brokers, a consumer or Elasticsearch fails; then every face is accounted for.

Accounting: the faces the producers had acknowledged, the distinct faces the `faces` topic holds, and the
distinct faces that came out of identify (duplicates after a rebalance counted, then removed). The producer
stall is the longest gap between consecutive broker append timestamps on the `faces` topic.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from aitax.common.daemons import poll_until
from aitax.common.paths import aitax_home
from aitax.emulation.profile import paper_profile
from aitax.emulation.sweep import SweepPlan, SweepSpec, delete_topics, emulated_load, emulated_workload
from aitax.load.engine import run_load
from aitax.load.local import LocalLoad
from aitax.pipeline.schema import Topics
from aitax.runs.results import Driver, FaultResult, RunResult, judge_fault
from aitax.stack import elasticsearch as es_component
from aitax.stack import kafka
from aitax.stack import stack as local_stack
from aitax.stack.config import StackConfig


@dataclass
class Context:
    config: StackConfig
    load: LocalLoad
    notes: list[str]


@contextlib.contextmanager
def _stack_home(home: Path) -> Iterator[None]:
    """This process works against the stack under `home` (its state, its certificates) until the block ends."""
    before = os.environ.get("AITAX_HOME")
    os.environ["AITAX_HOME"] = str(home)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("AITAX_HOME")
        else:
            os.environ["AITAX_HOME"] = before
        local_stack.use_local_identity(None)


def active_controller(config: StackConfig) -> int:
    output = kafka.run_tool("org.apache.kafka.tools.MetadataQuorumCommand",
                            ["--bootstrap-server", config.bootstrap_servers, *kafka.tool_client_args(config),
                             "describe", "--status"])
    for line in output.splitlines():
        if line.startswith("LeaderId:"):
            return int(line.split(":")[1])
    raise RuntimeError(f"no LeaderId in: {output[:200]}")


def _kill_broker_then_restart(pick: Callable[[Context], int], down_s: float) -> Callable[[Context], None]:
    def disrupt(ctx: Context) -> None:
        node = pick(ctx)
        ctx.notes.append(f"SIGKILL broker {node}, restarted after {down_s:g} s")
        local_stack.kill_broker(ctx.config, node)
        time.sleep(down_s)
        local_stack.start_broker(ctx.config, node)
    return disrupt


def _two_brokers_down(ctx: Context) -> None:
    first, second = ctx.config.node_ids[-2:]
    local_stack.kill_broker(ctx.config, first)
    local_stack.kill_broker(ctx.config, second)
    ctx.notes.append(f"SIGKILL brokers {first} and {second} (below min.insync 2) for 8 s, then one by one")
    time.sleep(8)
    local_stack.start_broker(ctx.config, first)
    time.sleep(4)
    local_stack.start_broker(ctx.config, second)


def _kill_consumer(ctx: Context) -> None:
    victim = ctx.load.consumers[0]
    ctx.load.killed.add(victim.pid)
    os.kill(victim.pid, signal.SIGKILL)
    ctx.notes.append("SIGKILL one identify process mid-batch; the group rebalances")


def _elasticsearch_outage(ctx: Context) -> None:
    es_component.process().stop()
    ctx.notes.append("Elasticsearch stopped for 30 s")
    time.sleep(30)
    local_stack.up(ctx.config, progress=lambda _: None)


def _poison(ctx: Context) -> None:
    from aitax.pipeline.transport import make_producer

    producer = make_producer("confluent-kafka", ctx.config.bootstrap_servers)
    for value, headers in ((os.urandom(300), {}), (b"x", {"aitax.schema": b"9"}),
                           (b"y", {"aitax.schema": b"1", "aitax.meta": b"{}"})):
        producer.send(ctx.load.topics.faces, value, key=b"poison", headers=headers)
    producer.flush(30)
    ctx.notes.append("3 poison records injected")


SCENARIOS: dict[str, tuple[Callable[[Context], None], float]] = {
    # name: (disruption, seconds of load)
    "broker-kill": (_kill_broker_then_restart(lambda ctx: ctx.config.node_ids[-1], 5), 24),
    "controller-kill": (_kill_broker_then_restart(lambda ctx: active_controller(ctx.config), 5), 24),
    "two-brokers-down": (_two_brokers_down, 30),
    "consumer-kill": (_kill_consumer, 24),
    "elasticsearch-outage": (_elasticsearch_outage, 40),
    "poison-records": (_poison, 16),
}


DRAIN_S = 300.0  # after the load: generous, a consumer group recovering from two dead brokers is slow when starved
DISK_FILL_TIMEOUT_S = 90.0  # the disk-full scenario's disks fill in about 30 s here
BROKER_RETURN_S = 180.0  # restarting the brokers a full disk stopped, each restart waiting for the others' quorum
BROKER_SCENARIOS = {"broker-kill", "controller-kill", "two-brokers-down"}


@dataclass(frozen=True)
class TopicAudit:
    """What a run's topics hold once its consumers are idle: every face in `faces` should have an identity."""

    in_topic: int  # distinct faces of the run in `faces`
    identified: int  # of those, how many have an identity
    duplicates: int  # identities published more than once (a redelivery after a crash or rebalance)
    lost: int  # in `faces` (so acknowledged to a producer) but never identified
    dead_letters: int  # records in the dead-letter topic (all runs)
    stall_s: float  # the longest gap between consecutive appends to `faces`


def audit_topics(bootstrap: str, run_id: str, topics: Topics) -> TopicAudit:
    from aitax.pipeline.transport.readback import count_records, read_face_topic, read_identities

    faces = read_face_topic(bootstrap, topics.faces)
    in_topic = {key for key in faces.faces if key[0] == run_id}
    identities, duplicates = read_identities(bootstrap, run_id, topic=topics.identities)
    identified = {i.key for i in identities}
    return TopicAudit(in_topic=len(in_topic), identified=len(identified & in_topic), duplicates=duplicates,
                      lost=len(in_topic - identified), dead_letters=count_records(bootstrap, topics.dlq),
                      stall_s=round(faces.stall_s, 2))


def run_scenario(name: str, config: StackConfig, factor: float = 2.0, producers: int = 2, consumers: int = 4,
                 workdir: Path | None = None, duration_s: float | None = None) -> FaultResult:
    disrupt, default_duration_s = SCENARIOS[name]
    duration_s = duration_s or default_duration_s
    spec = SweepSpec(SweepPlan([factor]), emulated_workload(producers, consumers, 2, duration_s, "paper"), Driver(),
                     paper_profile())
    run_name = f"fault-{name}-{random.Random().randrange(16**6):06x}"
    events = f"es:{config.elasticsearch_url}" if name == "elasticsearch-outage" else None
    load = emulated_load(spec, config, factor, run_name, workdir or aitax_home() / "faults", events=events,
                         drain_s=DRAIN_S)
    context = Context(config, load, [])
    run = run_load(load, disruption=lambda: disrupt(context))
    poll_until(lambda: kafka.cluster_health(config).healthy(config.node_ids), 60, interval_s=1.0)
    health = kafka.cluster_health(config)
    context.notes.extend(run.notes)
    audit = audit_topics(config.bootstrap_servers, run_name, load.topics)
    events = expected = None
    if name == "elasticsearch-outage":
        from aitax.telemetry.elastic import replay_spools

        # Processes that ended before Elasticsearch returned left spools: replay them as an operator would.
        context.notes.append(f"{replay_spools(config.elasticsearch_url, aitax_home() / 'spool')} events replayed "
                             "from the spools of ended processes")
        # One ingest and detect event per frame (the emulator's frames are its faces), a broker_wait and an
        # identify per face identified.
        expected = {"broker_wait": audit.identified, "detect": run.produced_faces, "identify": audit.identified,
                    "ingest": run.produced_faces}
        events = _events_in_elasticsearch(config, run_name, expected)
    delete_topics(config, load.topics)
    return _fault_result(name, producers * 10 * factor, run, audit,
                         health.healthy(config.node_ids) if name in BROKER_SCENARIOS else None, context.notes,
                         events, expected)


def _fault_result(scenario: str, offered_faces_per_s: float, run: RunResult, audit: TopicAudit,
                  isr_restored: bool | None, notes: list[str], events: dict[str, int] | None = None,
                  expected_events: dict[str, int] | None = None) -> FaultResult:
    verdict = judge_fault(acknowledged=run.produced_faces, in_topic=audit.in_topic, lost=audit.lost,
                          isr_restored=isr_restored, process_failures=run.process_failures, events=events,
                          expected_events=expected_events)
    return FaultResult(scenario=scenario, offered_faces_per_s=offered_faces_per_s, acknowledged=run.produced_faces,
                       in_topic=audit.in_topic, identified=audit.identified, duplicates=audit.duplicates,
                       lost=audit.lost, stall_s=audit.stall_s, isr_restored=isr_restored,
                       dead_letters=audit.dead_letters, process_failures=run.process_failures,
                       events_in_elasticsearch=events, notes=notes, verdict=verdict)


def _events_in_elasticsearch(config: StackConfig, run_name: str, expected: dict[str, int]) -> dict[str, int]:
    """Events of the run per stage, once they add up to `expected` or after a minute."""
    from aitax.stack.elasticsearch import admin_credentials
    from aitax.telemetry.elastic_access import client

    es = client(config.elasticsearch_url, admin_credentials(config))
    counts: dict[str, int] = {}

    def added_up() -> bool:
        es.indices.refresh(index="aitax-events-*")
        buckets = es.search(index="aitax-events-*", size=0, query={"term": {"run_id": run_name}},
                            aggs={"stages": {"terms": {"field": "stage"}}})["aggregations"]["stages"]["buckets"]
        counts.clear()
        counts.update({b["key"]: b["doc_count"] for b in buckets})
        return all(counts.get(stage) == count for stage, count in expected.items())

    poll_until(added_up, 60, 2)
    return dict(sorted(counts.items()))


def print_table(results: list[FaultResult]) -> None:
    print(f"\n{'scenario':<22}{'load/s':>7}{'acked':>7}{'in topic':>9}{'identified':>11}{'dups':>6}{'lost':>6}"
          f"{'stall s':>8}{'ISR':>5}{'back s':>7}{'DLQ':>5}  verdict")
    for r in results:
        isr = "-" if r.isr_restored is None else ("3/3" if r.isr_restored else "NO")
        recovery = "-" if r.recovery_s is None else f"{r.recovery_s:.0f}"
        print(f"{r.scenario:<22}{r.offered_faces_per_s:>7.0f}{r.acknowledged:>7}{r.in_topic:>9}{r.identified:>11}"
              f"{r.duplicates:>6}{r.lost:>6}{r.stall_s:>8.1f}{isr:>5}{recovery:>7}{r.dead_letters:>5}  "
              f"{'held' if r.verdict.held else 'FAILED'}")
        for condition in r.verdict.conditions:
            print(f"{'':<22}[{'held' if condition.held else 'FAILED'}] {condition.name}: {condition.measured} "
                  f"(required: {condition.required})")
        for note in r.notes:
            print(f"{'':<22}{note}")


def _restart_until_all_run(config: StackConfig, env: dict[str, str], stopped: Callable[[], list[int]]
                           ) -> tuple[list[int], list[str]]:
    """Restart every broker whose process has stopped, whenever it stops (one can halt after the space returned:
    its failed write came before), until all run and are in the metadata or `BROKER_RETURN_S` has passed. Returns
    the brokers restarted and a line per failed restart."""
    import subprocess
    import sys

    restarted: set[int] = set()
    failed: list[str] = []
    deadline = time.monotonic() + BROKER_RETURN_S
    while time.monotonic() < deadline:
        if not (dead := stopped()):
            if set(config.node_ids) <= set(kafka.cluster_health(config).brokers_in_metadata):
                break
            time.sleep(1)
            continue
        # Together: brokers that are also the KRaft quorum wait for each other to start.
        restarts = [subprocess.Popen([sys.executable, "-m", "aitax.cli", "stack", "start-broker", str(n)], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for n in dead]
        for n, restart in zip(dead, restarts, strict=True):
            _, error = restart.communicate()
            if restart.returncode:
                failed.append(f"broker {n}: {(error.strip().splitlines() or [f'exit {restart.returncode}'])[-1]}")
        restarted.update(dead)
    return sorted(restarted), failed


def run_disk_full(workdir: Path, port_base: int = 24000, size_mb: int = 48, factor: float = 8.0) -> FaultResult:
    """A broker disk that fills: every broker of a second, Kafka-only stack keeps its log on a small tmpfs.
    Load runs until the brokers fail on full disks; the filesystems then grow, the brokers restart, and every
    acknowledged face must still be there and be identified. Needs root (mount)."""
    import shutil
    import subprocess
    import sys

    from aitax.common.errors import UserError
    from aitax.common.paths import downloads_dir

    if os.geteuid() != 0 or shutil.which("mount") is None:
        raise UserError("the disk-full scenario mounts size-limited filesystems: run it as root")
    home = workdir / "disk-full-home"
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "downloads").exists():
        (home / "downloads").symlink_to(downloads_dir())
    env = {**os.environ, "AITAX_HOME": str(home), "AITAX_PORT_BASE": str(port_base)}
    config = StackConfig(port_base=port_base, elasticsearch=False, prometheus=False)
    log_dirs = [home / "stack" / "kafka" / f"broker-{n}" / "data-1" for n in config.node_ids]

    def aitax(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "aitax.cli", *args], env=env, capture_output=True, text=True,
                              timeout=timeout)

    for log_dir in log_dirs:
        log_dir.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(log_dir)], check=True)
    notes: list[str] = []
    try:
        with _stack_home(home):
            started = aitax("stack", "up", "--no-elasticsearch", "--no-prometheus")
            if started.returncode:
                raise UserError(f"disk-full stack did not start: {started.stderr.strip()[-300:]}")
            local_stack.use_local_identity(None)  # its admin, by its own CA
            spec = SweepSpec(SweepPlan([factor]), emulated_workload(2, 2, 1, 30, "paper"), Driver(), paper_profile())
            load = emulated_load(spec, config, factor, f"fault-disk-full-{random.Random().randrange(16**6):06x}",
                                 workdir, drain_s=180)

            def stopped() -> list[int]:
                return [n for n in config.node_ids if not kafka.Broker(n, config).process.is_running()]

            def fill_then_grow() -> None:
                # A broker halts when a write to its log dir fails, which can leave more than a record's space free.
                filled = poll_until(lambda: stopped() or any(shutil.disk_usage(d).free <= 1 << 20 for d in log_dirs),
                                    DISK_FILL_TIMEOUT_S)
                notes.append(f"log dirs full ({size_mb} MB tmpfs each) after the load started" if filled
                             else f"log dirs not full {DISK_FILL_TIMEOUT_S:g} s into the load")
                time.sleep(5)
                for log_dir in log_dirs:
                    subprocess.run(["mount", "-o", f"remount,size={size_mb * 20}m", str(log_dir)], check=True)
                restarted, failed = _restart_until_all_run(config, env, stopped)
                notes.append(f"brokers down on full disks: {restarted or 'none'}; space returned, brokers "
                             f"restarted" + (f" (failed: {'; '.join(failed)})" if failed else ""))

            # The disks fill from the start: the disruption begins at once rather than a quarter in.
            run = run_load(load, disruption=fill_then_grow, disruption_after_s=0)
            notes.extend(run.notes)
            audit = audit_topics(config.bootstrap_servers, load.run_id, load.topics)
            return _fault_result("broker-disk-full", 2 * 10 * factor, run, audit,
                                 kafka.cluster_health(config).healthy(config.node_ids), notes)
    finally:
        aitax("stack", "down")
        for log_dir in log_dirs:
            subprocess.run(["umount", str(log_dir)], check=False)
