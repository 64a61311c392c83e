"""A testbed's CPU slices (cgroup v1's files faked in a folder): brokers held to their design's cores, and let out
of them for a warm-up, then back in whatever happened there."""

from __future__ import annotations

from pathlib import Path

import pytest

from stack import cpu_slices
from stack.config import StackConfig, Testbed

TESTBED = Testbed(design="paper", scale=168, broker_cpu_cores=1 / 3, client_cpu_cores=1.0, drive_bytes_per_s=6.5e6,
                  dirty_bytes_per_drive=1 << 29, link_mbit=595)


def quotas(config: StackConfig) -> list[str]:
    return [(cpu_slices.slice_dir(config, cpu_slices.broker_slice(n)) / "cpu.cfs_quota_us").read_text().strip()
            for n in config.node_ids]


def test_brokers_warm_out_of_their_slices_and_go_back_in_even_after_a_failure(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_slices, "CPU", tmp_path)
    config = StackConfig(testbed=TESTBED)
    for node_id in config.node_ids:
        cpu_slices.create(config, cpu_slices.broker_slice(node_id), None)
    cpu_slices.limit_brokers(config)
    assert quotas(config) == ["33333"] * 3  # a third of a core in every 100 ms period
    with pytest.raises(RuntimeError), cpu_slices.brokers_unlimited(config):
        assert quotas(config) == ["-1"] * 3
        raise RuntimeError("the warm-up's brokers could not create its topics")
    assert quotas(config) == ["33333"] * 3
    plain = StackConfig()  # the same stack without a testbed: its slices are not touched
    with cpu_slices.brokers_unlimited(plain):
        assert quotas(config) == ["33333"] * 3
