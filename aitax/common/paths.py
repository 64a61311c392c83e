"""Where aitax keeps everything it downloads, builds and runs: one ignored folder, `.aitax/` by default."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]  # aitax/common/paths.py


def aitax_home() -> Path:
    """The state folder: `$AITAX_HOME`, or `.aitax/` in the project checkout."""
    return Path(os.environ.get("AITAX_HOME", PROJECT_ROOT / ".aitax")).resolve()


def downloads_dir() -> Path:
    """Pinned artifacts (Maven jars, the Elasticsearch zip, model weights): kept by `make clean`."""
    return aitax_home() / "downloads"


def stack_dir() -> Path:
    """Data, logs, configs and PID files of the running local stack: removed by `make clean`."""
    return aitax_home() / "stack"
