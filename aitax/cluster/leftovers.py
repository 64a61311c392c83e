"""What a cluster can leave on the machine after its processes stopped, or after a crash: containerd shims and the
containers under them, processes started from its folder that no PID file tracks, mounts under its folder, the
nodes' network namespaces, links and cgroups. `found` lists them; `sweep` removes them."""

from __future__ import annotations

import subprocess
from collections.abc import Collection
from pathlib import Path

import psutil

from aitax.cluster.node import left_cgroups, left_links, left_namespaces


def shims(marker: str) -> list[psutil.Process]:
    """containerd shims whose command line holds `marker` (a node's containerd socket, or the nodes' folder)."""
    return [process for process in psutil.process_iter(["name", "cmdline"])
            if "containerd-shim" in (process.info["name"] or "") and marker in " ".join(process.info["cmdline"] or [])]


def strays(home: Path, tracked: Collection[int]) -> list[psutil.Process]:
    """Processes running from `home` that no PID file tracks (a crash, a hand-started one); shims are tracked."""
    known = {*tracked, *(s.pid for s in shims(str(home / "nodes")))}
    return [process for process in psutil.process_iter(["pid", "cmdline"])
            if process.info["pid"] not in known and str(home) in " ".join(process.info["cmdline"] or [])]


def mounts(home: Path) -> list[str]:
    prefix = str(home) + "/"
    return [m for m in (line.split()[1] for line in Path("/proc/mounts").read_text().splitlines())
            if m.startswith(prefix)]


def found(home: Path, running: list[str], tracked: Collection[int]) -> dict[str, list[str]]:
    """What of the cluster at `home` is still on the machine (empty lists after a clean `down`); `running` names
    its tracked processes still running."""
    return {
        "processes": running + [f"shim {s.pid}" for s in shims(str(home / "nodes"))]
        + [f"stray {s.pid}" for s in strays(home, tracked)],
        "mounts": mounts(home),
        "network namespaces": [str(n) for n in left_namespaces()],
        "network devices": left_links(),
        "cgroups": [str(c) for c in left_cgroups()],
    }


def sweep(home: Path, tracked: Collection[int]) -> None:
    leftover = shims(str(home / "nodes")) + strays(home, tracked)
    for process in leftover:
        process.kill()
    psutil.wait_procs(leftover, timeout=10)
    for mount in reversed(mounts(home)):
        subprocess.run(["umount", "-l", mount], capture_output=True)
    for netns in left_namespaces():
        subprocess.run(["umount", str(netns)], capture_output=True)
        netns.unlink(missing_ok=True)
    for link in left_links():  # the nodes' links went with their namespaces; the bridge is the machine's
        subprocess.run(["ip", "link", "delete", link], capture_output=True)
    for cgroup in left_cgroups():
        for directory in sorted(cgroup.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            if directory.is_dir():
                directory.rmdir()
        cgroup.rmdir()
