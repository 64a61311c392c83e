"""`aitax stack ...`: the local stack of real Kafka brokers, Elasticsearch and Prometheus."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import click

from aitax.commands.options import group
from aitax.common.errors import UserError
from aitax.stack.warmup import BROKER_WARMUP_S


def register(root: click.Group) -> None:
    root.add_command(stack_group)


stack_group = group("stack", "run the local stack: Kafka brokers, Elasticsearch, Prometheus",
                    "Run real Kafka brokers, Elasticsearch and Prometheus on 127.0.0.1. State lives under .aitax/ (or "
                    "$AITAX_HOME).")

NODE_ID = click.argument("node_id", type=int, metavar="NODE_ID")  # a broker id, 1..N


@stack_group.command(short_help="start the stack (idempotent) and wait until it is healthy")
@click.option("--brokers", type=int, default=3, show_default=True, help="Kafka brokers, 3-8")
@click.option("--log-dirs-per-broker", type=int, default=1, show_default=True,
              help="log dirs per broker, standing for drives per broker")
@click.option("--faces-retention-ms", type=int, default=3_600_000, show_default=True,
              help="retention of the `faces` topic: thumbnails are personal data (1 h)")
@click.option("--no-elasticsearch", is_flag=True, help="leave Elasticsearch out")
@click.option("--no-prometheus", is_flag=True, help="leave Prometheus out")
@click.option("--plaintext", is_flag=True,
              help="Kafka without TLS, client certificates or ACLs, and Elasticsearch over http without users: "
                   "only to measure what security costs, or where something else terminates TLS")
@click.option("--design", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="a declared edge data centre (designs/*.yaml) scaled onto this machine: its brokers and drives "
                   "per broker, each log dir on a drive of the design's bandwidth, each broker in a CPU slice of "
                   "its cores (root); overrides --brokers and --log-dirs-per-broker")
@click.option("--broker-warmup", "broker_warmup_s", type=click.FloatRange(min=0), default=BROKER_WARMUP_S,
              show_default=True,
              help="seconds of records sent and read back through brokers this command started, so that their JIT "
                   "has compiled Kafka's request paths before a run measures them; 0 to skip")
def up(brokers: int, log_dirs_per_broker: int, faces_retention_ms: int, no_elasticsearch: bool,
       no_prometheus: bool, plaintext: bool, design: Path | None, broker_warmup_s: float) -> int:
    """Start the stack (idempotent) and wait until it is healthy."""
    from aitax.stack.config import StackConfig
    from aitax.stack.stack import status, up

    testbed = None
    if design is not None:
        from aitax.stack.design import load_design

        declared = load_design(design)
        testbed = declared.testbed()
        brokers, log_dirs_per_broker = declared.brokers, declared.broker.drives.count
    config = up(StackConfig(brokers=brokers, log_dirs_per_broker=log_dirs_per_broker,
                            faces_retention_ms=faces_retention_ms, elasticsearch=not no_elasticsearch,
                            prometheus=not no_prometheus, tls=not plaintext,
                            elasticsearch_tls=not plaintext, testbed=testbed), broker_warmup_s=broker_warmup_s)
    return _print_status(status(config))


@stack_group.command(short_help="measure what each broker drive writes (stored with the stack)")
def calibrate() -> int:
    """Measure, again, the sequential write rate of each device under the brokers' log dirs, past the page cache
    (Kafka's write-back pattern at the device), and store it with the stack: the capacity a share of storage is
    read against. `stack up` measures a device it has not measured yet."""
    from aitax.stack import calibration, kafka

    config = _running_config()
    calibration.calibrate([d for broker in kafka.brokers(config) for d in broker.log_dirs], again=True)
    print(f"stored in {calibration.calibration_file()}")
    return 0


@stack_group.command(short_help="stop every process the stack started")
def down() -> int:
    """Stop every process the stack started."""
    from aitax.stack.stack import down

    stopped = down()
    print(f"stopped {stopped} process(es)" if stopped else "nothing was running")
    return 0


@stack_group.command(short_help="each component's PID, port and health")
@click.option("--json", "as_json", is_flag=True, help="print JSON (log dirs, PIDs) for scripts")
def status(as_json: bool) -> int:
    """Each component's PID, port and health; exits 1 when one is down."""
    from aitax.stack.stack import status

    rows = status(_running_config())
    if as_json:
        print(json.dumps([asdict(row) for row in rows], indent=2))
        return 0 if all(row.healthy for row in rows) else 1
    return _print_status(rows)


def _running_config():
    from aitax.stack.stack import current_config

    config = current_config()
    if config is None:
        raise UserError("no stack has been started here; run `aitax stack up`")
    return config


def _print_status(rows) -> int:
    print(f"{'component':<15}{'pid':>8}{'port':>7}  {'health':<8}{'rss MiB':>8}  detail")
    for row in rows:
        pid = str(row.pid) if row.pid else "-"
        rss = f"{row.rss_bytes / 2**20:.0f}" if row.rss_bytes else "-"
        print(f"{row.name:<15}{pid:>8}{row.port:>7}  {'ok' if row.healthy else 'DOWN':<8}{rss:>8}  {row.detail}")
    return 0 if all(row.healthy for row in rows) else 1


@stack_group.command(short_help="fetch and build the pinned Kafka and Elasticsearch (cached)")
def install() -> int:
    """Fetch and build the pinned Kafka and Elasticsearch (cached)."""
    from aitax.stack.config import StackConfig
    from aitax.stack.stack import install

    install(StackConfig())
    print("Kafka, Elasticsearch and Prometheus are installed")
    return 0


@stack_group.command("kill-broker", short_help="SIGKILL one broker (fault experiments)")
@NODE_ID
def kill_broker(node_id: int) -> int:
    """SIGKILL one broker (fault experiments); NODE_ID is 1..N."""
    from aitax.stack.stack import kill_broker

    kill_broker(_running_config(), node_id)
    print(f"killed broker {node_id} (SIGKILL)")
    return 0


@stack_group.command("start-broker", short_help="start one broker again and wait until it rejoins")
@NODE_ID
def start_broker(node_id: int) -> int:
    """Start one broker again and wait until it rejoins; NODE_ID is 1..N."""
    from aitax.stack.stack import start_broker

    start_broker(_running_config(), node_id)
    print(f"broker {node_id} is back in the cluster metadata")
    return 0
