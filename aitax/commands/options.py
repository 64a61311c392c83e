"""Options the commands share (real and emulated stages, the drivers), as click decorators, and their resolution
into typed settings: once, here, from flags, a pod's environment or the local stack."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:  # the runtime pulls in the Prometheus client: only the stage commands load it
    from aitax.pipeline.runtime import StageSettings
    from aitax.pipeline.transport.batcher import BatchPolicy

FILE = click.Path(dir_okay=False, path_type=Path)  # an option naming a file
DIR = click.Path(file_okay=False, path_type=Path)  # ... or a folder
CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 110}


class Commands(click.Group):
    """A group that lists its commands in the order they were added (a frame's order), not alphabetically."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)


def group(name: str, help: str, description: str | None = None) -> Commands:
    """A command with actions (`aitax stack up`): `help` in the list, `description` atop its own --help."""
    return Commands(name, help=description or help, short_help=help, context_settings=CONTEXT)


F = TypeVar("F", bound=Callable[..., Any])
Decorator = Callable[[F], F]


class Parsed(click.ParamType):
    """A click type from a parse function that raises ValueError saying what is wrong with the text."""

    def __init__(self, name: str, parse: Callable[[str], Any]) -> None:
        self.name = name
        self.parse = parse

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):  # a default, already parsed
            return value
        try:
            return self.parse(value)
        except ValueError as error:
            self.fail(f"{value!r}: {error}", param, ctx)


def _parse_size(text: str) -> tuple[int, int]:
    try:
        width, height = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise ValueError("expected WIDTHxHEIGHT, e.g. 960x540") from None
    if width < 64 or height < 64:
        raise ValueError("at least 64x64")
    return width, height


SIZE = Parsed("WIDTHxHEIGHT", _parse_size)
def _parse_counts(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise ValueError("expected whole numbers separated by commas, e.g. 1,4,16") from None


def _parse_quantiles(text: str) -> tuple[float, ...]:
    from aitax.telemetry.quantiles import parse_quantiles

    return parse_quantiles(text)


COUNTS = Parsed("N,N,...", _parse_counts)
QUANTILES = Parsed("Q,Q,...", _parse_quantiles)


def options(*decorators: Decorator) -> Decorator:
    """Several click options as one decorator; --help lists them in the order given."""

    def apply(command: F) -> F:
        for decorator in reversed(decorators):
            command = decorator(command)
        return command

    return apply


def gathered(target: str, build: Callable[..., Any], *decorators: Decorator) -> Decorator:
    """Options the command receives as one argument, `target`, which `build(**their values)` makes when it runs."""

    def apply(command: F) -> F:
        @functools.wraps(command)
        def with_target(*args: Any, **kwargs: Any) -> Any:
            values = {name: kwargs.pop(name) for name in names}
            return command(*args, **kwargs, **{target: build(**values)})

        # click collects a command's options bottom-up: the command's own (below this group), then the group's.
        below = list(getattr(command, "__click_params__", []))
        with_target.__click_params__ = []  # type: ignore[attr-defined]
        options(*decorators)(with_target)
        names = [param.name for param in with_target.__click_params__]  # type: ignore[attr-defined]
        with_target.__click_params__ = below + with_target.__click_params__  # type: ignore[attr-defined]
        return with_target  # type: ignore[return-value]

    return apply


def _kafka_client_choice() -> click.Choice:
    from aitax.pipeline.transport import KAFKA_CLIENTS

    return click.Choice(KAFKA_CLIENTS)


def _stage_settings(bootstrap: str | None, kafka_client: str, events: str | None, metrics_port: int) -> StageSettings:
    import os

    from aitax.pipeline.runtime import StageSettings
    from aitax.stack.stack import default_events, local_scrape_targets, resolve_bootstrap

    return StageSettings(bootstrap=resolve_bootstrap(bootstrap), kafka_client=kafka_client,
                         events=events or default_events(), metrics_port=metrics_port,
                         metrics_host=os.environ.get("AITAX_METRICS_HOST", "127.0.0.1"),
                         scrape_targets=local_scrape_targets())


def kafka_client_option(command: F) -> F:
    return click.option("--kafka-client", type=_kafka_client_choice(), default="confluent-kafka", show_default=True,
                        help="Kafka client library (confluent-kafka is librdkafka)")(command)


BOOTSTRAP = click.option("--bootstrap", metavar="HOST:PORT,...",
                         help="Kafka brokers (default: $AITAX_BOOTSTRAP or the local stack)")


def stage_options(command: F) -> F:
    """A stage process's Kafka and telemetry options; the command receives them as one `settings: StageSettings`,
    with the local stack filling what was left out."""
    return gathered(
        "settings", _stage_settings,
        BOOTSTRAP,
        kafka_client_option,
        click.option("--events", envvar="AITAX_EVENTS", show_envvar=True, metavar="SINK[,SINK]",
                     help="where stage events go: none, file:DIR (a JSONL file per process), es:URL, or several "
                          "joined by commas (default: the local stack's Elasticsearch)"),
        click.option("--metrics-port", type=int, default=0, envvar="AITAX_METRICS_PORT", show_envvar=True,
                     help="port of /metrics (default 0: any free port; -1: none)"),
    )(command)


def _queue_delay(command: F) -> F:
    return click.option("--max-queue-delay-ms", type=float, default=0.0, metavar="MS",
                        help="after the first arrival, wait up to this long for a fuller batch: latency traded for "
                             "fewer, larger batches (default 0: never wait)")(command)


def _batch_policy(max_batch: int, max_queue_delay_ms: float) -> BatchPolicy:
    from aitax.common.errors import UserError
    from aitax.pipeline.transport.batcher import BatchPolicy

    try:
        return BatchPolicy(max_batch, max_queue_delay_ms)
    except ValueError as error:
        flag = "--max-batch" if "batch" in str(error) else "--max-queue-delay-ms"
        raise UserError(f"{flag}: {error}") from None


def batching(max_batch: int, what: str) -> Decorator:
    """The dynamic batcher's two settings (pipeline.transport.batcher), for a stage that consumes `what`; the
    command receives them as one `batching: BatchPolicy`."""
    return gathered(
        "batching", _batch_policy,
        click.option("--max-batch", type=int, default=max_batch, show_default=True,
                     help=f"{what} per batch at most: a batch is whatever has arrived, never waited for"),
        _queue_delay,
    )


def results_linger(command: F) -> F:
    from aitax.runs.results import Driver

    default = Driver.model_fields["results_linger_ms"].default
    return click.option("--results-linger-ms", type=float, default=default, metavar="MS", show_default=True,
                        help="how long the results producer holds an identity to fill a request; counted in end to "
                             "end, which ends at the identity's append")(command)


def driver_timing(command: F) -> F:
    """For a command that runs the stages: the consuming stages' batcher delay and identify's results linger, which
    the command receives as one `timing` for `driver()`."""
    return gathered("timing", dict, _queue_delay, results_linger)(command)


def driver(timing: dict[str, float], **settings: Any):
    """The Driver of `driver_timing`'s values (and `settings`); a bad value is a UserError naming the flag."""
    from pydantic import ValidationError

    from aitax.common.errors import invalid
    from aitax.runs.results import Driver

    try:
        return Driver(**timing, **settings)
    except ValidationError as error:
        raise invalid(error, names={"max_queue_delay_ms": "--max-queue-delay-ms",
                                    "results_linger_ms": "--results-linger-ms", "max_batch": "--max-batch"}) from None


def keying(command: F) -> F:
    from aitax.pipeline.schema import DEFAULT_KEYING, KEYINGS

    return click.option("--keying", type=click.Choice(KEYINGS), default=DEFAULT_KEYING, show_default=True,
                        help="what keys a `faces` record, so which identify consumer gets it: track (a track's faces "
                             "on one consumer, which holds its evidence; an untracked face as face), stream (a camera "
                             "on one consumer), frame, face (spreads faces over every consumer) or none")(command)


def send(command: F) -> F:
    def parsed(context: click.Context, parameter: click.Parameter, value: str) -> str:
        from aitax.pipeline.tracking import SendPolicy

        try:
            return str(SendPolicy.parse(value))
        except ValueError as error:
            raise click.BadParameter(str(error)) from None

    return click.option("--send", default="every", show_default=True, metavar="every|sample:N", callback=parsed,
                        help="which faces of a track send their thumbnail: every face (the paper's), or sample:N (a "
                             "track's first face, then one every N frames, and at once when it grows 1.5x); the "
                             "rest go as metadata, named from their track")(command)


def measurement(ramp_up_s: float) -> Decorator:
    """The measurement window and the quantiles every printed result shows: `ramp_up`, `ramp_down`, `quantiles`."""
    from aitax.telemetry.quantiles import DEFAULT_QUANTILES

    return options(
        click.option("--ramp-up", type=float, default=ramp_up_s, show_default=True,
                     help="seconds of each run's load not measured at its start"),
        click.option("--ramp-down", type=float, default=0.0, show_default=True,
                     help="seconds of each run's load not measured at its end"),
        click.option("--quantiles", type=QUANTILES, default=",".join(f"{q:g}" for q in DEFAULT_QUANTILES),
                     show_default=True,
                     help="end-to-end latency quantiles to report, flagged where the window holds fewer than "
                          "10/(1-q) faces"),
    )


def schema_command(what: str, shipped: str, schema: Callable[[], dict]) -> click.Command:
    """`ACTION schema [--out FILE]`: a file format's JSON Schema, for an editor."""

    @click.command("schema", short_help=f"print the {what}'s JSON Schema (for an editor; {shipped})",
                   help=f"The JSON Schema of a {what}, from the model that validates one. Rules between fields are "
                        "the loader's.")
    @click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="write it here instead of printing it")
    def command(out: Path | None) -> int:
        return write_schema(schema(), out)

    return command


def write_schema(schema: dict, out: Path | None) -> int:
    import json

    text = json.dumps(schema, indent=2) + "\n"
    if out is None:
        print(text, end="")
    else:
        out.write_text(text)
        print(f"wrote {out}")
    return 0
