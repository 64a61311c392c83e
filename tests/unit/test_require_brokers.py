"""`require_brokers` fails fast (its client's 10 s timeout is not waited out) only when retrying cannot help:
every bootstrap address refuses a connection. Real sockets on this machine, no broker."""

from __future__ import annotations

import socket

import pytest

from aitax.common.errors import UserError
from aitax.pipeline.transport.admin import _nothing_listens, require_brokers


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # free again once closed: nothing listens there


def test_only_addresses_that_all_refuse_mean_nothing_listens() -> None:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        open_port = listening.getsockname()[1]
        refused = closed_port()
        assert _nothing_listens(f"127.0.0.1:{refused}")
        assert _nothing_listens(f"127.0.0.1:{refused},PLAINTEXT://127.0.0.1:{closed_port()}")
        assert not _nothing_listens(f"127.0.0.1:{refused},127.0.0.1:{open_port}")  # one broker may answer
        assert not _nothing_listens(f"127.0.0.1:{refused},no-such-host.invalid:9092")  # the client judges names


def test_brokers_that_refuse_are_one_line_naming_them_and_the_stack() -> None:
    address = f"127.0.0.1:{closed_port()}"
    with pytest.raises(UserError, match=rf"^Kafka brokers at {address} unreachable \(is `aitax stack up` running\?"):
        require_brokers(address, wait_s=0)
