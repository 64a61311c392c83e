"""`aitax report`: where a run's time went (the paper's Fig. 6-9), from its JSONL events or Elasticsearch."""

from __future__ import annotations

import argparse
from pathlib import Path


def register_report(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "report",
        help="where a run's time went: latency breakdown, load, CPU sub-steps, Amdahl projections",
        description="Report one run's AI tax beside the paper's numbers (Fig. 6-9): a table on the terminal, "
        "optionally JSON, PNG plots and one self-contained HTML page. Events come from --events, --es, or "
        "the local stack's Elasticsearch.",
    )
    parser.add_argument("--run", required=True, help="the run id the pipeline was started with")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--events", metavar="DIR_OR_FILE",
                        help="a run's folder of *.jsonl event files, or one such file")
    source.add_argument("--es", metavar="URL",
                        help="Elasticsearch URL holding aitax-events-* indices (default: the local stack's)")
    parser.add_argument("--html", metavar="FILE", help="write one self-contained HTML report here")
    parser.add_argument("--json", metavar="FILE", help="write the report as JSON here")
    parser.add_argument("--plots", metavar="DIR", help="write fig6.png .. fig9.png into this folder")
    parser.set_defaults(func=_report)


def _report(args: argparse.Namespace) -> int:
    from stack.stack import local_elasticsearch_url
    from telemetry.report import build_report
    from telemetry.report_render import format_text, render_figures, render_html, write_plots
    from telemetry.report_sources import load_events

    loaded = load_events(args.run, args.events or args.es or local_elasticsearch_url("--events or --es"))
    report = build_report(args.run, loaded.documents, malformed_lines=loaded.malformed_lines)
    print(format_text(report))
    written: list[Path] = []
    if args.json:
        written.append(_write_text(Path(args.json), report.to_json()))
    if args.html or args.plots:
        figures = render_figures(report)  # matplotlib only when drawing
        if args.plots:
            written += write_plots(figures, Path(args.plots))
        if args.html:
            written.append(_write_text(Path(args.html), render_html(report, figures)))
    for path in written:
        print(f"wrote {path}")
    return 0


def _write_text(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path
