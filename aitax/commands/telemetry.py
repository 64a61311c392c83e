"""Telemetry commands: the AI-tax report and the Kibana saved-objects import."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    from aitax.commands.report import register_report

    register_report(subparsers)
    _register_kibana(subparsers)
    events = subparsers.add_parser("events", help="event spools: replay what ended processes left behind")
    actions = events.add_subparsers(dest="events_action", metavar="ACTION", required=True)
    replay = actions.add_parser("replay", help="index every spool left by processes that ended during an outage")
    replay.add_argument("--es", help="Elasticsearch URL (default: the local stack's)")
    replay.add_argument("--spool-dir", type=Path, help="spool folder (default $AITAX_HOME/spool)")
    replay.set_defaults(func=_replay)


def _replay(args: argparse.Namespace) -> int:
    from common.paths import aitax_home
    from stack.stack import local_elasticsearch_url
    from telemetry.elastic import replay_spools

    url = args.es or local_elasticsearch_url()
    spool_dir = args.spool_dir or aitax_home() / "spool"
    print(f"replayed {replay_spools(url, spool_dir)} event(s) from {spool_dir}")
    return 0


def _register_kibana(subparsers: argparse._SubParsersAction) -> None:
    from telemetry.kibana import API_KEY_ENV, DEFAULT_NDJSON

    kibana = subparsers.add_parser(
        "kibana",
        help="ship the aitax dashboard to Kibana",
        description="Kibana saved objects for the aitax-events-* indices: a data view, Lens charts of the "
        "paper's Fig. 6 and Fig. 7, latency tails, throughput and broker wait, and a dashboard of them all.",
    )
    actions = kibana.add_subparsers(dest="kibana_action", metavar="ACTION", required=True)
    importer = actions.add_parser(
        "import",
        help="import the dashboard and its data view (overwrites objects with the same ids)",
        description=f"POST the saved objects to Kibana's import API. Authenticates with ${API_KEY_ENV} "
        "(an Elastic API key, base64) when it is set.",
    )
    importer.add_argument("--url", required=True, help="Kibana base URL, e.g. http://kibana:5601")
    importer.add_argument("--space", help="Kibana space id (default: the default space)")
    importer.add_argument(
        "--file", type=Path, default=DEFAULT_NDJSON, help="saved objects NDJSON (default: the shipped dashboard)"
    )
    importer.set_defaults(func=_kibana_import)


def _kibana_import(args: argparse.Namespace) -> int:
    from telemetry.kibana import DASHBOARD_ID, import_saved_objects, kibana_base

    imported = import_saved_objects(args.url, args.file, space=args.space)
    print(
        f"imported {imported} saved objects; dashboard: "
        f"{kibana_base(args.url, args.space)}/app/dashboards#/view/{DASHBOARD_ID}"
    )
    return 0
