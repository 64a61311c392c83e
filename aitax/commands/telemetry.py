"""Telemetry commands: the AI-tax report, the Kibana saved-objects import, and the event spools' replay."""

from __future__ import annotations

from pathlib import Path

import click

from aitax.commands.options import group
from aitax.commands.report import report
from common.errors import UserError
from telemetry.kibana import API_KEY_ENV, DEFAULT_NDJSON


def register(root: click.Group) -> None:
    for command in (report, kibana, events):
        root.add_command(command)


kibana = group("kibana", "ship the aitax dashboard to Kibana",
               "Kibana saved objects for the aitax-events-* indices: a data view, Lens charts of the paper's Fig. 6 "
               "and Fig. 7, latency tails, throughput and broker wait, and a dashboard of them all.")


@kibana.command("import", short_help="import the dashboard and its data view (overwrites objects with the same ids)",
                help=f"POST the saved objects to Kibana's import API. Authenticates with ${API_KEY_ENV} (an "
                     "Elastic API key, base64) when it is set.")
@click.option("--url", required=True, help="Kibana base URL, e.g. http://kibana:5601")
@click.option("--space", help="Kibana space id (default: the default space)")
@click.option("--file", "ndjson", type=click.Path(dir_okay=False, path_type=Path), default=DEFAULT_NDJSON,
              help="saved objects NDJSON (default: the shipped dashboard)")
def kibana_import(url: str, space: str | None, ndjson: Path) -> int:
    from telemetry.kibana import DASHBOARD_ID, import_saved_objects, kibana_base

    imported = import_saved_objects(url, ndjson, space=space)
    dashboard = f"{kibana_base(url, space)}/app/dashboards#/view/{DASHBOARD_ID}"
    print(f"imported {imported} saved objects; dashboard: {dashboard}")
    return 0


events = group("events", "the event indices' template; spools ended processes left behind")


@events.command(short_help="install the aitax-events index template (the chart's topics Job runs it, as the admin)",
                help="Install the `aitax-events-*` index template and extend older indices' mappings, as "
                     "$AITAX_ELASTICSEARCH_CREDENTIALS: on a secured Elasticsearch only the admin may (a stage's "
                     "writer may not change templates). Idempotent.")
@click.option("--es", required=True, envvar="AITAX_ELASTICSEARCH_URL", help="Elasticsearch URL")
@click.option("--wait", "wait_s", type=float, default=0.0, show_default=True,
              help="seconds to wait for Elasticsearch to answer (a release's node may be starting)")
def template(es: str, wait_s: float) -> int:
    import requests

    from common.daemons import poll_until
    from telemetry.elastic import install_event_template
    from telemetry.elastic_access import CREDENTIALS_ENV, http_options

    def answers() -> bool:
        try:
            return requests.get(es, timeout=5, **http_options()).status_code < 500
        except requests.RequestException:
            return False

    if wait_s and not poll_until(answers, wait_s, 5):
        raise UserError(f"Elasticsearch at {es}: no answer within {wait_s:.0f} s")
    if not install_event_template(es):
        raise UserError(f"Elasticsearch at {es} refused the index template to this identity (${CREDENTIALS_ENV}): "
                        "installing it takes the admin's")
    print(f"event index template installed at {es}")
    return 0


@events.command(short_help="index every spool left by processes that ended during an outage")
@click.option("--es", help="Elasticsearch URL (default: the local stack's)")
@click.option("--spool-dir", type=click.Path(file_okay=False, path_type=Path),
              help="spool folder (default $AITAX_HOME/spool)")
def replay(es: str | None, spool_dir: Path | None) -> int:
    """Index every spool left by processes that ended during an outage."""
    from common.paths import aitax_home
    from stack.stack import local_elasticsearch_url
    from telemetry.elastic import replay_spools

    url = es or local_elasticsearch_url()
    spool_dir = spool_dir or aitax_home() / "spool"
    print(f"replayed {replay_spools(url, spool_dir)} event(s) from {spool_dir}")
    return 0
