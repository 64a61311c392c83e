"""Image builds take turns per store: `make test` builds in the background while the cluster tests' own build waits
for it and then finds every image built."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from aitax.cluster import images
from tests.locks import held_elsewhere

HOLD_S = 2.0


def test_a_second_build_waits_for_the_one_using_the_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AITAX_IMAGES_HOME", str(tmp_path))
    built: list[str] = []
    monkeypatch.setattr(images, "build_base", lambda base, log: None)  # cached
    monkeypatch.setattr(images, "build_image", lambda image: built.append(image.reference) or images.BuildReport(
        image.reference, 0.0, 0, "id"))
    with held_elsewhere(tmp_path / "build.lock", HOLD_S):
        said: list[str] = []
        started = time.monotonic()
        images.build_all(["kafka"], None, log=said.append)
        waited = time.monotonic() - started
    assert said[0] == f"another build is using {tmp_path}; waiting for it ..."
    assert waited >= HOLD_S / 2  # built only once the holder let go
    assert built == [image.reference for image in images.IMAGES if image.folder == "kafka"]
