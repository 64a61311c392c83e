"""Fixtures shared by the unit tests: the real model assets and one FaceNet embedder per session."""

from __future__ import annotations

import pytest

from aitax.pipeline.assets import Assets, ensure_assets


@pytest.fixture(scope="session")
def assets() -> Assets:
    return ensure_assets()


@pytest.fixture(scope="session")
def embedder(assets: Assets):
    """Built once: the model takes seconds to build and hundreds of MB to hold. FP32, the reference precision."""
    from aitax.pipeline.facenet import FaceEmbedder

    return FaceEmbedder(assets.facenet_weights, precision="fp32", runtime="tensorflow")
