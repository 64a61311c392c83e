"""`aitax dashboard`: the live dashboard, a Dash app (Plotly's) that draws `reporting.live.DashboardView`.

Dash, because the view is built in Python from the same code as the report and the RunResult (no second
implementation in JavaScript), its charts are plotly.js (what the field's notebooks and reports use), and it serves
from one process: locally beside the stack, in the cluster as one pod. The browser never holds a credential of
Elasticsearch's or Kafka's: the server reads as the reader and the viewer logs in to the server alone.
"""

from __future__ import annotations

import base64
import hmac
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import plotly.graph_objects as go
from dash import Dash, Input, Output, dcc, html
from flask import Response, request

from aitax.common.errors import UserError
from aitax.reporting.live import DashboardView, Series
from aitax.reporting.live_sources import LiveSources

REFRESH_MS = 2000
REALM = "aitax dashboard"
# The panels, in the order a person reads them: where the time went, whether the pipeline kept up, the batcher,
# the brokers. Each is a dcc.Graph of this id.
GRAPHS = {
    "latency": "Latency by stage, per second (ms); end to end p50, p99",
    "throughput": "Offered against achieved (per second)",
    "batches": "Identify's batch sizes (the dynamic batcher)",
    "brokers-network": "Brokers: bytes in, replication in, bytes out (per second)",
    "brokers-busy": "Brokers: request handlers and network threads busy (share)",
}
BROKER_NETWORK = ("bytes_in", "replication_in", "bytes_out")
BROKER_BUSY = ("handler_busy", "network_busy")


@dataclass(frozen=True)
class ViewerLogin:
    """The one login the dashboard accepts (HTTP basic auth over TLS), from a basic-auth Secret's files."""

    username: str
    password: str = field(repr=False)

    @classmethod
    def from_folder(cls, folder: Path) -> ViewerLogin:
        return cls((folder / "username").read_text().strip(), (folder / "password").read_text().strip())

    def admits(self, header: str | None) -> bool:
        if not header or not header.startswith("Basic "):
            return False
        try:
            given = base64.b64decode(header[6:], validate=True).decode()
        except ValueError:
            return False
        expected = f"{self.username}:{self.password}"
        return hmac.compare_digest(given.encode(), expected.encode())


def _figure(series: list[Series], title: str, y_title: str, stacked: bool = False) -> go.Figure:
    figure = go.Figure()
    for s in series:
        line = s.name.startswith("end to end")
        figure.add_trace(go.Scatter(
            x=s.x_s, y=s.y, name=s.name, mode="lines",
            stackgroup="stages" if stacked and not line else None,
            line={"width": 2.5, "dash": "dot" if s.name.endswith("p99") else "solid"} if line else None))
    if not series:
        figure.add_annotation(text="no data yet", showarrow=False, font={"size": 16})
    figure.update_layout(title=title, xaxis_title="seconds since the run's first event", yaxis_title=y_title,
                         margin={"l": 60, "r": 20, "t": 50, "b": 40}, height=380,
                         legend={"orientation": "h", "y": -0.22, "font": {"size": 10}})
    return figure


def _batch_figure(view: DashboardView) -> go.Figure:
    figure = _figure(view.batch_sizes, GRAPHS["batches"], "faces per batch")
    if view.batch_histogram:
        sizes = sorted(view.batch_histogram)
        figure.add_trace(go.Bar(x=[str(s) for s in sizes], y=[view.batch_histogram[s] for s in sizes],
                                name="faces by batch size (the run's result)", xaxis="x2", yaxis="y2", opacity=0.6))
        figure.update_layout(xaxis2={"overlaying": "x", "side": "top", "type": "category", "title": "batch size"},
                             yaxis2={"overlaying": "y", "side": "right", "title": "faces"})
        figure.layout.annotations = ()
    return figure


TILE_STYLE = {"border": "1px solid #ccd", "borderRadius": "6px", "padding": "8px 12px", "minWidth": "130px"}
GRID_STYLE = {"display": "grid", "gridTemplateColumns": "repeat(auto-fit, minmax(560px, 1fr))", "gap": "8px"}


def _tiles(view: DashboardView) -> list:
    return [html.Div([html.Div(t.label, style={"fontSize": "12px", "color": "#556"}),
                      html.Div(t.text, className="tile-value", style={"fontSize": "24px", "fontWeight": "bold"}),
                      html.Div("run result" if t.source == "result" else "so far, from events",
                               style={"fontSize": "11px", "color": "#889"})],
                     className="tile", id=f"tile-{t.key}", style=TILE_STYLE,
                     **{"data-value": "" if t.value is None else repr(t.value)})
            for t in view.tiles]


def _cameras(view: DashboardView) -> html.Table:
    """A row per stream; a live camera's also say where its frames went, its outages and its rate."""
    head = html.Tr([html.Th(h) for h in ("stream", "frames detected", "faces identified", "frames/s", "received",
                                         "dropped", "reconnects", "longest gap s", "fps measured / declared",
                                         "connected")])

    def health(stream_id: str) -> list[html.Td]:
        camera = view.camera_health.get(stream_id)
        if camera is None:
            return [html.Td("-") for _ in range(6)]
        declared = f"{camera.declared_fps:g}" if camera.declared_fps else "?"
        return [html.Td(camera.received), html.Td(camera.dropped), html.Td(camera.reconnects),
                html.Td(f"{camera.longest_gap_s:.1f}"), html.Td(f"{camera.measured_fps:.1f} / {declared}"),
                html.Td("yes" if camera.connected else "no")]

    rows = [html.Tr([html.Td(c.stream_id), html.Td(c.frames), html.Td(c.faces),
                     html.Td("-" if c.frames_per_s is None else f"{c.frames_per_s:.1f}"), *health(c.stream_id)])
            for c in view.cameras]
    return html.Table([head, *rows], id="cameras-table")


def _verdict(view: DashboardView) -> list:
    if not view.verdict:
        return [html.P("the verdict comes when the run ends (its RunResult)")]
    held = all(c.held for c in view.verdict)
    items = [html.Li(f"[{'held' if c.held else 'FAILED'}] {c.name}: {c.measured} (required: {c.required})",
                     className="held" if c.held else "failed") for c in view.verdict]
    saturated = [html.P(f"saturated: {view.saturated}", id="saturated")] if view.saturated else []
    return [html.H3("stable" if held else "not stable", id="verdict-word"), html.Ul(items), *saturated]


def make_app(sources: LiveSources, login: ViewerLogin | None) -> Dash:
    app = Dash(__name__, title="aitax dashboard", update_title=None, serve_locally=True)
    server = app.server

    @server.before_request
    def authenticate():  # every route, Dash's own included
        if login is not None and not login.admits(request.headers.get("Authorization")):
            return Response("login required", 401, {"WWW-Authenticate": f'Basic realm="{REALM}"'})
        return None

    @server.route("/api/view")
    def view_json():  # the same view as JSON, for scripts and tests (the verdict's conditions are pydantic's)
        text = json.dumps(asdict(sources.view()), default=lambda model: model.model_dump())
        return Response(text, mimetype="application/json")

    app.layout = html.Div([
        html.H2(id="heading"),
        html.Div(id="tiles", style={"display": "flex", "flexWrap": "wrap", "gap": "8px"}),
        html.Div([dcc.Graph(id=key, config={"displaylogo": False}) for key in GRAPHS], style=GRID_STYLE),
        html.Div([html.Div([html.H3("Cameras (streams)"), html.Div(id="cameras")]),
                  html.Div([html.H3("Verdict"), html.Div(id="verdict")])], style=GRID_STYLE),
        html.Div(id="notes", style={"color": "#a33"}),
        dcc.Interval(id="tick", interval=REFRESH_MS),
    ], style={"fontFamily": "sans-serif", "maxWidth": "1600px", "margin": "auto", "padding": "0 12px"})

    @app.callback(
        [Output("heading", "children"), Output("tiles", "children"), *[Output(k, "figure") for k in GRAPHS],
         Output("cameras", "children"), Output("verdict", "children"), Output("notes", "children")],
        Input("tick", "n_intervals"))
    def refresh(_: int | None):
        view = sources.view()
        return (f"aitax · {view.run_id or 'no run yet'} · {view.state}",
                _tiles(view),
                _figure(view.latency, GRAPHS["latency"], "ms", stacked=True),
                _figure(view.throughput, GRAPHS["throughput"], "per second"),
                _batch_figure(view),
                _figure([s for k in BROKER_NETWORK for s in _named(view, k)], GRAPHS["brokers-network"], "bytes/s"),
                _figure([s for k in BROKER_BUSY for s in _named(view, k)], GRAPHS["brokers-busy"], "share"),
                _cameras(view), _verdict(view), [html.P(n) for n in view.notes])

    return app


def _named(view: DashboardView, key: str) -> list[Series]:
    return [Series(f"{s.name} {key.replace('_', ' ')}", s.x_s, s.y) for s in view.brokers.get(key, [])]


class DashboardServer:
    """The app on a threaded WSGI server, https when given a certificate."""

    def __init__(self, app: Dash, host: str, port: int, tls: tuple[Path, Path] | None) -> None:
        from werkzeug.serving import make_server

        try:
            self._server = make_server(host, port, app.server, threaded=True)
        except OSError as error:
            raise UserError(f"dashboard: cannot listen on {host}:{port} ({error.strerror})") from None
        if tls is not None:
            import ssl

            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            try:
                context.load_cert_chain(str(tls[0]), str(tls[1]))
            except (OSError, ssl.SSLError) as error:
                raise UserError(f"dashboard: certificate {tls[0]} or key {tls[1]} unusable ({error})") from None
            # The handshake on each request's own thread, not in accept(): a client that connects and says nothing
            # must not stall the server for everyone.
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True,
                                                      do_handshake_on_connect=False)
            self._server.ssl_context = context  # werkzeug's request handler reads it for the URL scheme
        self.url = f"{'https' if tls else 'http'}://{host}:{self._server.server_port}/"

    def serve_forever(self) -> None:
        self._server.serve_forever()
