"""`aitax emulate --workload FILE --driver FILE`: the shipped files run as they say, a flag given overrides a file,
and a malformed file is one line naming the file and the field. The sweep itself is faked at its edge (the running
stack and `run_sweep`); the integration suite runs the shipped files on the real stack."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from aitax.cli import main
from aitax.emulation.sweep_files import driver_options, workload_options

ROOT = Path(__file__).resolve().parents[2]
WORKLOADS = sorted((ROOT / "benchmarks" / "workloads").glob("*.yaml"))
DRIVERS = sorted((ROOT / "benchmarks" / "drivers").glob("*.yaml"))


@pytest.fixture
def swept(monkeypatch: pytest.MonkeyPatch) -> list:
    """The SweepSpec each `aitax emulate` would run, on a running stack of 3 brokers."""
    specs: list = []
    monkeypatch.setattr("aitax.stack.stack.running_config", lambda: SimpleNamespace(brokers=3))
    monkeypatch.setattr("aitax.emulation.sweep.run_sweep", lambda spec, config, out=None: specs.append(spec))
    monkeypatch.setattr("aitax.commands.emulation._print_sweep", lambda sweep, plots, html: None)
    return specs


def test_the_shipped_workload_and_driver_files_are_valid() -> None:
    assert len(WORKLOADS) >= 3 and len(DRIVERS) >= 3
    for path in WORKLOADS:
        assert workload_options(path)["workload"] in ("face-recognition", "object-detection")
    for path in DRIVERS:
        assert driver_options(path)["kafka_client"] in ("confluent-kafka", "kafka-python")


def test_a_sweep_takes_the_files_values_and_a_flag_given_overrides_them(swept: list) -> None:
    workload = ROOT / "benchmarks/workloads/object-detection.yaml"
    driver = ROOT / "benchmarks/drivers/kafka-batched.yaml"
    assert main(["emulate", "--workload", str(workload), "--driver", str(driver), "--factors", "1,2"]) == 0
    assert main(["emulate", "--workload", str(workload), "--driver", str(driver), "--consumers", "3",
                 "--max-batch", "4", "--duration", "12"]) == 0
    from_files, overridden = swept
    assert from_files.load.profile == "object-detection" and from_files.plan.factors == [1.0, 2.0]
    assert from_files.load.application == "object-detection"
    assert (from_files.load.producers, from_files.load.consumers, from_files.load.duration_s) == (1, 24, 30.0)
    assert (from_files.driver.max_batch, from_files.driver.max_queue_delay_ms) == (32, 10.0)
    assert (overridden.load.producers, overridden.load.consumers, overridden.load.duration_s) == (1, 3, 12.0)
    assert (overridden.driver.max_batch, overridden.driver.max_queue_delay_ms) == (4, 10.0)


def test_without_files_the_flags_defaults_stand(swept: list) -> None:
    assert main(["emulate", "--factors", "1"]) == 0
    assert (swept[0].load.producers, swept[0].load.consumers, swept[0].driver.max_batch) == (4, 8, None)


@pytest.mark.parametrize(("option", "text", "problem"), [
    ("--workload", "producers: none\n", r"w.yaml: producers 'none': "),
    ("--workload", "application: face-recogniton\n", r"w.yaml: application: .*face-recogniton"),
    ("--workload", "factor: 4\n", r"w.yaml: factor: not in an emulate workload: the sweep's plan sets it"),
    ("--workload", "video: a.mp4\n", r"w.yaml: video: not in an emulate workload"),
    ("--workload", "consumers: 8\nconsumer_count: 3\n", r"w.yaml: consumer_count 3: extra inputs are not permitted"),
    ("--workload", "producers: [4\n", r"w.yaml: not valid YAML at line 2"),
    ("--driver", "kafka_client: kafka-go\n", r"w.yaml: kafka_client 'kafka-go': "),
    ("--driver", "send: sample:10\n", r"w.yaml: send 'sample:10': an emulated track's thumbnails follow"),
    ("--driver", "- a list\n", r"w.yaml: a driver file is a mapping of fields, not list"),
])
def test_a_malformed_file_is_one_line_naming_the_file_and_field(swept: list, tmp_path: Path, option: str,
                                                               text: str, problem: str,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    import re

    path = tmp_path / "w.yaml"
    path.write_text(text)
    assert main(["emulate", option, str(path)]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and re.search(problem, error), error
    assert not swept


def test_a_workload_that_is_neither_an_application_nor_a_file_is_named(swept: list,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["emulate", "--workload", "face-recogniton"]) == 2
    assert "--workload face-recogniton: neither an application" in capsys.readouterr().err
