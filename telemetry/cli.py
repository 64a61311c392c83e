"""Telemetry commands: the AI-tax report and the Kibana saved-objects import."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    from telemetry.kibana import register_kibana

    register_kibana(subparsers)
