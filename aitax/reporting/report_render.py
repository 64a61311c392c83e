"""A report for people: a terminal table, the paper's Fig. 6-9 as PNGs, and one self-contained HTML page."""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path

from aitax.reporting.report import AI_SPEEDUPS, BREAKDOWN_STAGES, Report
from aitax.telemetry.camera_health import CameraHealth
from aitax.telemetry.events import AI_SUBSTEPS
from aitax.telemetry.latency import BROKER_WAIT

FIGURES = ("fig6", "fig7", "fig8", "fig9")
FIGURE_TITLES = {
    "fig6": "Fig. 6: mean end-to-end latency by stage",
    "fig7": "Fig. 7: latency and faces in the system over time",
    "fig8": "Fig. 8: CPU time by sub-step, per process kind",
    "fig9": "Fig. 9: projected speed-up of each process (Amdahl)",
}
TABLE_HEADER = ("stage", "mean ms", "p50 ms", "p99 ms", "share", "tail ms", "tail share", "paper mean", "paper p99")


def _number(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def latency_rows(report: Report) -> list[tuple[str, ...]]:
    """Fig. 6 as rows of TABLE_HEADER: the stages, then end to end."""
    latency, paper = report.latency, report.paper
    if latency is None:
        return []
    rows = []
    # The parts of the broker wait by owner, then the whole, beside the paper's (it has only the whole).
    after_parts = [s.stage for s in latency.stages].index(BROKER_WAIT[-1]) + 1
    for stage in (*latency.stages[:after_parts], latency.broker_wait, *latency.stages[after_parts:]):
        standalone = stage.standalone
        rows.append((stage.stage, _number(stage.mean_ms), _number(standalone and standalone.p50_ms),
                     _number(standalone and standalone.p99_ms), _percent(stage.share), _number(stage.tail_mean_ms),
                     _percent(stage.tail_share), _number(paper.mean_ms.get(stage.stage)),
                     _number(paper.p99_ms.get(stage.stage))))
    e2e = latency.e2e
    rows.append(("end to end", _number(e2e.mean_ms), _number(e2e.p50_ms), _number(e2e.p99_ms), _percent(1.0),
                 _number(latency.tail_e2e_mean_ms), _percent(1.0), _number(paper.mean_ms["e2e"]),
                 _number(paper.p99_ms["e2e"])))
    return rows


def summary_lines(report: Report) -> list[str]:
    """Everything beside the latency table, one finding a line."""
    lines = []
    if report.latency is not None:
        lines.append(f"mean, share and tail over the {report.latency.faces} faces that reached identification "
                     f"(the stage means add up to the e2e mean only over them); tail = the {report.latency.tail_faces} "
                     f"face(s) with e2e >= p99 {_number(report.latency.e2e.p99_ms)} ms; a stage's p50/p99 are "
                     "standalone, over all its events (frames up to detect, faces after)")
    if report.broker is not None:
        broker = report.broker
        parts = ", ".join(f"{part} {_number(ms)} ms" for part, ms in broker.parts_ms.items())
        lines.append(f"broker wait by owner over {broker.faces} faces: {parts}; {broker.dominant} dominates "
                     f"({_number(sum(broker.parts_ms.values()))} ms in all, paper "
                     f"{_number(report.paper.mean_ms['broker_wait'])} ms); {broker.clock}")
    load = report.load
    lines.append(f"Fig. 7: {len(load.buckets)} buckets of {load.bucket_s:g} s; correlation of latency with faces "
                 f"in the system {_number(load.correlation, 2)}")
    for process in report.cpu.processes:
        steps = ", ".join(f"{name} {_percent(share)}" for name, share in process.share.items() if share)
        paper = report.paper.ai_share.get(process.kind)
        lines.append(f"Fig. 8 {process.kind}: AI {_percent(process.ai_share)}"
                     f"{f' (paper {_percent(paper)})' if paper is not None else ''}; {steps}")
    lines.append(f"Fig. 8 application: AI {_percent(report.cpu.application_ai_share)} "
                 f"(paper {_percent(report.paper.ai_share['application'])}); "
                 f"{report.cpu.events_without_substeps} events without sub-steps")
    for projection in report.amdahl:
        points = ", ".join(f"{factor}x: {speedup:.2f}x"
                           for factor, speedup in zip(projection.factors, projection.speedups, strict=True))
        paper = report.paper.amdahl_asymptote.get(projection.kind)
        lines.append(f"Fig. 9 {projection.kind}: {points}; asymptote {_number(projection.asymptote, 2)}x"
                     f"{f' (paper {paper:.2f}x)' if paper is not None else ''}")
    flow = report.throughput
    for stream in [*flow.streams, flow.total]:
        lines.append(f"throughput {stream.stream_id}: {stream.frames} frames, {stream.faces} faces in "
                     f"{flow.span_s:.2f} s: {_number(stream.frames_per_s, 2)} frames/s, "
                     f"{_number(stream.faces_per_s, 2)} faces/s")
    for camera in report.cameras:
        lines.append(camera_line(camera.stream_id, camera.health))
    lines.append(f"events {report.events}; faces detected {report.faces_detected}, identified "
                 f"{report.faces_identified} ({report.thumbnails_identified} from their thumbnail, the rest from "
                 f"their track; {report.faces_unmatched} without their frame's events); "
                 f"{report.duplicate_events} duplicate, {report.ignored_events} ignored events, "
                 f"{report.malformed_lines} malformed lines")
    return lines


def camera_line(stream_id: str, health: CameraHealth) -> str:
    """A live camera's health in one line: where its frames went, its outages, its rate against what it declares."""
    queued = health.received - health.undecodable - health.dropped - health.detected
    declared = f"{health.declared_fps:g}" if health.declared_fps else "unknown"
    slow = " (slower than declared)" if health.slower_than_declared else ""
    return (f"camera {stream_id}: {health.received} frames received, {health.undecodable} undecodable, "
            f"{health.dropped} dropped (detection behind), {health.detected} detected, {queued} queued; "
            f"{health.reconnects} reconnects ({health.failed_connects} failed attempts), longest gap "
            f"{health.longest_gap_s:.1f} s, {health.gaps_s:.1f} s lost to outages; {health.measured_fps:.1f} fps "
            f"against {declared} declared{slow}; capture times from the {health.capture_clock} clock"
            f"{'' if health.connected else '; not connected at the end'}")


def format_text(report: Report) -> str:
    """The terminal report: the Fig. 6 table with the paper's numbers, then one line per other finding."""
    title = (f"AI tax of run {report.run_id} (acceleration {', '.join(f'{a:g}x' for a in report.acceleration_factors)}"
             f"; {', '.join(report.kafka_clients) or 'no Kafka client named'})")
    rows = [TABLE_HEADER, *latency_rows(report)]
    widths = [max(len(row[column]) for row in rows) for column in range(len(TABLE_HEADER))]
    table = ["  ".join(cell.ljust(width) if column == 0 else cell.rjust(width)
                       for column, (cell, width) in enumerate(zip(row, widths, strict=True))) for row in rows]
    if report.latency is None:
        table.append("no face reached identification with its frame's events: no latency breakdown")
    return "\n".join([title, *table, *summary_lines(report)])


# -- figures -----------------------------------------------------------------------------------------------------

def render_figures(report: Report) -> dict[str, bytes]:
    """Fig. 6-9 as PNG bytes, by name in FIGURES."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    drawings = {"fig6": _draw_fig6, "fig7": _draw_fig7, "fig8": _draw_fig8, "fig9": _draw_fig9}
    pngs = {}
    for name in FIGURES:
        figure = Figure(figsize=(7, 4.5), layout="constrained")
        FigureCanvasAgg(figure)  # Agg: no display needed
        drawings[name](figure, report)
        figure.suptitle(FIGURE_TITLES[name])
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=100)
        pngs[name] = buffer.getvalue()
    return pngs


def _draw_fig6(figure, report: Report) -> None:
    axes = figure.add_subplot()
    measured = {s.stage: s.mean_ms for s in report.latency.stages} if report.latency else {}
    bars = {f"run {report.run_id}": measured, "paper (Sec. 4.2)": report.paper.mean_ms}
    # The paper's broker wait is one number: its bar shows it whole, where the run's shows the parts by owner.
    detect = BREAKDOWN_STAGES.index("detect") + 1
    stages = (*BREAKDOWN_STAGES[:detect], "broker_wait", *BREAKDOWN_STAGES[detect:])
    from matplotlib import colormaps

    colors = colormaps["tab20"]  # one color a stage: there are more stages than the default cycle's ten
    for index, stage in enumerate(stages):
        bottoms = [sum(bar.get(s, 0.0) for s in stages[:stages.index(stage)]) for bar in bars.values()]
        axes.bar(list(bars), [bar.get(stage, 0.0) for bar in bars.values()], bottom=bottoms, label=stage, width=0.5,
                 color=colors(index))
    axes.set_ylabel("mean latency per face (ms)")
    axes.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")


def _draw_fig7(figure, report: Report) -> None:
    load = report.load
    middles = [b.start_s + load.bucket_s / 2 for b in load.buckets]
    latency_axes = figure.add_subplot()
    latency_axes.plot(middles, [float("nan") if b.mean_e2e_ms is None else b.mean_e2e_ms for b in load.buckets],
                      marker="o", color="tab:blue")
    latency_axes.set_xlabel(f"time since the run's first event (s, buckets of {load.bucket_s:g} s)")
    latency_axes.set_ylabel("mean e2e latency of faces identified (ms)", color="tab:blue")
    faces_axes = latency_axes.twinx()
    faces_axes.plot(middles, [b.faces_in_system for b in load.buckets], marker="s", color="tab:orange")
    faces_axes.set_ylabel("faces in the system (time average)", color="tab:orange")
    latency_axes.set_ylim(bottom=0)
    faces_axes.set_ylim(bottom=0)
    latency_axes.set_title(f"correlation {_number(load.correlation, 2)}", fontsize="small")


def _draw_fig8(figure, report: Report) -> None:
    from matplotlib import colormaps
    from matplotlib.patches import Patch

    axes = figure.add_subplot()
    processes = report.cpu.processes
    names = list(dict.fromkeys(name for p in processes for name in p.share))
    palette = colormaps["tab20"].colors
    colors = {name: palette[i % len(palette)] for i, name in enumerate(names)}
    ai_names = {name for steps in AI_SUBSTEPS.values() for name in steps}
    for process in processes:
        bottom = 0.0
        for name, share in process.share.items():
            axes.bar(process.kind, 100 * share, bottom=bottom, color=colors[name], width=0.5,
                     hatch="//" if name in AI_SUBSTEPS.get(process.kind, ()) else None)
            bottom += 100 * share
        axes.annotate(f"AI {_percent(process.ai_share)}", (process.kind, 101), ha="center", fontsize="small")
    if names:  # one legend entry per sub-step name, whichever processes have it
        handles = [Patch(facecolor=colors[name], hatch="//" if name in ai_names else None,
                         label=f"{name} (AI)" if name in ai_names else name) for name in names]
        axes.legend(handles=handles, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize="small")
    axes.set_ylim(0, 110)
    axes.set_ylabel("share of the process's CPU time (%)")


def _draw_fig9(figure, report: Report) -> None:
    axes = figure.add_subplot()
    for index, projection in enumerate(report.amdahl):
        color = f"C{index}"
        axes.plot(projection.factors, projection.speedups, marker="o", color=color,
                  label=f"{projection.kind} (AI {_percent(projection.ai_share)}, "
                  f"asymptote {_number(projection.asymptote, 2)}x)")
    for kind, asymptote in report.paper.amdahl_asymptote.items():
        axes.axhline(asymptote, linestyle="--", color="grey")
        axes.annotate(f"paper {kind} asymptote {asymptote:g}x", (AI_SPEEDUPS[-1], asymptote), ha="right",
                      va="bottom", fontsize="small", color="grey")
    axes.set_xscale("log", base=2)
    axes.set_xticks(AI_SPEEDUPS, [f"{factor}x" for factor in AI_SPEEDUPS])
    highest = max([*report.paper.amdahl_asymptote.values(), *(max(p.speedups) for p in report.amdahl)])
    axes.set_ylim(0, 1.3 * highest)  # room for the legend above the curves
    axes.set_xlabel("AI speed-up")
    axes.set_ylabel("overall speed-up of the process")
    if report.amdahl:
        axes.legend(loc="upper left", fontsize="small")


def write_plots(figures: dict[str, bytes], folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, png in figures.items():
        path = folder / f"{name}.png"
        path.write_bytes(png)
        paths.append(path)
    return paths


# -- HTML --------------------------------------------------------------------------------------------------------

def render_html(report: Report, figures: dict[str, bytes]) -> str:
    """One file, no external resources: tables as HTML, figures as base64 PNGs."""
    escape = html.escape
    header = "".join(f"<th>{escape(cell)}</th>" for cell in TABLE_HEADER)
    rows = "".join("<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in row) + "</tr>"
                   for row in latency_rows(report))
    findings = "".join(f"<li>{escape(line)}</li>" for line in summary_lines(report))
    images = "".join(html_figure(FIGURE_TITLES[name], png) for name, png in figures.items())
    return html_page(f"AI tax of run {report.run_id}", f"""<h2>End-to-end latency (Fig. 6) beside the paper</h2>
<table><thead><tr>{header}</tr></thead><tbody>{rows}</tbody></table>
<ul>{findings}</ul>
<h2>Figures</h2>
{images}""")


def html_figure(caption: str, png: bytes) -> str:
    """A PNG inlined as base64, with its caption."""
    caption = html.escape(caption)
    return (f'<figure><img alt="{caption}" src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}">'
            f"<figcaption>{caption}</figcaption></figure>")


def html_page(title: str, body: str) -> str:
    """A self-contained page: `title` escaped here, `body` already HTML."""
    title = html.escape(title)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; }}
table {{ border-collapse: collapse; }}
th, td {{ border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }}
figure {{ display: inline-block; margin: 1em; }}
pre {{ font-size: 0.8em; }}
</style></head>
<body><h1>{title}</h1>
{body}
</body></html>
"""
