"""The live dashboard and the HTML report as a person sees them: headless Chromium (Debian's) on a real run of the
real pipeline on the local stack, during the run and after it. Every panel must draw data, the console must stay
clean, and the numbers shown must be the RunResult's (the report's: its JSON's)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
import requests

from aitax.common import children
from aitax.reporting.dashboard import GRAPHS, ViewerLogin
from aitax.reporting.live import BATCH_SERIES
from aitax.reporting.report import Report
from aitax.reporting.report_render import latency_rows
from aitax.runs.results import RunResult, read_results
from aitax.stack import security
from aitax.stack.config import StackConfig
from aitax.telemetry.latency import batch_size_p50, broker_wait_ms
from tests.browser import chromium
from tests.integration.conftest import AITAX

pytestmark = pytest.mark.integration
# Each Plotly graph's traces and how many points each holds.
PANEL_POINTS = """Object.fromEntries(Array.from(document.querySelectorAll('.js-plotly-plot')).map(
    g => [g.parentElement.id || g.id, (g.data || []).map(t => (t.y || []).length)]))"""
TILES = """Object.fromEntries(Array.from(document.querySelectorAll('.tile')).map(
    t => [t.id, {value: t.dataset.value, text: t.querySelector('.tile-value').innerText}]))"""


def _drawn(points: dict[str, list[int]]) -> set[str]:
    return {panel for panel, traces in points.items() if any(traces)}


def _screenshot(page, name: str, tmp_path: Path) -> None:
    folder = Path(os.environ.get("AITAX_SCREENSHOTS", tmp_path))
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / name), full_page=True)


def test_the_dashboard_shows_a_real_run_live_and_then_its_result_and_so_does_the_report(
        stack: StackConfig, gallery: Path, video: Path, tmp_path: Path, unique_name: str) -> None:
    runs = tmp_path / "runs"
    dashboard = children.spawn("dashboard", ["dashboard", "--run-id", unique_name, "--runs", str(runs), "--port", "0"],
                               tmp_path / "logs")
    run = None
    try:
        children.wait_reported([dashboard], children.READY, 60, "the dashboard")
        url = dashboard.statuses(children.READY)[0]["url"]
        folder = security.identity(security.DASHBOARD)
        login = ViewerLogin.from_folder(folder)
        ca = str(folder / "ca.crt")
        # https with the stack's CA, and only the viewer's login gets in (Dash's own routes included).
        assert url.startswith("https://")
        assert requests.get(url, verify=ca, timeout=10).status_code == 401
        assert requests.get(f"{url}_dash-layout", auth=(login.username, "wrong"), verify=ca, timeout=10).status_code \
            == 401
        assert requests.get(f"{url}api/view", auth=(login.username, login.password), verify=ca, timeout=10).ok

        run = subprocess.Popen([*AITAX, "run", "--video", str(video), "--gallery", str(gallery), "--producers", "1",
                                "--consumers", "2", "--duration", "25", "--run-id", unique_name, "--events-dir",
                                str(runs / unique_name)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        with chromium((login.username, login.password)) as browser:
            page = browser.page
            page.goto(url)
            live = {"latency", "throughput", "brokers-network", "brokers-busy"}
            drawn: set[str] = set()
            while run.poll() is None and not live <= drawn:
                time.sleep(1)
                drawn = _drawn(page.evaluate(PANEL_POINTS))
            assert live <= drawn and run.poll() is None, f"while the run went on, only {drawn} drew data"
            assert "running" in page.inner_text("#heading")
            assert page.inner_text("#tile-identified .tile-value") != "0"
            _screenshot(page, "dashboard-live.png", tmp_path)

            output, _ = run.communicate(timeout=900)
            assert run.returncode == 0, output[-3000:]
            result = read_results(runs / unique_name / "result.json", RunResult)
            page.wait_for_function("document.querySelector('#heading').innerText.includes('ended')", timeout=30_000)
            page.wait_for_timeout(2500)  # one more refresh: the series up to the run's end
            points = page.evaluate(PANEL_POINTS)
            assert _drawn(points) == set(GRAPHS), points
            tiles = page.evaluate(TILES)
            latency = result.latency
            assert latency is not None
            expected = {"tile-identified": (result.identified_faces, f"{result.identified_faces}"),
                        "tile-achieved": (result.achieved_faces_per_s, f"{result.achieved_faces_per_s:.1f}"),
                        "tile-p50": (latency.p50_ms, f"{latency.p50_ms:.1f} ms"),
                        "tile-p99": (latency.p99_ms, f"{latency.p99_ms:.1f} ms"),
                        "tile-broker_wait": (broker_wait_ms(latency.breakdown_ms),
                                             f"{broker_wait_ms(latency.breakdown_ms):.1f} ms"),
                        "tile-batch_p50": (batch_size_p50(latency.batch_sizes),
                                           f"{batch_size_p50(latency.batch_sizes):.0f}")}
            for tile, (value, text) in expected.items():
                assert float(tiles[tile]["value"]) == pytest.approx(value, rel=1e-9), tile
                assert tiles[tile]["text"] == text, tile
            verdict = page.inner_text("#verdict")
            assert ("stable" if result.stable else "not stable") in verdict
            for condition in result.verdict.conditions:
                assert f"[{'held' if condition.held else 'FAILED'}] {condition.name}: {condition.measured}" in verdict
            assert result.resources is not None and result.resources.saturated
            assert result.resources.saturated in page.inner_text("#saturated")
            assert "cam-1" in page.inner_text("#cameras-table")
            # the batcher's own series from Prometheus, not only the result's histogram
            batch_points = page.evaluate("document.querySelector('#batches .js-plotly-plot').data"
                                         f".filter(t => t.name === {BATCH_SERIES!r}).map(t => t.y.length)")
            assert batch_points and batch_points[0] > 0
            assert browser.console_errors == []
            _screenshot(page, "dashboard.png", tmp_path)
        _check_the_report(unique_name, runs / unique_name, tmp_path)
    finally:
        if run is not None and run.poll() is None:
            run.kill()
        children.stop([dashboard], 5)


def _check_the_report(run_id: str, events: Path, tmp_path: Path) -> None:
    """The run's HTML report in Chromium: every figure loaded, the Fig. 6 table's numbers those of its JSON."""
    html, data = tmp_path / "report.html", tmp_path / "report.json"
    made = subprocess.run([*AITAX, "report", "--run", run_id, "--events", str(events), "--html", str(html),
                           "--json", str(data)], capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr[-2000:]
    report = Report.from_json(data.read_text())
    with chromium() as browser:
        page = browser.page
        page.goto(html.as_uri())
        images = page.evaluate("Array.from(document.images).map(i => [i.alt, i.complete && i.naturalWidth > 0])")
        assert len(images) >= 4 and all(loaded for _, loaded in images), images
        shown = page.evaluate("Array.from(document.querySelectorAll('tbody tr')).map("
                              "r => Array.from(r.cells).map(c => c.innerText))")
        assert [tuple(row) for row in shown] == latency_rows(report)
        assert browser.console_errors == []
        _screenshot(page, "report.png", tmp_path)
