"""Telemetry commands: the AI-tax report and the Kibana saved-objects import."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    from aitax.commands.report import register_report
    from telemetry.kibana import register_kibana

    register_report(subparsers)
    register_kibana(subparsers)
    events = subparsers.add_parser("events", help="event spools: replay what ended processes left behind")
    actions = events.add_subparsers(dest="events_action", metavar="ACTION", required=True)
    replay = actions.add_parser("replay", help="index every spool left by processes that ended during an outage")
    replay.add_argument("--es", help="Elasticsearch URL (default: the local stack's)")
    replay.add_argument("--spool-dir", type=Path, help="spool folder (default $AITAX_HOME/spool)")
    replay.set_defaults(func=_replay)


def _replay(args: argparse.Namespace) -> int:
    from aitax.stack.stack import local_elasticsearch_url
    from ground.paths import aitax_home
    from telemetry.elastic import replay_spools

    url = args.es or local_elasticsearch_url()
    spool_dir = args.spool_dir or aitax_home() / "spool"
    print(f"replayed {replay_spools(url, spool_dir)} event(s) from {spool_dir}")
    return 0
