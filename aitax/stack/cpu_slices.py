"""CPU slices of a testbed (cgroup v1 `cpu`, CFS bandwidth): each broker in one of its own and the load (the
emulator's or the stages' processes) in another, so that a client's CPU is never read as the brokers' and a broker
runs out of its design's cores, not of whatever the machine has left. Named per port base, so that stacks side by
side keep theirs apart. Needs root.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from aitax.stack.config import StackConfig

CPU = Path("/sys/fs/cgroup/cpu")
PERIOD_US = 100_000


def slice_dir(config: StackConfig, name: str) -> Path:
    return CPU / f"aitax-{config.port_base}" / name


def broker_slice(node_id: int) -> str:
    return f"broker-{node_id}"


CLIENTS = "clients"
# The brokers' JIT compilers, outside the design's cores: a real broker compiles its hot paths in seconds at 168
# times the load and then runs for days, while at a design's 1/168 it compiled for minutes inside a third of a core
# (its compiler threads took a third of the brokers' CPU at 4x, six minutes after start: docs/testbed.md).
COMPILERS = "jit-compilers"
COMPILER_THREADS = ("C1 CompilerThre", "C2 CompilerThre")  # HotSpot's, as /proc cuts them to 15 characters
PROC = Path("/proc")


def create(config: StackConfig, name: str, cores: float | None) -> Path:
    """Slice `name` of `cores` (None: not limited yet)."""
    path = slice_dir(config, name)
    path.mkdir(parents=True, exist_ok=True)
    limit(config, name, cores)
    return path


def limit(config: StackConfig, name: str, cores: float | None) -> None:
    path = slice_dir(config, name)
    (path / "cpu.cfs_period_us").write_text(f"{PERIOD_US}\n")
    (path / "cpu.cfs_quota_us").write_text(f"{-1 if cores is None else max(1000, round(cores * PERIOD_US))}\n")


def limit_brokers(config: StackConfig) -> None:
    """Each broker held to its design's cores (a testbed's; nothing without one)."""
    if config.testbed is not None:
        for node_id in config.node_ids:
            limit(config, broker_slice(node_id), config.testbed.broker_cpu_cores)


@contextmanager
def brokers_unlimited(config: StackConfig) -> Iterator[None]:
    """The brokers out of their slices for a while, then back in them (nothing without a testbed).

    A JVM compiles its hot paths once it has run them some ten thousand times. At a design's 1/168 of the load and
    of the cores, that takes 168 times longer than on the real node: minutes of a warm-up at a third of a core, while
    the real broker is warm in seconds and then runs for days. Warmed out of their slices, the brokers are measured
    in them as the real ones run: warm."""
    if config.testbed is None:
        yield
        return
    for node_id in config.node_ids:
        limit(config, broker_slice(node_id), None)
    try:
        yield
    finally:
        limit_brokers(config)


def compiler_threads(pid: int) -> list[int]:
    """The thread ids of a JVM's JIT compiler threads (none once it has exited)."""
    found = []
    try:
        tasks = list((PROC / str(pid) / "task").iterdir())
    except OSError:
        return []
    for task in tasks:
        try:
            if (task / "comm").read_text().strip().startswith(COMPILER_THREADS):
                found.append(int(task.name))
        except OSError:
            continue
    return found


def threads_cpu_s(pid: int, tids: list[int]) -> float:
    """CPU seconds (user + system) these threads of `pid` used so far."""
    ticks = os.sysconf("SC_CLK_TCK")
    used = 0.0
    for tid in tids:
        try:
            fields = (PROC / str(pid) / "task" / str(tid) / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        used += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime: fields 14 and 15 of stat(5)
    return used


def move_compilers(config: StackConfig, pid: int) -> list[int]:
    """A broker JVM's compiler threads into the unlimited `COMPILERS` slice (cgroup v1 places threads one by one);
    returns their ids."""
    tids = compiler_threads(pid)
    for tid in tids:
        (slice_dir(config, COMPILERS) / "tasks").write_text(f"{tid}\n")
    return tids


def place(config: StackConfig, name: str, pid: int) -> None:
    """Move `pid` (every thread of it; its later children and threads follow) into slice `name`."""
    (slice_dir(config, name) / "cgroup.procs").write_text(f"{pid}\n")


def throttled_s(config: StackConfig, name: str) -> float:
    """Seconds the slice's processes were held back by its quota so far (0 where there is no slice)."""
    try:
        stat = (slice_dir(config, name) / "cpu.stat").read_text()
    except OSError:
        return 0.0
    fields = dict(line.split() for line in stat.splitlines())
    return int(fields.get("throttled_time", 0)) / 1e9


def remove_all(config: StackConfig) -> None:
    """Every slice of this stack, once its processes are gone (they go back to the root group first)."""
    parent = CPU / f"aitax-{config.port_base}"
    if not parent.is_dir():
        return
    for child in parent.iterdir():
        if child.is_dir():
            for pid in (child / "cgroup.procs").read_text().split():
                (CPU / "cgroup.procs").write_text(f"{pid}\n")
            os.rmdir(child)
    os.rmdir(parent)
