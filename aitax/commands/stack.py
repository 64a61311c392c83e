"""`aitax stack ...`: the local stack of real Kafka brokers, Elasticsearch and Prometheus."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from common.errors import UserError


def register(subparsers: argparse._SubParsersAction) -> None:
    stack = subparsers.add_parser(
        "stack",
        help="run the local stack: Kafka brokers, Elasticsearch, Prometheus",
        description="Run real Kafka brokers, Elasticsearch and Prometheus on 127.0.0.1. "
        "State lives under .aitax/ (or $AITAX_HOME).",
    )
    actions = stack.add_subparsers(dest="stack_action", metavar="ACTION", required=True)

    up = actions.add_parser("up", help="start the stack (idempotent) and wait until it is healthy")
    up.add_argument("--brokers", type=int, default=3, help="Kafka brokers, 3-8 (default 3)")
    up.add_argument(
        "--log-dirs-per-broker",
        type=int,
        default=1,
        help="log dirs per broker, standing for drives per broker (default 1)",
    )
    up.add_argument(
        "--faces-retention-ms",
        type=int,
        default=3_600_000,
        help="retention of the `faces` topic: thumbnails are personal data (default 1 h)",
    )
    up.add_argument("--no-elasticsearch", action="store_true", help="leave Elasticsearch out")
    up.add_argument("--no-prometheus", action="store_true", help="leave Prometheus out")
    up.set_defaults(func=_up)

    down = actions.add_parser("down", help="stop every process the stack started")
    down.set_defaults(func=_down)

    status = actions.add_parser("status", help="each component's PID, port and health")
    status.add_argument("--json", action="store_true", help="print JSON (log dirs, PIDs) for scripts")
    status.set_defaults(func=_status)

    install = actions.add_parser("install", help="fetch and build the pinned Kafka and Elasticsearch (cached)")
    install.set_defaults(func=_install)

    kill = actions.add_parser("kill-broker", help="SIGKILL one broker (fault experiments)")
    kill.add_argument("node_id", type=int, help="broker id, 1..N")
    kill.set_defaults(func=_kill_broker)

    start = actions.add_parser("start-broker", help="start one broker again and wait until it rejoins")
    start.add_argument("node_id", type=int, help="broker id, 1..N")
    start.set_defaults(func=_start_broker)


def _config_from_args(args: argparse.Namespace):
    from stack.config import StackConfig

    return StackConfig(
        brokers=args.brokers,
        log_dirs_per_broker=args.log_dirs_per_broker,
        faces_retention_ms=args.faces_retention_ms,
        elasticsearch=not args.no_elasticsearch,
        prometheus=not args.no_prometheus,
    )


def _running_config():
    from stack.stack import current_config

    config = current_config()
    if config is None:
        raise UserError("no stack has been started here; run `aitax stack up`")
    return config


def _up(args: argparse.Namespace) -> int:
    from stack.stack import status, up

    config = up(_config_from_args(args))
    return _print_status(status(config))


def _down(args: argparse.Namespace) -> int:
    from stack.stack import down

    stopped = down()
    print(f"stopped {stopped} process(es)" if stopped else "nothing was running")
    return 0


def _status(args: argparse.Namespace) -> int:
    from stack.stack import status

    rows = status(_running_config())
    if args.json:
        print(json.dumps([asdict(row) for row in rows], indent=2))
        return 0 if all(row.healthy for row in rows) else 1
    return _print_status(rows)


def _print_status(rows) -> int:
    print(f"{'component':<15}{'pid':>8}{'port':>7}  {'health':<8}{'rss MiB':>8}  detail")
    for row in rows:
        pid = str(row.pid) if row.pid else "-"
        rss = f"{row.rss_bytes / 2**20:.0f}" if row.rss_bytes else "-"
        print(f"{row.name:<15}{pid:>8}{row.port:>7}  {'ok' if row.healthy else 'DOWN':<8}{rss:>8}  {row.detail}")
    return 0 if all(row.healthy for row in rows) else 1


def _install(args: argparse.Namespace) -> int:
    from stack.config import StackConfig
    from stack.stack import install

    install(StackConfig())
    print("Kafka, Elasticsearch and Prometheus are installed")
    return 0


def _kill_broker(args: argparse.Namespace) -> int:
    from stack.stack import kill_broker

    kill_broker(_running_config(), args.node_id)
    print(f"killed broker {args.node_id} (SIGKILL)")
    return 0


def _start_broker(args: argparse.Namespace) -> int:
    from stack.stack import start_broker

    start_broker(_running_config(), args.node_id)
    print(f"broker {args.node_id} is back in the cluster metadata")
    return 0
