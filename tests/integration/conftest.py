"""Inputs the integration modules share, made once per session: the enrolled gallery and a generated video."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

AITAX = [sys.executable, "-m", "aitax.cli"]


@pytest.fixture(scope="session")
def gallery(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The 5-celebrity train split enrolled once per session, with its threshold calibrated."""
    path = tmp_path_factory.mktemp("gallery") / "gallery.npz"
    result = subprocess.run([*AITAX, "enroll", "--out", str(path)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "enrolled" in result.stdout
    assert "calibrated: threshold" in result.stdout  # on the packaged calibration strangers, by default
    return path


@pytest.fixture(scope="session")
def video(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 12 s generated video of the enrolled people (seed 3), with its ground truth."""
    path = tmp_path_factory.mktemp("video") / "video.mp4"
    result = subprocess.run([*AITAX, "make-video", "--out", str(path), "--seconds", "12", "--seed", "3"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    return path
