"""A testbed's CPU slices (cgroup v1's files faked in a folder): brokers held to their design's cores, and let out
of them for a warm-up, then back in whatever happened there."""

from __future__ import annotations

from pathlib import Path

import pytest

from aitax.stack import cpu_slices
from aitax.stack.config import StackConfig, Testbed

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


def _fake_jvm(proc: Path, pid: int, threads: dict[int, tuple[str, int, int]]) -> None:
    """/proc/<pid>/task/<tid>/{comm,stat} with each thread's name and user and system ticks."""
    for tid, (name, user, system) in threads.items():
        task = proc / str(pid) / "task" / str(tid)
        task.mkdir(parents=True)
        (task / "comm").write_text(f"{name}\n")
        # stat(5): pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime ...
        (task / "stat").write_text(f"{tid} ({name}) S 1 1 1 0 -1 0 0 0 0 0 {user} {system} 0 0 20 0 1 0\n")


def test_a_brokers_jit_compilers_leave_its_slice_and_their_cpu_is_counted_apart(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    proc, cgroups = tmp_path / "proc", tmp_path / "cgroup"
    monkeypatch.setattr(cpu_slices, "PROC", proc)
    monkeypatch.setattr(cpu_slices, "CPU", cgroups)
    ticks = os.sysconf("SC_CLK_TCK")
    _fake_jvm(proc, 4242, {4242: ("java", 5, 1), 4250: ("C2 CompilerThre", 30 * ticks, 2 * ticks),
                           4251: ("C1 CompilerThre", 4 * ticks, 0), 4260: ("data-plane-kafk", 9 * ticks, 3 * ticks)})
    assert sorted(cpu_slices.compiler_threads(4242)) == [4250, 4251]
    assert cpu_slices.threads_cpu_s(4242, [4250, 4251]) == pytest.approx(36.0)
    assert cpu_slices.compiler_threads(99) == [] and cpu_slices.threads_cpu_s(99, [1]) == 0.0  # gone
    config = StackConfig(testbed=TESTBED)
    cpu_slices.create(config, cpu_slices.COMPILERS, None)
    moved = cpu_slices.move_compilers(config, 4242)
    assert sorted(moved) == [4250, 4251]
    assert (cpu_slices.slice_dir(config, cpu_slices.COMPILERS) / "tasks").read_text() in ("4250\n", "4251\n")
