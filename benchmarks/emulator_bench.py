"""The emulator's own overheads, measured side by side on the local brokers in one run.

    .venv/bin/python benchmarks/emulator_bench.py [--seconds 10]

1. Producer throughput with paper-sized (37.3 kB) payloads: the emulator's producer path (the pipeline's
   detect loop and transport, compute set to zero) as `emulate-producers` processes, one and two (the sweep's
   default: one per core), vs Kafka's own ProducerPerformance tuned with batch.size=1048576 linger.ms=5
   (target: >= 0.9x), for both Kafka clients.
2. CPU per emulated ingest/detect instance at 1x (the paper's 10 FPS, one face per frame).
3. Sleep accuracy at 32x: intended vs actual emulated compute (p50/p99 error).
Not a test: the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

FACE_BYTES = 37_300


def producer_performance(config, topic: str, records: int) -> float:
    """Records/s from Kafka's ProducerPerformance (Java) with the tuned batch size."""
    from aitax.stack import kafka

    output = kafka.run_tool("org.apache.kafka.tools.ProducerPerformance", [
        "--topic", topic, "--num-records", str(records), "--record-size", str(FACE_BYTES), "--throughput", "-1",
        "--producer-props", f"bootstrap.servers={config.bootstrap_servers}", "acks=all", "batch.size=1048576",
        "linger.ms=5"], heap_mb=512)
    match = re.search(r"([\d.]+) records/sec", output.strip().splitlines()[-1])
    return float(match.group(1)) if match else 0.0


def emulated_producer_rate(config, topic_prefix: str, client: str, seconds: float, processes: int,
                           instances: int) -> float:
    """Faces/s through the emulator's producer path with no compute (a factor so high the sleeps vanish), run
    as the sweep runs it: `processes` x `aitax emulate-producers --instances N`."""
    import json
    import subprocess

    command = [sys.executable, "-m", "aitax.cli", "emulate-producers", "--instances", str(instances), "--factor",
               "1e9", "--duration", str(seconds), "--topic-prefix", topic_prefix, "--kafka-client", client,
               "--bootstrap", config.bootstrap_servers, "--events", "none", "--metrics-port", "-1"]
    started = time.monotonic()
    runs = [subprocess.Popen([*command, "--stream-prefix", f"p{i}"], stdout=subprocess.PIPE, text=True)
            for i in range(processes)]
    outputs = [run.communicate()[0] for run in runs]
    elapsed = time.monotonic() - started - 1.5  # the processes' start-up (imports) is not producing
    acknowledged = 0
    for output in outputs:
        for line in output.splitlines():
            if line.startswith("emulate-producers: summary "):
                acknowledged += json.loads(line.removeprefix("emulate-producers: summary "))["acknowledged"]
    return acknowledged / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds per throughput run (default 10)")
    args = parser.parse_args()

    from aitax.stack import kafka
    from aitax.stack.config import TopicSpec
    from aitax.stack.stack import current_config
    from emulation.profile import paper_profile
    from emulation.workers import EmulatedFaceFinder, run_producer_instances
    from pipeline.schema import Topics
    from pipeline.transport import make_producer
    from telemetry.sinks import NullSink
    from telemetry.timing import Stopwatch

    config = current_config()
    if config is None:
        print("needs the local stack: `aitax stack up`", file=sys.stderr)
        return 2
    prefix = f"bench-{time.time_ns()}-"
    kafka.ensure_topics(config, [*config.topics(Topics.with_prefix(prefix)), TopicSpec(f"{prefix}perf", 12)])
    print(f"load {os.getloadavg()[0]:.2f}; 37.3 kB records, acks=all, RF 3, 12 partitions\n")

    java_rate = producer_performance(config, f"{prefix}perf", records=int(2500 * args.seconds))
    print(f"{'producer':<44}{'records/s':>10}{'MB/s':>8}{'vs Java':>9}")
    print(f"{'Kafka ProducerPerformance (batch 1 MiB)':<44}{java_rate:>10.0f}{java_rate * FACE_BYTES / 1e6:>8.1f}"
          f"{1.0:>9.2f}")
    for client, processes in (("confluent-kafka", 1), ("confluent-kafka", 2), ("kafka-python", 2)):
        rate = emulated_producer_rate(config, prefix, client, args.seconds, processes, instances=4)
        label = f"emulator ({client}, {processes} process{'es' if processes > 1 else ''} x 4)"
        print(f"{label:<44}{rate:>10.0f}{rate * FACE_BYTES / 1e6:>8.1f}{rate / java_rate:>9.2f}")

    instances, seconds = 20, args.seconds
    producer = make_producer("confluent-kafka", config.bootstrap_servers)
    cpu_before, deadline = time.process_time(), time.monotonic() + seconds
    stats = run_producer_instances(instances, "cpu", paper_profile(), 1.0, producer, NullSink(), "bench",
                                   Topics.with_prefix(prefix), lambda: time.monotonic() >= deadline)
    producer.close()
    cpu_ms = (time.process_time() - cpu_before) * 1000
    frames = sum(s.frames for s in stats)
    print(f"\nCPU per emulated ingest/detect instance at 1x (10 FPS, 1 face): {cpu_ms / instances / seconds:.1f} ms/s "
          f"({cpu_ms / max(1, frames):.2f} ms per frame; {frames} frames by {instances} instances)")

    finder = EmulatedFaceFinder(paper_profile(), 32.0, random.Random(1))
    intended = 74.8 / 32
    errors = []
    for _ in range(300):
        watch = Stopwatch()
        finder(None, watch)
        errors.append(watch.ms["emulated"] - intended)
    errors.sort()
    print(f"sleep accuracy at 32x (detect {intended:.2f} ms intended): error p50 {errors[150]:.3f} ms, "
          f"p99 {errors[296]:.3f} ms ({errors[296] / intended:.1%} of the intended time)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
