"""Shared fixtures. Integration tests run against the REAL local stack, brought up once per session.

If a stack is already running (a developer's `make up`), the session reuses it and leaves it running;
otherwise it starts one and stops it at the end.
"""

from __future__ import annotations

import contextlib
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
    local_stack.use_local_identity(None)  # the tests are the operator: the admin principal
    yield config
    if not was_running:
        local_stack.down()


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> Iterator[str]:
    """A name no other test uses: topics, groups and indices stay isolated. The test's topics are deleted after
    it: a stack that keeps every test's partitions spends its CPU on them (1,500 stale partitions made the
    brokers burn 1.7 cores at 80 faces/s)."""
    name = f"test-{request.node.name[:40].replace('[', '-').replace(']', '')}-{uuid.uuid4().hex[:8]}".lower()
    yield name
    _delete_topics_named(name)


def _delete_topics_named(name: str) -> None:
    from aitax.stack import stack as local_stack

    config = local_stack.current_config()
    if config is None:
        return
    from confluent_kafka.admin import AdminClient

    from aitax.stack.kafka import admin_settings

    admin = AdminClient(admin_settings(config))
    try:
        names = [topic for topic in admin.list_topics(timeout=10).topics if name in topic]
    except Exception:  # brokers a test stopped: nothing to tidy
        return
    for future in (admin.delete_topics(names).values() if names else ()):
        with contextlib.suppress(Exception):  # already gone
            future.result(30)
