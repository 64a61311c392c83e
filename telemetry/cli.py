"""Telemetry commands: the AI-tax report and the Kibana saved-objects import."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    from telemetry.kibana import register_kibana
    from telemetry.report_cli import register_report

    register_report(subparsers)
    register_kibana(subparsers)
