"""The `aitax` command: one entry point, one subcommand per capability (click).

Each module of `aitax.commands` has a `register(group)` that adds its click commands. Heavy imports (TensorFlow,
Kafka clients) happen inside the command functions, so `aitax --help` stays instant.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys

import click

from aitax import __version__
from aitax.commands.options import CONTEXT, Commands
from aitax.common.errors import UserError

# Modules whose `register(group)` adds commands, in the order a frame flows through the product.
COMMAND_MODULES = (
    "aitax.commands.stack",
    "aitax.commands.camera",
    "aitax.commands.tools",
    "aitax.commands.stages",
    "aitax.commands.pipeline",
    "aitax.commands.telemetry",
    "aitax.commands.emulation",
    "aitax.commands.emulated_stages",
    "aitax.commands.run_tools",
    "aitax.commands.tco",
    "aitax.commands.experiment",
    "aitax.commands.cluster",
)


@click.group(cls=Commands, context_settings=CONTEXT,
             help="Face Recognition on Kafka, and the AI tax it pays outside its AI kernels.")
@click.version_option(__version__, "--version", prog_name="aitax", message="%(prog)s %(version)s")
@click.option("-v", "--verbose", is_flag=True, help="log debug details to stderr")
def cli(verbose: bool) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not verbose:
        # The Elasticsearch client logs every failed attempt (about 150 lines for one unreachable URL); the
        # command's own one-line error says what is missing.
        logging.getLogger("elastic_transport").setLevel(logging.CRITICAL)
    from aitax.stack.stack import use_local_identity

    use_local_identity(click.get_current_context().invoked_subcommand)


def build_cli() -> click.Group:
    """The root command with every module's commands added (once: click commands are module-level objects)."""
    if not cli.commands:
        for module_name in COMMAND_MODULES:
            importlib.import_module(module_name).register(cli)
    return cli


def main(argv: list[str] | None = None) -> int:
    # TensorFlow's C++ start-up chatter (CPU features, oneDNN) drowns what the commands print.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # FFmpeg inside OpenCV prints its own lines for a bad video; our one-line error says what is wrong.
    os.environ.setdefault("OPENCV_FFMPEG_LOGLEVEL", "-8")
    os.environ.setdefault("OPENCV_LOG_LEVEL", "OFF")
    root = build_cli()
    try:
        return int(root.main(args=argv, prog_name="aitax", standalone_mode=False) or 0)
    except click.exceptions.NoArgsIsHelpError as error:
        click.echo(error.ctx.get_help() if error.ctx else root.get_help(click.Context(root)))
        return 2
    except click.UsageError as error:
        # One line that names the command and the option or value, not click's usage block.
        where = error.ctx.command_path if error.ctx else "aitax"
        print(f"{where}: {' '.join(error.format_message().split())} (see --help)", file=sys.stderr)
        return 2
    except click.ClickException as error:
        print(f"aitax: {error.format_message()}", file=sys.stderr)
        return error.exit_code
    except UserError as error:
        print(f"aitax: {error}", file=sys.stderr)
        return error.exit_code
    except (click.Abort, KeyboardInterrupt):
        print("aitax: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
