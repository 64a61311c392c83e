"""One process at a time on a shared folder: an exclusive lock file that a second process waits for, saying so."""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Callable, Iterator
from pathlib import Path


@contextlib.contextmanager
def exclusive(path: Path, waiting: str, log: Callable[[str], None] = print) -> Iterator[None]:
    """Hold the lock file `path` (made when missing); when another process holds it, log `waiting` once and wait."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(waiting)
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
