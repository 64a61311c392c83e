"""Telemetry commands: the AI-tax report, the live dashboard, the Kibana saved-objects import, the event spools'
replay, and the meter of a broker's drives."""

from __future__ import annotations

import contextlib
from pathlib import Path

import click

from aitax.commands.options import group
from aitax.commands.report import report
from aitax.common.errors import UserError
from aitax.reporting.kibana import API_KEY_ENV, DEFAULT_GRAFANA, DEFAULT_NDJSON


def register(root: click.Group) -> None:
    for command in (report, dashboard, grafana, kibana, events, disk_meter):
        root.add_command(command)


@click.command(short_help="a live dashboard of a run, served over https while it runs (and after)",
               help="Serves the latency breakdown over time, offered against achieved throughput, the batcher's batch "
                    "sizes, the brokers' network and saturation, per-camera health and the verdict, refreshed every "
                    "2 s from the run's events (Elasticsearch, as the reader), Prometheus and, once the run ends, its "
                    "RunResult. On the local stack it serves https with the stack's CA and asks for the `viewer` "
                    "login in .aitax/stack/pki/dashboard/. GET /api/view gives the same view as JSON.")
@click.option("--run-id", help="the run to show (default: follow the newest run)")
@click.option("--events", envvar="AITAX_ELASTICSEARCH_URL",
              help="Elasticsearch URL or JSONL folder (default: the local stack's Elasticsearch)")
@click.option("--prometheus", help="Prometheus URL (default: the local stack's; 'none' for no metrics panels)")
@click.option("--runs", "runs_dirs", multiple=True, type=click.Path(file_okay=False, path_type=Path),
              help="folder of run folders holding result.json (repeatable; default .aitax/runs and .aitax/demo/runs)")
@click.option("--host", default="127.0.0.1", show_default=True, help="address to listen on")
@click.option("--port", type=int, help="port (default: the local stack's port base + 80)")
@click.option("--tls-dir", type=click.Path(file_okay=False, path_type=Path), envvar="AITAX_DASHBOARD_TLS",
              help="folder with tls.crt, tls.key, username and password (default: the local stack's "
                   "pki/dashboard); 'none' serves plain http with no login, for a trusted loopback only")
def dashboard(run_id: str | None, events: str | None, prometheus: str | None, runs_dirs: tuple[Path, ...],
              host: str, port: int | None, tls_dir: Path | None) -> int:
    from aitax.common import children
    from aitax.common.paths import aitax_home
    from aitax.reporting.dashboard import DashboardServer, ViewerLogin, make_app
    from aitax.reporting.live_sources import LiveSources
    from aitax.stack.config import StackConfig
    from aitax.stack.stack import current_config

    config = current_config()
    if events is None:
        from aitax.stack.stack import local_elasticsearch_url

        events = local_elasticsearch_url("--events")
    if prometheus is None and config is not None and config.prometheus:
        prometheus = config.prometheus_url
    if tls_dir is None:
        if config is None:
            raise UserError("--tls-dir: no local stack to take the dashboard's certificate and login from; give a "
                            "folder with tls.crt, tls.key, username and password, or 'none' for plain http")
        from aitax.stack import security

        tls_dir = security.identity(security.DASHBOARD)
        if not tls_dir.is_dir():  # a stack started before the dashboard existed: its identity is made now, once
            security.issue_identities()
    serve_tls = tls_dir is not None and str(tls_dir) != "none"
    if serve_tls:
        missing = [name for name in ("tls.crt", "tls.key", "username", "password") if not (tls_dir / name).is_file()]
        if missing:
            raise UserError(f"--tls-dir {tls_dir}: no {', '.join(missing)}")
    sources = LiveSources(events, None if prometheus == "none" else prometheus,
                          list(runs_dirs) or [aitax_home() / "runs", aitax_home() / "demo" / "runs"], run_id)
    login = ViewerLogin.from_folder(tls_dir) if serve_tls else None
    server = DashboardServer(make_app(sources, login), host, port or (config or StackConfig()).dashboard_port,
                             (tls_dir / "tls.crt", tls_dir / "tls.key") if serve_tls else None)
    print(f"dashboard: {server.url}" + (f" (login {login.username}, password in {tls_dir / 'password'})"
                                        if login else ""), flush=True)
    children.report(children.READY, url=server.url)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    return 0


def dashboard_alongside(run_id: str, runs_dir: Path, logs: Path):
    """`aitax dashboard` on the run as a child process (its own principal: the reader), once it serves; None when
    the local stack has no Elasticsearch to read or the dashboard could not start (said in one line)."""
    from aitax.common import children
    from aitax.stack.stack import current_config

    config = current_config()
    if config is None or not config.elasticsearch:
        return None
    child = children.spawn("dashboard", ["dashboard", "--run-id", run_id, "--runs", str(runs_dir)], logs)
    try:
        children.wait_reported([child], children.READY, 60, "the dashboard")
    except UserError as error:  # the run goes on without it
        children.stop([child], 5)
        print(f"no live dashboard: {error}")
        return None
    return child


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
    from aitax.reporting.kibana import DASHBOARD_ID, import_saved_objects, kibana_base

    imported = import_saved_objects(url, ndjson, space=space)
    dashboard = f"{kibana_base(url, space)}/app/dashboards#/view/{DASHBOARD_ID}"
    print(f"imported {imported} saved objects; dashboard: {dashboard}")
    return 0


def _check_command(owner: str, default: Path, short_help: str, help: str) -> click.Command:
    """`aitax OWNER check`: a dashboard file against its owner's definitions; every departure printed, exit 1."""

    @click.command("check", short_help=short_help, help=help + " Prints every departure, naming the field; exit 1 "
                                                               "if any.")
    @click.option("--file", "path", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=default,
                  show_default=True, help="the file to check")
    def check(path: Path) -> int:
        from aitax.reporting.dashboard_schemas import check_file

        errors, passed = check_file(path, owner)
        for error in errors:
            print(f"{path}: {error}")
        print(f"{path}: {len(errors)} error(s)" if errors else f"{path}: {passed}")
        return 1 if errors else 0

    return check


kibana.add_command(_check_command(
    "kibana", DEFAULT_NDJSON, "check saved objects against what Kibana 8.19's import enforces",
    "Each object's shape, attributes, migration versions, references and dashboard panels against the rules Kibana "
    "8.19's saved-objects import applies (aitax/reporting/dashboard_schemas.py names the Kibana source of each)."))
grafana = group("grafana", "the Grafana dashboard file")
grafana.add_command(_check_command(
    "grafana", DEFAULT_GRAFANA, "check a dashboard against Grafana's published schema",
    "The dashboard against Grafana's Dashboard kind and each panel's options against its plugin's published types "
    "(npm @grafana/schema, as JSON Schema made by `make setup-schemas`)."))


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

    from aitax.common.daemons import poll_until
    from aitax.telemetry.elastic import install_event_template
    from aitax.telemetry.elastic_access import CREDENTIALS_ENV, http_options, redacted, usable_url

    es = usable_url(es)

    def answers() -> bool:
        try:
            return requests.get(es, timeout=5, **http_options()).status_code < 500
        except requests.RequestException:
            return False

    if wait_s and not poll_until(answers, wait_s, 5):
        raise UserError(f"Elasticsearch at {redacted(es)}: no answer within {wait_s:.0f} s")
    if not install_event_template(es):
        raise UserError(f"Elasticsearch at {redacted(es)} refused the index template to this identity "
                        f"(${CREDENTIALS_ENV}): installing it takes the admin's")
    print(f"event index template installed at {redacted(es)}")
    return 0


@events.command(short_help="index every spool left by processes that ended during an outage")
@click.option("--es", help="Elasticsearch URL (default: the local stack's)")
@click.option("--spool-dir", type=click.Path(file_okay=False, path_type=Path),
              help="spool folder (default $AITAX_HOME/spool)")
def replay(es: str | None, spool_dir: Path | None) -> int:
    """Index every spool left by processes that ended during an outage."""
    from aitax.common.paths import aitax_home
    from aitax.stack.stack import local_elasticsearch_url
    from aitax.telemetry.elastic import replay_spools

    url = es or local_elasticsearch_url()
    spool_dir = spool_dir or aitax_home() / "spool"
    print(f"replayed {replay_spools(url, spool_dir)} event(s) from {spool_dir}")
    return 0


@click.command("disk-meter",
               short_help="serve the block-layer counters of the devices under log dirs (beside brokers)")
@click.option("--log-dir", "log_dirs", multiple=True, required=True,
              type=click.Path(file_okay=False, path_type=Path), help="a broker log dir (repeat for each)")
@click.option("--node", envvar="NODE_NAME", default="local", show_default=True,
              help="the node's name, a label on every series (in a pod: from the downward API)")
@click.option("--port", type=int, default=9405, show_default=True, help="port to serve /metrics on (0: any free one)")
@click.option("--host", default="0.0.0.0", show_default=True, help="address to listen on")
@click.option("--calibrate/--no-calibrate", default=False, show_default=True,
              help="first measure each device's sequential write (3 s of O_DIRECT writes into its log dir; needs "
                   "the dir writable), served as its capacity")
def disk_meter(log_dirs: tuple[Path, ...], node: str, port: int, host: str, calibrate: bool) -> int:
    """Serve, for Prometheus, the block-layer counters of each device under the log dirs: bytes, I/Os and busy
    time, read from /sys at each scrape (no privilege needed). A cluster's experiment phases read their brokers'
    storage from these, per node. A dir on no block device (tmpfs) is named once and left out."""
    import signal
    import sys
    import threading

    from aitax.stack.calibration import measure_write
    from aitax.telemetry.disk_meter import DiskCollector, devices_under, serve

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # PID 1 in a container ignores SIGTERM otherwise
    devices, unmetered = devices_under(log_dirs)
    for directory in unmetered:  # the broker beside it must not wait on its meter: say so, serve the rest
        print(f"{directory}: on no block device (tmpfs or overlay): its storage is not metered", file=sys.stderr)
    capacity = {}
    for device, dirs in devices.items() if calibrate else ():
        try:
            capacity[device.name] = measure_write(Path(dirs[0]))
        except UserError as error:  # a filesystem without O_DIRECT, a read-only mount: read, only no share
            print(f"not calibrated: {error}", file=sys.stderr)
    port = serve(DiskCollector(node, devices, capacity), port, host)
    for device, dirs in devices.items():
        print(f"metering {device.name} ({device.number}) under {', '.join(dirs)} on :{port}", flush=True)
    threading.Event().wait()
    return 0
