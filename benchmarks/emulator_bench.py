"""The emulator measured against Kafka's own tools, side by side on the local brokers in one run.

    .venv/bin/python benchmarks/emulator_bench.py [--seconds 15] [--repeats 2]

1. End to end (the target, >= 0.8x): Kafka's ProducerPerformance and ConsumerPerformance running together
   (37.3 kB records, acks=all, RF 3, batch.size=1048576 linger.ms=5) vs the emulator's producers and identify
   consumers (`emulate-producers` / `emulate-consumers` processes, the sweep's own load) at a factor so high the
   sleeps vanish. Alternating runs after a warm-up; medians and each run printed, with what saturated.
2. The emulator's own CPU per face on each side (producer path, identify path) and per emulated instance at 1x.
3. How many emulated ingest/detect instances one process hosts at 1x with a p99 schedule error <= 1 ms.
4. Sleep accuracy at 32x: intended vs actual emulated compute.
Not a test: the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

FACE_BYTES = 37_300
NO_SLEEP = 1e9
TOOLS_ROLE = "Kafka's tools"  # an acceleration factor at which every emulated compute time is below the sleep threshold


def kafka_tools(config, topic: str, records: int) -> dict:
    """ProducerPerformance and ConsumerPerformance together: the consumer's fetch rate is the end-to-end rate
    (it cannot outrun the producer)."""
    from aitax.load.resources import Sampler
    from aitax.stack import kafka

    producer_args = ["--topic", topic, "--num-records", str(records), "--record-size", str(FACE_BYTES),
                     "--throughput", "-1", "--producer-props", f"bootstrap.servers={config.bootstrap_servers}",
                     "acks=all", "batch.size=1048576", "linger.ms=5"]
    consumer_args = ["--bootstrap-server", config.bootstrap_servers, "--topic", topic, "--num-records",
                     str(records), "--timeout", "60000", "--group", f"{topic}-perf"]
    with Sampler(config) as sampler:
        started = time.monotonic()
        tools = [subprocess.Popen(kafka.tool_command(f"org.apache.kafka.tools.{name}", args, heap_mb=512),
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                 for name, args in (("ProducerPerformance", producer_args), ("ConsumerPerformance", consumer_args))]
        sampler.watch(TOOLS_ROLE, [tool.pid for tool in tools])
        outputs = [tool.communicate()[0] for tool in tools]
        time.sleep(sampler.interval_s)  # one more sample, with their last CPU seconds
        usage = sampler.usage(started, time.monotonic())
    fields = outputs[1].strip().splitlines()[-1].split(", ")
    consumed, rate = int(fields[4]), float(fields[9])  # data.consumed.in.nMsg, fetch.nMsg.sec
    produced = re.search(r"([\d.]+) records/sec", outputs[0].strip().splitlines()[-1])
    return {"rate": rate if consumed == records else 0.0, "produced_rate": float(produced.group(1)) if produced else 0,
            "client_cpu_us": usage.role_cpu_cores.get(TOOLS_ROLE, 0.0) * usage.seconds / records * 1e6,
            "usage": usage}


def emulator(config, seconds: float, producers: int, consumers: int, processes: int, keying: str) -> dict:
    """The sweep's own emulated load at NO_SLEEP; the rate is identities per second once every process runs."""
    from aitax.load.resources import Sampler
    from emulation.profile import paper_profile
    from emulation.sweep import SweepSpec, delete_topics, emulated_load
    from ground.paths import aitax_home

    spec = SweepSpec([NO_SLEEP], seconds, producers, consumers, processes, paper_profile(), "paper", keying=keying)
    load = emulated_load(spec, config, NO_SLEEP, f"bench-{time.time_ns()}", aitax_home() / "bench", drain_s=30)
    # The engine's steps by hand: the steady rate excludes the producers' start-up, which `run_load` counts.
    try:
        with Sampler(config) as sampler:
            load.start_consumers()
            load.start_producers()
            for role, pids in load.pids().items():
                sampler.watch(role, pids)
            started_ns, started = time.time_ns(), time.monotonic()
            load.finish_producers(interrupted=False)
            ended_ns = time.time_ns()
            usage = sampler.usage(started + 3, time.monotonic())
        load.drain(30)
    finally:
        load.stop()
        identities, _ = load.identities()
        delete_topics(config, load.topics)  # 1 GB a second of replicated thumbnails: never leave them on the disk
    # Skip the producers' start-up (imports, first connections): the steady rate is what is compared.
    times = sorted(i.identified_ns for i in identities if started_ns + 3e9 <= i.identified_ns <= ended_ns)
    span_s = (times[-1] - times[0]) / 1e9 if len(times) > 1 else float("inf")
    return {"rate": len(times) / span_s, "identified": len(identities), "usage": usage}


def _saturation(usage) -> str:
    from aitax.load.resources import cpu_owner, saturated_resource

    return saturated_resource(usage, 2.2e9, None) if usage.machine_cpu_busy < 0.85 else \
        f"cpu (machine) {usage.machine_cpu_busy:.0%}, {cpu_owner(usage)}"


def end_to_end(config, seconds: float, repeats: int, producers: int, consumers: int, processes: int,
               keying: str) -> None:
    from aitax.stack import kafka
    from aitax.stack.config import TopicSpec

    print(f"1. end to end: Kafka's tools vs the emulator ({producers} producers, {consumers} identify consumers in "
          f"{processes}+{processes} processes, factor {NO_SLEEP:g}, faces keyed by {keying})")
    print("   warm-up (JIT of fresh brokers) ...", flush=True)
    emulator(config, 10, producers, consumers, processes, keying)
    tool_rates, emulator_rates = [], []
    for run in range(1, repeats + 1):
        topic = f"bench-perf-{time.time_ns()}"
        kafka.ensure_topics(config, [TopicSpec(topic, 12)])
        try:
            tools = kafka_tools(config, topic, records=int(2200 * seconds))
        finally:
            _delete(config, topic)
        emulated = emulator(config, seconds, producers, consumers, processes, keying)
        tool_rates.append(tools["rate"])
        emulator_rates.append(emulated["rate"])
        print(f"   run {run}: Kafka tools {tools['rate']:7.0f} records/s (client CPU {tools['client_cpu_us']:.0f} "
              f"us/record; {_saturation(tools['usage'])});  emulator {emulated['rate']:7.0f} faces/s "
              f"({_saturation(emulated['usage'])})  ratio {emulated['rate'] / max(1.0, tools['rate']):.2f}",
              flush=True)
    tools_rate, emulator_rate = statistics.median(tool_rates), statistics.median(emulator_rates)
    print(f"   median: Kafka tools {tools_rate:.0f} records/s ({tools_rate * FACE_BYTES / 1e6:.0f} MB/s), emulator "
          f"{emulator_rate:.0f} faces/s ({emulator_rate * FACE_BYTES / 1e6:.0f} MB/s): "
          f"END-TO-END RATIO {emulator_rate / max(1.0, tools_rate):.2f} (target >= 0.80)\n")


def _delete(config, topic: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": config.bootstrap_servers})
    for future in admin.delete_topics([topic]).values():
        future.result(30)


class _ScheduleRecorder:
    """Passes every send on to the real producer and keeps the face's lateness against its schedule."""

    def __init__(self, producer) -> None:
        self.producer, self.client_name, self.late_ms = producer, producer.client_name, []

    def send(self, topic, value, key=None, headers=None, on_delivery=None, opaque=None) -> None:
        from pipeline.schema import META_HEADER

        meta = json.loads(headers[META_HEADER])
        self.late_ms.append((meta["captured_ns"] - meta["scheduled_ns"]) / 1e6)
        self.producer.send(topic, value, key=key, headers=headers, on_delivery=on_delivery, opaque=opaque)

    def poll(self, timeout_s: float = 0.0) -> None:
        self.producer.poll(timeout_s)

    def flush(self, timeout_s: float = 30.0) -> int:
        return self.producer.flush(timeout_s)


def own_costs(config, seconds: float) -> None:
    """CPU per face of the emulator's producer and identify paths, in this process, on the real brokers."""
    from aitax.stack import kafka
    from emulation.profile import paper_profile
    from emulation.workers import run_consumer_instances, run_producer_instances
    from pipeline.schema import Topics
    from pipeline.transport import make_consumer, make_producer
    from telemetry.results import Driver
    from telemetry.sinks import NullSink

    topics = Topics.with_prefix(f"bench-own-{time.time_ns()}-")
    kafka.ensure_topics(config, replace(config, faces_partitions=4).topics(topics))
    try:
        producer = make_producer("confluent-kafka", config.bootstrap_servers)
        cpu, deadline = time.process_time(), time.monotonic() + seconds
        stats = run_producer_instances(4, "own", paper_profile(), NO_SLEEP, producer, NullSink(), "bench", topics,
                                       lambda: time.monotonic() >= deadline)
        producer.close()
        produced = sum(s.acknowledged for s in stats)
        producer_us = (time.process_time() - cpu) / produced * 1e6
        consumers = [make_consumer("confluent-kafka", config.bootstrap_servers, f"{topics.faces}-own", [topics.faces])
                     for _ in range(4)]
        results = make_producer("confluent-kafka", config.bootstrap_servers, linger_ms=Driver().results_linger_ms)
        cpu, started = time.process_time(), time.monotonic()
        identify_stats: list = []
        run_consumer_instances(consumers, results, paper_profile(), NO_SLEEP, NullSink(), topics,
                               lambda: sum(s.faces for s in identify_stats) >= produced
                               or time.monotonic() - started > 120, stats_out=identify_stats)
        identified = sum(s.faces for s in identify_stats)
        consumer_us = (time.process_time() - cpu) / max(1, identified) * 1e6
        for client in (*consumers, results):
            client.close()
    finally:
        _delete_all(config, topics)
    print(f"2. the emulator's own CPU per face (4 instances, one process, factor {NO_SLEEP:g}; Kafka clients "
          f"included): producer path {producer_us:.0f} us ({produced} faces), identify path {consumer_us:.0f} us "
          f"({identified} faces)")


def _delete_all(config, topics) -> None:
    from emulation.sweep import delete_topics

    delete_topics(config, topics)


def instances_per_process(config, seconds: float) -> None:
    """Emulated ingest/detect instances at 1x (10 FPS each) in one process: CPU per instance and schedule p99."""
    from aitax.stack import kafka
    from emulation.profile import paper_profile
    from emulation.workers import run_producer_instances
    from pipeline.schema import Topics
    from pipeline.transport import make_producer
    from telemetry.sinks import NullSink

    print("3. emulated ingest/detect instances in one process at 1x (10 FPS, 1 face/frame each):")
    print(f"   {'instances':>9}{'cpu ms/s each':>15}{'schedule p50 ms':>17}{'p99 ms':>9}{'faces/s':>9}")
    best = 0
    for instances in (2, 5, 10, 25, 50, 100):
        topics = Topics.with_prefix(f"bench-sched-{time.time_ns()}-")
        kafka.ensure_topics(config, config.topics(topics))
        try:
            recorder = _ScheduleRecorder(make_producer("confluent-kafka", config.bootstrap_servers))
            cpu, deadline = time.process_time(), time.monotonic() + seconds
            stats = run_producer_instances(instances, "sched", paper_profile(), 1.0, recorder, NullSink(), "bench",
                                           topics, lambda deadline=deadline: time.monotonic() >= deadline)
            cpu_ms = (time.process_time() - cpu) * 1000
            recorder.producer.close()
        finally:
            _delete_all(config, topics)
        late = sorted(recorder.late_ms)
        p50, p99 = late[len(late) // 2], late[int(len(late) * 0.99)]
        print(f"   {instances:>9}{cpu_ms / instances / seconds:>15.1f}{p50:>17.3f}{p99:>9.3f}"
              f"{sum(s.acknowledged for s in stats) / seconds:>9.0f}", flush=True)
        if p99 > 1.0:
            break
        best = instances
    print(f"   one process hosts {best or 'fewer than 2'} instances at 1x with p99 schedule error <= 1 ms\n")


def sleep_accuracy() -> None:
    from emulation.profile import paper_profile
    from emulation.workers import EmulatedFaceFinder
    from ground.paper import PAPER
    from telemetry.timing import Stopwatch

    finder = EmulatedFaceFinder(paper_profile(), 32.0, random.Random(1))
    intended = PAPER.mean_ms["detect"] / 32
    errors = []
    for _ in range(300):
        watch = Stopwatch()
        finder(None, watch)
        errors.append(watch.ms["emulated"] - intended)
    errors.sort()
    print(f"4. sleep accuracy at 32x (detect {intended:.2f} ms intended): error p50 {errors[150]:.3f} ms, "
          f"p99 {errors[296]:.3f} ms ({errors[296] / intended:.1%} of the intended time)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=15.0, help="seconds per throughput run (default 15)")
    parser.add_argument("--repeats", type=int, default=2, help="alternating tool/emulator runs (default 2)")
    parser.add_argument("--producers", type=int, default=4, help="emulated producer instances (default 4)")
    parser.add_argument("--consumers", type=int, default=4, help="emulated identify instances (default 4)")
    parser.add_argument("--processes", type=int, default=1, help="OS processes per side (default 1)")
    parser.add_argument("--keying", default="face", help="faces keyed by face (the default) or none (sticky)")
    parser.add_argument("--only", choices=("end-to-end", "costs"), help="run one part only")
    args = parser.parse_args()

    import os

    from aitax.stack.stack import running_config

    config = running_config()
    print(f"load {os.getloadavg()[0]:.2f}; {config.brokers} brokers, RF {config.replication_factor}, "
          f"37.3 kB faces\n")
    if args.only in (None, "end-to-end"):
        end_to_end(config, args.seconds, args.repeats, args.producers, args.consumers, args.processes, args.keying)
    if args.only in (None, "costs"):
        own_costs(config, min(args.seconds, 8))
        instances_per_process(config, min(args.seconds, 8))
        sleep_accuracy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
