"""The stage harness: every stage process opens and closes in one order, whatever its loop does, and reports its
summary to its driver (Kafka faked at its edge: the integration and cluster suites run the real stages)."""

from __future__ import annotations

import json

import pytest

from aitax.common import children
from aitax.common.errors import UserError
from aitax.pipeline import stage_process as harness
from aitax.pipeline.runtime import StageSettings

SETTINGS = StageSettings(bootstrap="broker:9093", kafka_client="confluent-kafka", events="none", metrics_port=-1)


class _Client:
    def __init__(self, name: str, steps: list[str]) -> None:
        self.name, self.steps = name, steps

    def connect(self, topics: list[str]) -> dict[str, int]:
        self.steps.append(f"connect {self.name} {','.join(topics)}")
        return {topic: 6 for topic in topics}

    def close(self) -> None:
        self.steps.append(f"close {self.name}")


@pytest.fixture
def steps(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    done: list[str] = []

    def telemetry(settings, role, name):
        done.append(f"telemetry {role}")
        return _Client("sink", done), _Client("metrics", done)

    consumers = iter(range(10))
    monkeypatch.setattr(harness, "stop_flag", lambda: [False])  # pytest keeps its own SIGINT handler
    monkeypatch.setattr(harness, "open_telemetry", telemetry)
    monkeypatch.setattr(harness, "require_brokers",
                        lambda bootstrap, topics: done.append(f"topics {','.join(topics)}"))
    def consumer(client, bootstrap, group, topics):
        name = f"consumer{next(consumers)}"
        done.append(f"join {name} {group} {','.join(topics)}")
        return _Client(name, done)

    monkeypatch.setattr(harness, "make_consumer", consumer)
    monkeypatch.setattr(harness, "make_producer",
                        lambda client, bootstrap, idempotent, **extra: done.append(f"producer {idempotent} {extra}")
                        or _Client("producer", done))
    return done


def test_a_stage_opens_in_its_order_and_closes_the_producer_first_then_its_consumers_then_telemetry(
        steps: list[str]) -> None:
    with harness.stage_process(SETTINGS, "identify", "identify", reads=["faces"], writes=["identities"],
                               group="identify", consumers=2, idempotent=True, linger_ms=2.0) as process:
        steps.append("loop")
        assert process.partitions == {"identities": 6} and len(process.consumers) == 2 and not process.stop()
    assert steps[:7] == ["telemetry identify", "topics faces,identities", "join consumer0 identify faces",
                         "join consumer1 identify faces", "producer True {'linger_ms': 2.0}",
                         "connect producer identities", "loop"]
    assert steps[7] == "close producer"  # what the group commits must be durable first
    assert sorted(steps[8:10]) == ["close consumer0", "close consumer1"]  # side by side
    assert steps[10:] == ["close sink", "close metrics"]
    assert process.stuck == 0


def test_a_loop_that_raises_still_closes_everything(steps: list[str]) -> None:
    with pytest.raises(RuntimeError), harness.stage_process(SETTINGS, "ingest", "ingest", writes=["frames"]):
        raise RuntimeError("the loop failed")
    assert steps[-3:] == ["close producer", "close sink", "close metrics"]
    assert not any(step.startswith(("join", "close consumer")) for step in steps)  # no group: no consumer


def test_finish_reports_the_summary_and_fails_on_what_was_not_delivered(tmp_path, monkeypatch, capsys) -> None:
    status = tmp_path / "status"
    monkeypatch.setenv(children.STATUS_FILE_ENV, str(status))
    assert harness.finish("cam-1", {"frames": 3, "acknowledged": 3}, "3 frames") == 0
    with pytest.raises(UserError, match=r"^1 frame\(s\) not acknowledged by the brokers: \[\]$"):
        harness.finish("cam-1", {"frames": 1, "acknowledged": 0}, "1 frame", [], 1, "frame(s)")
    lines = [json.loads(line) for line in status.read_text().splitlines()]
    assert lines == [{"state": "summary", "frames": 3, "acknowledged": 3},
                     {"state": "summary", "frames": 1, "acknowledged": 0}]
    assert capsys.readouterr().out.splitlines() == ["cam-1: 3 frames", "cam-1: 1 frame"]
