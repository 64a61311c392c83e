"""Another process holding a lock file, as a second aitax command would: the tests of commands that take turns."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def held_elsewhere(lock_file: Path, seconds: float) -> Iterator[None]:
    """A child process takes `lock_file` and lets go after `seconds`; the block runs once it holds it."""
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, sys, time\n"
        f"f = open({str(lock_file)!r}, 'a'); fcntl.flock(f, fcntl.LOCK_EX)\n"
        "print('held', flush=True); time.sleep(float(sys.argv[1]))\n"), str(seconds)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        yield
    finally:
        holder.wait(10)
