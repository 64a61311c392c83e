"""The `aitax` command: one entry point, one subcommand per capability.

Each module of `aitax.commands` has a `register(subparsers)` that adds its subcommands and sets `func` on
them. Heavy imports (TensorFlow, Kafka clients) happen inside the command functions, so
`aitax --help` stays instant.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from aitax import __version__
from common.errors import UserError

# Modules whose `register(subparsers)` adds commands, in the order a frame flows through the product.
COMMAND_MODULES = (
    "aitax.commands.stack",
    "aitax.commands.pipeline",
    "aitax.commands.telemetry",
    "aitax.commands.emulation",
    "aitax.commands.tco",
    "aitax.commands.experiment",
    "aitax.commands.cluster",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="aitax",
        description="Face Recognition on Kafka, and the AI tax it pays outside its AI kernels.",
    )
    parser.add_argument("--version", action="version", version=f"aitax {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug details to stderr")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    # TensorFlow's C++ start-up chatter (CPU features, oneDNN) drowns what the commands print.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # FFmpeg inside OpenCV prints its own lines for a bad video; our one-line error says what is wrong.
    os.environ.setdefault("OPENCV_FFMPEG_LOGLEVEL", "-8")
    os.environ.setdefault("OPENCV_LOG_LEVEL", "OFF")
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not args.verbose:
        # The Elasticsearch client logs every failed attempt (about 150 lines for one unreachable URL); the
        # command's own one-line error says what is missing.
        logging.getLogger("elastic_transport").setLevel(logging.CRITICAL)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except UserError as error:
        print(f"aitax: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print("aitax: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
