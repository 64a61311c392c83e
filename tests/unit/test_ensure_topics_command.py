"""`aitax cluster ensure-topics` (the chart's topics Job) reads each --topic as the local stack's TopicSpec, and a
bad one is a one-line error naming it before any broker is asked. The real cluster's topics Job runs it for real."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest

from aitax.commands.cluster import _topic_spec
from aitax.stack.config import StackConfig, TopicSpec


def test_a_topic_argument_is_the_local_stacks_spec() -> None:
    faces = next(spec for spec in StackConfig().topics() if spec.carries == "faces")
    settings = ",".join(f"{key}={value}" for key, value in faces.config.items())
    assert _topic_spec(f"{faces.name}:{faces.partitions}:faces:{settings}") == faces
    assert _topic_spec("probe:1:identities") == TopicSpec("probe", 1, {}, carries="identities")


@pytest.mark.parametrize("bad", ["faces", "faces:0:faces", "faces:x:faces", "faces:3:thumbnails",
                                 "faces:3:faces:retention.ms", ":3:faces"])
def test_a_bad_topic_argument_is_named(bad: str) -> None:
    with pytest.raises(click.BadParameter, match=f"'{bad}': give NAME:PARTITIONS:ROLE"):
        _topic_spec(bad)


def test_a_bad_topic_is_one_line_and_exit_2_before_any_broker_is_asked() -> None:
    result = subprocess.run([sys.executable, "-m", "aitax.cli", "cluster", "ensure-topics", "--bootstrap",
                             "127.0.0.1:1", "--topic", "faces:3:faces", "--topic", "dlq:3:deadletters"],
                            capture_output=True, text=True, timeout=60)
    lines = (result.stdout + result.stderr).strip().splitlines()
    assert result.returncode == 2, lines
    assert len(lines) == 1 and "--topic: 'dlq:3:deadletters': give NAME:PARTITIONS:ROLE" in lines[0], lines
