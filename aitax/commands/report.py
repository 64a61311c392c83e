"""`aitax report`: where a run's time went (the paper's Fig. 6-9), from its JSONL events or Elasticsearch."""

from __future__ import annotations

from pathlib import Path

import click

from aitax.commands.options import FILE
from aitax.common.errors import UserError


@click.command(
    short_help="where a run's time went: latency breakdown, load, CPU sub-steps, Amdahl projections",
    help="Report one run's AI tax beside the paper's numbers (Fig. 6-9): a table on the terminal, optionally JSON, "
         "PNG plots and one self-contained HTML page. Events come from --events, --es, or the local stack's "
         "Elasticsearch.")
@click.option("--run", "run_id", required=True, help="the run id the pipeline was started with")
@click.option("--events", metavar="DIR_OR_FILE", help="a run's folder of *.jsonl event files, or one such file")
@click.option("--es", metavar="URL", help="Elasticsearch URL holding aitax-events-* indices (default: the local "
                                          "stack's)")
@click.option("--html", type=FILE, help="write one self-contained HTML report here")
@click.option("--json", "json_out", type=FILE, help="write the report as JSON here")
@click.option("--plots", type=click.Path(file_okay=False, path_type=Path), help="write fig6.png .. fig9.png here")
def report(run_id: str, events: str | None, es: str | None, html: Path | None, json_out: Path | None,
           plots: Path | None) -> int:
    from aitax.reporting.report import build_report
    from aitax.reporting.report_render import format_text, render_figures, render_html, write_plots
    from aitax.stack.stack import local_elasticsearch_url
    from aitax.telemetry.elastic_access import usable_url
    from aitax.telemetry.event_sources import load_events

    if events and es:
        raise UserError("--events and --es: give one source of events, not both")
    loaded = load_events(run_id, events or (usable_url(es) if es else local_elasticsearch_url("--events or --es")))
    built = build_report(run_id, loaded.documents, malformed_lines=loaded.malformed_lines)
    print(format_text(built))
    written: list[Path] = []
    if json_out:
        written.append(_write_text(json_out, built.to_json()))
    if html or plots:
        figures = render_figures(built)  # matplotlib only when drawing
        if plots:
            written += write_plots(figures, plots)
        if html:
            written.append(_write_text(html, render_html(built, figures)))
    for path in written:
        print(f"wrote {path}")
    return 0


def _write_text(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path
