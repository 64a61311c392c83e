"""Shared fixtures. Integration tests run against the REAL local stack, brought up once per session.

If a stack is already running (a developer's `make up`), the session reuses it and leaves it running;
otherwise it starts one and stops it at the end.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from aitax.stack.config import StackConfig


@pytest.fixture(scope="session")
def stack() -> Iterator[StackConfig]:
    from aitax.stack import stack as local_stack

    running = local_stack.current_config()
    was_running = running is not None and all(p.is_running() for p in local_stack.processes(running))
    config = local_stack.up(running if was_running else StackConfig())
    yield config
    if not was_running:
        local_stack.down()


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> str:
    """A name no other test uses: topics, groups and indices stay isolated."""
    return f"test-{request.node.name[:40].replace('[', '-').replace(']', '')}-{uuid.uuid4().hex[:8]}".lower()
