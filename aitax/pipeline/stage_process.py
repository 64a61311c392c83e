"""The one lifecycle of a stage process, real or emulated: the harness every stage command runs its loop in.

    with stage_process(settings, "identify", "identify", reads=[FACES_TOPIC], writes=[IDENTITIES_TOPIC],
                       group="identify", idempotent=True) as process:
        stats = identify_loop(process.consumers[0], process.producer, ..., process.sink, process.stop,
                              on_ready=process.ready)
    return finish("identify", {"faces": stats.faces}, f"{stats.faces} faces")

In this order, which the stages' correctness rests on: the signal handlers and the telemetry (events and the
/metrics server); then the stage's topics, seen only once they exist and its ACLs are granted (after the metrics
server is up: in a fresh release the topics Job runs once every pod is ready), before the producer, since
librdkafka gives up for good on an idempotent producer whose id was refused; the consumers join their group; the
producer connects to what it writes (metadata and TLS done: its first record costs what the others do). The loop
reports READY when it can serve at speed (`StageProcess.ready`). On the way out: the producer closes first, every
record it holds made durable (what a group commits must be), then the consumers leave their group side by side
within CONSUMER_CLOSE_S, then the telemetry. `finish` reports the SUMMARY, prints it and fails on what the brokers
did not take.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from aitax.common.children import READY, SUMMARY, report
from aitax.common.errors import UserError
from aitax.pipeline.runtime import StageSettings, open_telemetry, stop_flag
from aitax.pipeline.transport import Consumer, Producer, make_consumer, make_producer
from aitax.pipeline.transport.admin import require_brokers
from aitax.telemetry.metrics import StageMetrics
from aitax.telemetry.sinks import EventSink

CONSUMER_CLOSE_S = 20.0  # leaving the group; librdkafka holds a LeaveGroup behind a pending JoinGroup


@dataclass
class StageProcess:
    """What the harness opened for a stage's loop."""

    sink: EventSink
    metrics: StageMetrics
    stop: Callable[[], bool]  # SIGINT or SIGTERM arrived: finish what is held and return
    producer: Producer | None = None
    partitions: dict[str, int] = field(default_factory=dict)  # each written topic's partition count
    consumers: list[Consumer] = field(default_factory=list)
    stuck: int = 0  # consumers that had not left their group within CONSUMER_CLOSE_S, once closed

    @staticmethod
    def ready() -> None:
        """The stage serves at speed: its run's clock may start."""
        report(READY)


@contextmanager
def stage_process(settings: StageSettings, role: str, name: str, *, reads: Sequence[str] = (),
                  writes: Sequence[str] = (), group: str | None = None, consumers: int = 1,
                  idempotent: bool = False, linger_ms: float | None = None) -> Iterator[StageProcess]:
    """The stage's telemetry (`role`: its metrics' stage; `name`: its process, with the pid), `consumers` consumers of
    `reads` in `group` (none without a group) and a producer connected to `writes` (none without), closed in the
    module's order whatever the loop raises."""
    stop = stop_flag()
    sink, metrics = open_telemetry(settings, role, f"{name}-{os.getpid()}")
    process = StageProcess(sink, metrics, lambda: stop[0])
    try:
        require_brokers(settings.bootstrap, topics=[*reads, *writes])
        if group is not None:
            process.consumers = [make_consumer(settings.kafka_client, settings.bootstrap, group, list(reads))
                                 for _ in range(consumers)]
        if writes:
            extra = {} if linger_ms is None else {"linger_ms": linger_ms}
            process.producer = make_producer(settings.kafka_client, settings.bootstrap, idempotent=idempotent,
                                             **extra)
            process.partitions = process.producer.connect(list(writes))
        yield process
    finally:
        try:
            if process.producer is not None:
                process.producer.close()
            process.stuck = close_within(process.consumers, CONSUMER_CLOSE_S)
        finally:
            sink.close()
            metrics.close()


def close_within(clients: Sequence[Consumer], timeout_s: float) -> int:
    """Close the clients side by side; return how many had not closed after `timeout_s`."""
    threads = [threading.Thread(target=client.close, name="close", daemon=True) for client in clients]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout_s
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return sum(thread.is_alive() for thread in threads)


def finish(command: str, summary: dict[str, int], printed: str, failed: Sequence[str] = (), unacknowledged: int = 0,
           what: str = "record(s)") -> int:
    """The stage's SUMMARY to its driver, and the line it prints; a UserError when records `failed` or went
    `unacknowledged` (what the brokers did not take: the run must not pass)."""
    report(SUMMARY, **summary)
    print(f"{command}: {printed}", flush=True)
    if failed or unacknowledged:
        count = max(len(failed), unacknowledged)
        raise UserError(f"{count} {what} not acknowledged by the brokers: {list(failed)[:1]}")
    return 0
