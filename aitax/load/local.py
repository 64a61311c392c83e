"""A run's stage processes on this machine: the real stages its application describes (`runs.applications`:
Face Recognition's `ingest-detect` and `identify`, or `ingest` and `detect` apart in three stages; Object Detection's
`ingest` and `detect-objects`) or the emulated ones (`emulate-consumers`, `emulate-producers`), the way Deployments
run them on a cluster.

Consumers start first and report ready (their model loaded, their partitions assigned), so start-up is never
measured as broker wait; producers then offer the workload's load. Children report through the status channel
(`common.children`), never through their logs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from aitax.common import children
from aitax.common.daemons import poll_until
from aitax.common.errors import UserError
from aitax.pipeline.schema import DEFAULT_TOPICS, Topics
from aitax.runs.applications import Stage, application
from aitax.runs.results import Driver, Workload
from aitax.telemetry.latency import Timeline

READY_TIMEOUT_S = {"real": 180.0, "emulated": 60.0}  # real identify loads TensorFlow and FaceNet first
PRODUCER_SLACK_S = 120.0  # emulated producers end by themselves after the duration; past this they are stopped
STOP_TIMEOUT_S = 60.0
LAG_POLL_S = 0.5


def split(total: int, parts: int) -> list[int]:
    """`total` instances over at most `parts` processes, as evenly as they go."""
    parts = max(1, min(parts, total))
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


class LocalLoad:
    """One run's processes. `topic_prefix` gives an emulated run topics of its own. A run on the pipeline's own
    topics (every real run; an emulated one without a prefix) identifies in a group of its own (`GROUP-RUN`) that
    skips other runs' faces: the leftovers of an interrupted run are never this run's work."""

    def __init__(self, workload: Workload, driver: Driver, run_id: str, bootstrap: str, logs: Path, events: str,
                 topic_prefix: str = "", group: str = "identify", env: dict[str, str] | None = None) -> None:
        if topic_prefix and workload.mode == "real":
            raise UserError("a topic prefix is for emulated runs: the real stages use the pipeline's topics")
        self.workload, self.driver, self.run_id, self.bootstrap = workload, driver, run_id, bootstrap
        self.logs, self.env = logs, env
        self.application = application(workload.application)
        self.shares_topics = not topic_prefix
        self.group = f"{group}-{run_id}" if self.shares_topics else group
        # an emulated three-stage run's detect instances: a group of its own beside its topics (a real run's detect
        # processes use their stage's group, runs.applications)
        self.detect_group = f"detect-{group}"  # each group starts with its principal's name (stack.security)
        self.topics = Topics.with_prefix(topic_prefix) if topic_prefix else DEFAULT_TOPICS
        common = ["--bootstrap", bootstrap, "--events", events, "--kafka-client", driver.kafka_client]
        self.run_values = {"gallery": str(workload.gallery), "keying": driver.keying, "send": driver.send,
                           "max_queue_delay_ms": f"{driver.max_queue_delay_ms:g}",
                           "results_linger_ms": f"{driver.results_linger_ms:g}"}
        self.batching = ["--max-queue-delay-ms", self.run_values["max_queue_delay_ms"]]  # for the consuming stages
        # the emulated identify's largest batch, where the driver sets one
        self.max_batch = [] if driver.max_batch is None else ["--max-batch", str(driver.max_batch)]
        self.linger = ["--results-linger-ms", self.run_values["results_linger_ms"]]  # for identify
        if workload.mode == "emulated":  # (real identify takes the run id from each face it reads)
            common += ["--run-id", run_id, "--factor", f"{workload.factor:g}", "--profile", str(workload.profile),
                       "--metrics-port", "-1", "--topic-prefix", topic_prefix,
                       "--compute", workload.compute,
                       *(arg for curve in workload.accelerators for arg in ("--accelerator", curve))]
        self.common = common
        self.consumers: list[children.Child] = []
        self.producers: list[children.Child] = []
        self.detectors: list[children.Child] = []  # three stages: between the producers and the consumers
        self.killed: set[int] = set()  # pids a fault scenario killed on purpose: not failures

    @property
    def real(self) -> bool:
        """The application's own stages run. (The emulator replays every application on Face Recognition's loops
        and topics; only its profile differs.)"""
        return self.workload.mode == "real"

    @property
    def frames_through_kafka(self) -> bool:
        if self.real:
            return self.application.frames_through_kafka(self.workload.stages)
        return self.workload.stages == 3

    def readers(self) -> list[tuple[str, str, int]]:
        """(topic, who, how many) for each stage that consumes a topic, in the order a frame meets them."""
        w = self.workload
        if not self.real:
            detect = [(self.topics.frames, "emulated detect instances", w.producers)] if w.stages == 3 else []
            return [*detect, (self.topics.faces, "emulated identify instances", w.consumers)]
        _, middle, consumer = self.application.stages(w.stages)
        counted = [(middle, w.producers)] if middle else []
        return [(getattr(self.topics, stage.reads), f"{stage.command} processes", count)
                for stage, count in [*counted, (consumer, w.consumers)]]

    @property
    def consumed_topic(self) -> str:
        """What the consumers read: the records a run counts."""
        topic, _, _ = self.readers()[-1]
        return topic

    def check(self) -> None:
        """What can be checked before a process starts: files, brokers, partitions enough for the consumers."""
        from aitax.pipeline.transport.admin import partition_count, require_brokers

        if self.real:
            from aitax.pipeline.frames import open_video
            from aitax.pipeline.gallery import load_gallery

            needs_gallery = self.application.needs_gallery
            w = self.workload
            if (w.video is None and not w.cameras) or (w.gallery is None and needs_gallery):
                raise UserError(f"a real {self.application.title} workload needs a video or cameras"
                                + (" and a gallery" if needs_gallery else ""))
            if w.video is not None:
                open_video(w.video).release()
            for camera in w.cameras:  # refused credentials: one line before any process starts
                from aitax.pipeline.camera import check_access

                check_access(camera.source())
            if needs_gallery:
                load_gallery(Path(self.workload.gallery))
        require_brokers(self.bootstrap)
        for topic, who, count in self.readers():
            partitions = partition_count(self.bootstrap, topic)
            if not partitions and topic == self.topics.frames:
                raise UserError(f"no {topic} topic on {self.bootstrap} (the local stack creates it for a run that "
                                "sends frames through Kafka)")
            if partitions and count > partitions:
                # A consumer beyond the partition count gets none: it would never report ready.
                raise UserError(f"{count} {who}: the {topic} topic has {partitions} partitions, so at most "
                                f"{partitions} can share it")

    def start_consumers(self) -> None:
        """Start the consumers and return once every one reported ready."""
        w = self.workload
        if self.real:
            _, middle, consumer = self.application.stages(w.stages)
            self.consumers = self._spawn_stage(consumer, w.consumers)
            if middle is not None:  # it consumes too: ready (model loaded, partitions) before frames flow
                self.detectors = self._spawn_stage(middle, w.producers)
        else:
            self.consumers = [self._spawn(f"consumers-{i}", [
                "emulate-consumers", "--instances", str(n), "--group", self.group, *self.batching, *self.max_batch,
                *self.linger,
                *(["--skip-other-runs"] if self.shares_topics else [])])
                              for i, n in enumerate(split(w.consumers, w.consumer_processes))]
            if w.stages == 3:  # one emulated detect instance per stream, as the real run has one detect process each
                self.detectors = [self._spawn(f"detectors-{i}", [
                    "emulate-detectors", "--instances", str(n), "--group", self.detect_group, "--keying",
                    self.driver.keying, *self.batching])
                    for i, n in enumerate(split(w.producers, w.producer_processes))]
        children.wait_reported(self.consumers + self.detectors, children.READY, READY_TIMEOUT_S[w.mode],
                               f"{w.mode} consumers")

    def start_producers(self) -> None:
        w = self.workload
        if self.real:
            producer, _, _ = self.application.stages(w.stages)
            self.producers = self._spawn_stage(producer, w.producers)
        else:
            self.producers = [self._spawn(f"producers-{i}", [
                "emulate-producers", "--instances", str(n), "--stream-prefix", f"s{i}", "--duration",
                f"{w.duration_s:g}", "--keying", self.driver.keying, "--stages", str(w.stages),
                *(["--in-flight", str(w.in_flight)] if w.in_flight else [])])
                for i, n in enumerate(split(w.producers, w.producer_processes))]
        # The run's clock starts once frames flow: a real stream first loads its detector (seconds), which would
        # otherwise come off the end of its window.
        children.wait_reported(self.producers, children.READY, READY_TIMEOUT_S[w.mode], f"{w.mode} producers")

    def _spawn(self, name: str, argv: list[str]) -> children.Child:
        return children.spawn(name, [*argv, *self.common], self.logs, self.env)

    def _spawn_stage(self, stage: Stage, count: int) -> list[children.Child]:
        """`count` processes of a real stage: a producer per stream reads the workload's video; a consumer joins
        its stage's group."""
        w = self.workload
        argv = [stage.command, "--run-id", self.run_id, *(arg.format(**self.run_values) for arg in stage.args)]
        if stage.reads is None and w.cameras:  # a camera paces itself and never ends
            return [self._spawn(f"{stage.command}-{i}", [*argv, *camera.arguments(), "--stream-id", f"cam-{i}"])
                    for i, camera in enumerate(w.cameras, start=1)]
        if stage.reads is None:
            return [self._spawn(f"{stage.command}-{i}", [*argv, "--video", str(w.video), "--stream-id", f"cam-{i}",
                                                         "--loop", "--pace", w.pace]) for i in range(1, count + 1)]
        argv += ["--group", self.group_of(stage)]
        return [self._spawn(f"{stage.command}-{i}", argv) for i in range(1, count + 1)]

    def group_of(self, stage: Stage) -> str:
        return self.group if stage.group_per_run else str(stage.group)

    def pids(self) -> dict[str, list[int]]:
        """The load's processes by role, as the resource verdict names whoever burnt the CPU."""
        if self.real:
            producer, middle, consumer = (stage and stage.command for stage in self.application.stages(
                self.workload.stages))
        else:
            producer, middle, consumer = "the emulator's producers", "detect", "the emulator's consumers"
        roles = {producer: [c.pid for c in self.producers], consumer: [c.pid for c in self.consumers]}
        return {**roles, middle: [c.pid for c in self.detectors]} if self.detectors else roles

    def alive(self) -> bool:
        """Every process still running (producers of an emulated run may have finished their duration)."""
        return all(c.running() or c.returncode == 0 for c in self.producers + self.detectors + self.consumers)

    def finish_producers(self, interrupted: bool) -> None:
        """End the offered load: emulated producers stop by themselves after the duration; real ones loop a
        video, so they are told to stop. Either way each flushes and waits for its acknowledgements."""
        if self.workload.mode == "emulated" and not interrupted:
            poll_until(lambda: not any(c.running() for c in self.producers),
                       self.workload.duration_s + PRODUCER_SLACK_S, LAG_POLL_S)
        children.stop(self.producers, max(STOP_TIMEOUT_S, self.workload.drain_s))
        if self.detectors:  # three stages: detection finishes the frames already sent, then flushes and commits
            group = self.group_of(self.application.stages(3)[1]) if self.real else self.detect_group
            self._wait_for_group(group, self.topics.frames, self.detectors, self.workload.drain_s)
            children.stop(self.detectors, STOP_TIMEOUT_S)

    def drain(self, timeout_s: float, on_lag: Callable[[int], None] = lambda _: None) -> int:
        """Wait for the consumers to catch up; returns the faces still not identified. One consumer dying does not
        end the drain (the group gives its partitions to the others); all of them gone does."""
        group = self.group_of(self.application.consumer) if self.real else self.group
        return self._wait_for_group(group, self.consumed_topic, self.consumers, timeout_s, on_lag)

    def _wait_for_group(self, group: str, topic: str, members: list[children.Child], timeout_s: float,
                        on_lag: Callable[[int], None] = lambda _: None) -> int:
        from confluent_kafka import KafkaException

        from aitax.pipeline.transport.admin import group_lag

        backlog = [0]

        def caught_up() -> bool:  # or every member gone: nobody is left to catch up
            try:
                backlog[0] = group_lag(self.bootstrap, group, topic)
            except KafkaException:  # the brokers restarting (a fault scenario's): ask again, as a cluster phase does
                return False
            if backlog[0]:
                on_lag(backlog[0])
            return not backlog[0] or not any(c.running() for c in members)

        poll_until(caught_up, timeout_s, LAG_POLL_S)
        return backlog[0]

    def stop(self) -> list[str]:
        """Stop every process. One that does not exit within STOP_TIMEOUT_S of SIGINT (a consumer that cannot
        leave its group, say) is killed: after the drain that loses nothing measured, so it is a note, not a
        failure, and the next run's topics and group are its own."""
        killed = children.stop(self.producers + self.detectors + self.consumers, STOP_TIMEOUT_S)
        self.killed.update(child.pid for child in killed)
        return [f"{child.name} did not exit within {STOP_TIMEOUT_S:.0f} s of SIGINT and was killed "
                f"(log {child.log}: {child.tail(1)})" for child in killed]

    def failures(self) -> list[str]:
        """'name: exit N, log PATH' for each process that failed (except those killed on purpose)."""
        return [f"{c.name}: exit {c.returncode}, log {c.log}: {c.tail(1)}"
                for c in children.failed(self.producers + self.detectors + self.consumers, self.killed)]

    def produced(self) -> tuple[int, float]:
        """Faces acknowledged and mean thumbnail bytes, from the summaries of the processes that produce faces; where
        one of them died before its summary, from the faces the brokers hold for the run (read back)."""
        sources = self.detectors or self.producers
        reported = all(child.has_reported(children.SUMMARY) for child in sources)
        if not reported and self.consumed_topic == self.topics.faces:  # (frames are counted by their summaries)
            from aitax.pipeline.transport.readback import read_face_topic

            held = read_face_topic(self.bootstrap, self.topics.faces, self.run_id)
            return len(held.faces), held.thumbnail_bytes_mean
        summaries = [status for child in sources for status in child.statuses(children.SUMMARY)]
        faces = sum(summary["acknowledged"] for summary in summaries)
        return faces, sum(summary["bytes"] for summary in summaries) / faces if faces else 0.0

    def identities(self) -> tuple[list[Timeline], int]:
        """The run's results (first of each unit) on the results' timeline, and the duplicates published, decoded
        as the application says: identities, or Object Detection's frames as their detections answered them."""
        from aitax.pipeline.transport.readback import read_identities

        decoder = self.application.decoder if self.real else None
        if decoder is None:
            results, duplicates = read_identities(self.bootstrap, self.run_id, topic=self.topics.identities)
        else:
            results, duplicates = read_identities(self.bootstrap, self.run_id, decode=decoder,
                                                  topic=getattr(self.topics, self.application.results))
        return [result.timeline for result in results], duplicates
