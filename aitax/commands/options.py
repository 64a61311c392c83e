"""Options the stage commands share (real and emulated), and their resolution into `StageSettings`: once, here,
from flags, a pod's environment or the local stack."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the runtime pulls in the Prometheus client: only the stage commands load it
    from pipeline.runtime import StageSettings


def add_kafka_options(parser: argparse.ArgumentParser) -> None:
    from pipeline.transport import KAFKA_CLIENTS

    parser.add_argument("--bootstrap", help="Kafka brokers HOST:PORT,... (default: $AITAX_BOOTSTRAP or local stack)")
    parser.add_argument("--kafka-client", choices=KAFKA_CLIENTS, default="confluent-kafka",
                        help="Kafka client library (default confluent-kafka, i.e. librdkafka)")
    parser.add_argument("--events", default=os.environ.get("AITAX_EVENTS"),
                        help="where stage events go: none, file:DIR (a JSONL file per process), es:URL, or several "
                             "joined by commas (default: $AITAX_EVENTS, else the local stack's Elasticsearch)")
    parser.add_argument("--metrics-port", type=int, default=int(os.environ.get("AITAX_METRICS_PORT", "0")),
                        help="port of /metrics (default $AITAX_METRICS_PORT or any free port; -1: none)")


def add_batching(parser: argparse.ArgumentParser, max_batch: int, what: str) -> None:
    """The dynamic batcher's two settings (pipeline.transport.batcher), for a stage that consumes `what`."""
    parser.add_argument("--max-batch", type=int, default=max_batch,
                        help=f"{what} per batch at most: a batch is whatever has arrived, never waited for "
                             f"(default {max_batch})")
    _add_queue_delay(parser)


def _add_queue_delay(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-queue-delay-ms", type=float, default=0.0, metavar="MS",
                        help="after the first arrival, wait up to this long for a fuller batch: latency traded for "
                             "fewer, larger batches (default 0: never wait)")


def add_driver_timing(parser: argparse.ArgumentParser) -> None:
    """For a command that runs the stages: the consuming stages' batcher delay and identify's results linger."""
    _add_queue_delay(parser)
    add_results_linger(parser)


def driver(args: argparse.Namespace, **settings):
    """The Driver of `add_driver_timing`'s flags (and `settings`); a bad value is a UserError naming the flag."""
    from pydantic import ValidationError

    from common.errors import invalid
    from telemetry.results import Driver

    try:
        return Driver(max_queue_delay_ms=args.max_queue_delay_ms, results_linger_ms=args.results_linger_ms, **settings)
    except ValidationError as error:
        raise invalid(error, names={"max_queue_delay_ms": "--max-queue-delay-ms",
                                    "results_linger_ms": "--results-linger-ms", "max_batch": "--max-batch"}) from None


def add_results_linger(parser: argparse.ArgumentParser) -> None:
    from telemetry.results import Driver

    default = Driver.model_fields["results_linger_ms"].default
    parser.add_argument("--results-linger-ms", type=float, default=default, metavar="MS",
                        help=f"how long the results producer holds an identity to fill a request; counted in end to "
                             f"end, which ends at the identity's append (default {default:g})")


def batch_policy(args: argparse.Namespace):
    """The BatchPolicy of `add_batching`'s flags; a bad value is a UserError naming the flag."""
    from common.errors import UserError
    from pipeline.transport.batcher import BatchPolicy

    try:
        return BatchPolicy(args.max_batch, args.max_queue_delay_ms)
    except ValueError as error:
        flag = "--max-batch" if "batch" in str(error) else "--max-queue-delay-ms"
        raise UserError(f"{flag}: {error}") from None


def add_keying(parser: argparse.ArgumentParser) -> None:
    from pipeline.schema import DEFAULT_KEYING, KEYINGS

    parser.add_argument("--keying", choices=KEYINGS, default=DEFAULT_KEYING,
                        help="what keys a `faces` record, so which identify consumer gets it: stream (a camera on "
                             "one consumer), frame, or face (default: spreads faces over every consumer)")


def add_measurement(parser: argparse.ArgumentParser, ramp_up_s: float) -> None:
    """The measurement window and the quantiles every printed result shows."""
    from telemetry.quantiles import DEFAULT_QUANTILES, parse_quantiles

    def quantiles(text: str) -> tuple[float, ...]:
        try:
            return parse_quantiles(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    parser.add_argument("--ramp-up", type=float, default=ramp_up_s,
                        help=f"seconds of each run's load not measured at its start (default {ramp_up_s:g})")
    parser.add_argument("--ramp-down", type=float, default=0.0,
                        help="seconds of each run's load not measured at its end (default 0)")
    parser.add_argument("--quantiles", type=quantiles, default=DEFAULT_QUANTILES,
                        help="end-to-end latency quantiles to report, flagged where the window holds fewer than "
                             "10/(1-q) faces (default " + ",".join(f"{q:g}" for q in DEFAULT_QUANTILES) + ")")


def stage_settings(args: argparse.Namespace) -> StageSettings:
    """The options of `add_kafka_options`, with the local stack filling what was left out."""
    from pipeline.runtime import StageSettings
    from stack.stack import default_events, local_scrape_targets, resolve_bootstrap

    return StageSettings(bootstrap=resolve_bootstrap(args.bootstrap), kafka_client=args.kafka_client,
                         events=args.events or default_events(), metrics_port=args.metrics_port,
                         metrics_host=os.environ.get("AITAX_METRICS_HOST", "127.0.0.1"),
                         scrape_targets=local_scrape_targets())


def counts(text: str) -> tuple[int, ...]:
    """An argparse type: whole numbers separated by commas."""
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected whole numbers separated by commas, e.g. 1,4,16") from None


def add_schema_action(actions: argparse._SubParsersAction, what: str, shipped: str, func) -> None:
    """`ACTION schema [--out FILE]`: a file format's JSON Schema, for an editor."""
    schema = actions.add_parser(
        "schema", help=f"print the {what}'s JSON Schema (for an editor; {shipped})",
        description=f"The JSON Schema of a {what}, from the model that validates one. Rules between fields are "
                    "the loader's.")
    schema.add_argument("--out", type=Path, help="write it here instead of printing it")
    schema.set_defaults(func=func)


def write_schema(schema: dict, out: Path | None) -> int:
    import json

    text = json.dumps(schema, indent=2) + "\n"
    if out is None:
        print(text, end="")
    else:
        out.write_text(text)
        print(f"wrote {out}")
    return 0

