"""The emulator measured against Kafka's own tools, side by side on the local brokers in one run.

    .venv/bin/python benchmarks/emulator_bench.py [--seconds 20] [--instances 4,16,64] [--processes 1,2]

1. End to end (the target, >= 0.8x): Kafka's ProducerPerformance and ConsumerPerformance running together
   (37.3 kB records, acks=all, RF 3, batch.size=1048576 linger.ms=5, as many partitions as the sweep's topic) vs
   the sweep users run, `aitax emulate --factors 1e9` (every sleep vanishes), read as the sweep reports it: its
   in-window identified faces/s. At each instance count, each packing of instances into processes and each
   keying; each side's CPU per face (brokers, clients) and the brokers' requests per face, from their meters.
2. The emulator's own CPU per face on each side (producer path, identify path), in one process.
3. How many emulated ingest/detect instances one process hosts at 1x with a p99 schedule error <= 1 ms.
4. Sleep accuracy at 32x: intended vs actual emulated compute.
Not a test: the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import json
import random
import re
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
    """ProducerPerformance and ConsumerPerformance together. Their end-to-end rate is the lower of the two: the
    consumer's own fetch rate counts from its first fetch, and a consumer that joined late reads a backlog faster
    than the producer ever wrote it."""
    from aitax.load.resources import Sampler
    from aitax.stack import kafka

    producer_args = ["--topic", topic, "--num-records", str(records), "--record-size", str(FACE_BYTES),
                     "--throughput", "-1", "--producer-props", f"bootstrap.servers={config.bootstrap_servers}",
                     "acks=all", "batch.size=1048576", "linger.ms=5", *kafka.tool_client_args(config)]
    consumer_args = ["--bootstrap-server", config.bootstrap_servers, "--topic", topic, "--num-records",
                     str(records), "--timeout", "60000", "--group", f"{topic}-perf", *kafka.tool_client_args(config)]
    before = broker_requests(config)
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
    consumed, fetched_rate = int(fields[4]), float(fields[9])  # data.consumed.in.nMsg, fetch.nMsg.sec
    produced = re.search(r"([\d.]+) records/sec", outputs[0].strip().splitlines()[-1])
    rate = min(fetched_rate, float(produced.group(1))) if produced and consumed == records else 0.0
    seconds = usage.seconds
    return {"rate": rate,
            "cpu_us": {"brokers": sum(usage.broker_cpu_cores.values()) * seconds / records * 1e6,
                       "clients": usage.role_cpu_cores.get(TOOLS_ROLE, 0.0) * seconds / records * 1e6},
            "requests": per_face(requests_since(config, before), records), "saturated": _saturation(usage)}


def broker_requests(config) -> dict[str, float]:
    """Requests the brokers have served, by type, summed over the brokers (their own meters)."""
    import urllib.request

    totals: dict[str, float] = {}
    for node in range(1, config.brokers + 1):
        with urllib.request.urlopen(f"http://127.0.0.1:{config.broker_metrics_port(node)}/metrics") as response:
            for match in re.finditer(r'^kafka_network_requests_total\{request="(\w+)"\} (\S+)$',
                                     response.read().decode(), re.M):
                totals[match[1]] = totals.get(match[1], 0.0) + float(match[2])
    return totals


def requests_since(config, before: dict[str, float]) -> dict[str, float]:
    return {name: count - before.get(name, 0.0) for name, count in broker_requests(config).items()}


def per_face(requests: dict[str, float], faces: int) -> dict[str, float]:
    return {name: count / max(1, faces) for name, count in requests.items() if count}


def sweep_point(config, seconds: float, instances: int, processes: int, keying: str) -> dict:
    """One point of the sweep users run (`aitax emulate --factors NO_SLEEP --producers N --consumers N`), read
    as the sweep reports it: identified faces per second within its measurement window."""
    from aitax.emulation.profile import paper_profile
    from aitax.emulation.sweep import SweepPlan, SweepSpec, emulated_workload, run_sweep
    from aitax.runs.results import Driver

    spec = SweepSpec(SweepPlan([NO_SLEEP], stop_after=0),
                     emulated_workload(instances, instances, processes, seconds, "paper"), Driver(keying=keying),
                     paper_profile())
    before = broker_requests(config)
    run = run_sweep(spec, config, progress=lambda _: None).runs[0]
    cpu = run.resources.broker_cpu_cores
    faces = run.achieved_faces_per_s
    return {"rate": faces, "run": run,
            "cpu_us": {"brokers": sum(cpu.values()) / max(1.0, faces) * 1e6,
                       **{role.removeprefix("the emulator's "): cores / max(1.0, faces) * 1e6
                          for role, cores in run.resources.client_cpu_cores.items()}},
            "requests": per_face(requests_since(config, before), run.produced_faces),
            "saturated": run.resources.saturated}


def _saturation(usage) -> str:
    from aitax.load.resources import cpu_owner, saturated_resource

    return saturated_resource(usage, None) if usage.machine_cpu_busy < 0.85 else \
        f"cpu (machine) {usage.machine_cpu_busy:.0%}, {cpu_owner(usage)}"


def _profile(measured: dict) -> str:
    cpu = ", ".join(f"{role} {us:.0f}" for role, us in measured["cpu_us"].items())
    requests = ", ".join(f"{name} {count:.2f}" for name, count in sorted(measured["requests"].items()))
    return f"cpu us/face: {cpu}; requests/face: {requests}"


def end_to_end(config, seconds: float, instances: list[int], processes: list[int], keyings: list[str]) -> None:
    """Kafka's tools, then the sweep's own point at each instance count, packing and keying, in one run."""
    from aitax.stack import kafka
    from aitax.stack.config import TopicSpec

    print(f"1. end to end: Kafka's tools vs `aitax emulate --factors {NO_SLEEP:g}` (the sweep's own in-window "
          f"identified faces/s), {seconds:g} s each; instances {instances}, processes per side {processes}, "
          f"keying {keyings}")
    print("   warm-up (JIT of fresh brokers) ...", flush=True)
    sweep_point(config, 10, 4, 1, "none")
    ratios = {}
    for count in instances:
        topic = f"bench-perf-{time.time_ns()}"
        kafka.ensure_topics(config, [TopicSpec(topic, max(3, count))])  # the partitions the sweep's topic has
        try:
            tools = kafka_tools(config, topic, records=int(1800 * seconds))
        finally:
            _delete(config, topic)
        print(f"   {count:>3} instances: Kafka's tools {tools['rate']:6.0f} records/s; {_profile(tools)}; "
              f"{tools['saturated']}", flush=True)
        for keying in keyings:
            for packing in processes:
                if packing > count:
                    continue
                point = sweep_point(config, seconds, count, packing, keying)
                ratio = point["rate"] / max(1.0, tools["rate"])
                ratios[count, keying, packing] = ratio
                print(f"       emulator keyed by {keying:<4}, {packing} process(es) a side: {point['rate']:6.0f} "
                      f"faces/s, ratio {ratio:.2f}, backlog {point['run'].backlog_faces}; {_profile(point)}; "
                      f"{point['saturated']}", flush=True)
    for (count, keying, packing), ratio in ratios.items():
        print(f"   RATIO {count} instances, keyed by {keying}, {packing} process(es): {ratio:.2f} (target >= 0.80)")
    print()


def _delete(config, topic: str) -> None:
    from confluent_kafka.admin import AdminClient

    from aitax.stack.kafka import admin_settings

    admin = AdminClient(admin_settings(config))
    for future in admin.delete_topics([topic]).values():
        future.result(30)


class _ScheduleRecorder:
    """Passes every send on to the real producer and keeps the face's lateness against its schedule."""

    def __init__(self, producer) -> None:
        self.producer, self.client_name, self.late_ms = producer, producer.client_name, []

    def send(self, topic, value, key=None, headers=None, on_delivery=None, opaque=None) -> None:
        from aitax.pipeline.schema import META_HEADER

        meta = json.loads(headers[META_HEADER])
        self.late_ms.append((meta["captured_ns"] - meta["scheduled_ns"]) / 1e6)
        self.producer.send(topic, value, key=key, headers=headers, on_delivery=on_delivery, opaque=opaque)

    def poll(self, timeout_s: float = 0.0) -> None:
        self.producer.poll(timeout_s)

    def flush(self, timeout_s: float = 30.0) -> int:
        return self.producer.flush(timeout_s)


def own_costs(config, seconds: float) -> None:
    """CPU per face of the emulator's producer and identify paths, in this process, on the real brokers."""
    from aitax.emulation.profile import paper_profile
    from aitax.emulation.workers import EmulatedCompute, run_consumer_instances, run_producer_instances
    from aitax.pipeline.schema import Topics
    from aitax.pipeline.transport import make_consumer, make_producer
    from aitax.runs.results import Driver
    from aitax.stack import kafka
    from aitax.telemetry.sinks import NullSink

    topics = Topics.with_prefix(f"bench-own-{time.time_ns()}-")
    kafka.ensure_topics(config, replace(config, faces_partitions=4).topics(topics))
    try:
        producer = make_producer("confluent-kafka", config.bootstrap_servers)
        cpu, deadline = time.process_time(), time.monotonic() + seconds
        stats = run_producer_instances(4, "own", EmulatedCompute(paper_profile(), NO_SLEEP), producer, NullSink(),
                                       "bench", topics, lambda: time.monotonic() >= deadline)
        producer.close()
        produced = sum(s.acknowledged for s in stats)
        producer_us = (time.process_time() - cpu) / produced * 1e6
        consumers = [make_consumer("confluent-kafka", config.bootstrap_servers, f"{topics.faces}-own", [topics.faces])
                     for _ in range(4)]
        results = make_producer("confluent-kafka", config.bootstrap_servers, linger_ms=Driver().results_linger_ms,
                                idempotent=True)
        cpu, started = time.process_time(), time.monotonic()
        identify_stats: list = []
        run_consumer_instances(consumers, results, EmulatedCompute(paper_profile(), NO_SLEEP), NullSink(), topics,
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
    from aitax.emulation.sweep import delete_topics

    delete_topics(config, topics)


def instances_per_process(config, seconds: float) -> None:
    """Emulated ingest/detect instances at 1x (10 FPS each) in one process: CPU per instance and schedule p99."""
    from aitax.emulation.profile import paper_profile
    from aitax.emulation.workers import EmulatedCompute, run_producer_instances
    from aitax.pipeline.schema import Topics
    from aitax.pipeline.transport import make_producer
    from aitax.stack import kafka
    from aitax.telemetry.sinks import NullSink

    print("3. emulated ingest/detect instances in one process at 1x (10 FPS, 1 face/frame each):")
    print(f"   {'instances':>9}{'cpu ms/s each':>15}{'schedule p50 ms':>17}{'p99 ms':>9}{'faces/s':>9}")
    best = 0
    for instances in (2, 5, 10, 25, 50, 100):
        topics = Topics.with_prefix(f"bench-sched-{time.time_ns()}-")
        kafka.ensure_topics(config, config.topics(topics))
        try:
            recorder = _ScheduleRecorder(make_producer("confluent-kafka", config.bootstrap_servers))
            cpu, deadline = time.process_time(), time.monotonic() + seconds
            stats = run_producer_instances(instances, "sched", EmulatedCompute(paper_profile(), 1.0), recorder,
                                           NullSink(), "bench", topics,
                                           lambda deadline=deadline: time.monotonic() >= deadline)
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
    from aitax.common.paper import PAPER
    from aitax.emulation.profile import paper_profile
    from aitax.emulation.workers import EmulatedFaceFinder
    from aitax.telemetry.timing import Stopwatch

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


def _numbers(text: str) -> list[int]:
    return [int(v) for v in text.split(",")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds per throughput run (default 20)")
    parser.add_argument("--instances", type=_numbers, default=[4, 16, 64],
                        help="emulated producer and identify instances, each (default 4,16,64)")
    parser.add_argument("--processes", type=_numbers, default=[1, 2],
                        help="OS processes per side: the packings to compare (default 1,2)")
    parser.add_argument("--keying", type=lambda text: text.split(","), default=["none", "face"],
                        help="faces keyed by: none (sticky, as the tools' records) and/or face (default none,face)")
    parser.add_argument("--only", choices=("end-to-end", "costs"), help="run one part only")
    args = parser.parse_args()

    import os

    from aitax.stack.stack import running_config, use_local_identity

    config = running_config()
    use_local_identity(None)  # the benchmark is the operator: the admin principal
    print(f"load {os.getloadavg()[0]:.2f}; {config.brokers} brokers, RF {config.replication_factor}, "
          f"37.3 kB faces\n")
    if args.only in (None, "end-to-end"):
        end_to_end(config, args.seconds, args.instances, args.processes, args.keying)
    if args.only in (None, "costs"):
        own_costs(config, min(args.seconds, 8))
        instances_per_process(config, min(args.seconds, 8))
        sleep_accuracy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
