"""``GatewayTCPServer.__init__`` is hypercorn's without two per-connection objects:
the send lock and the idle-timer task exist only once something uses them (TLS's own
loop, a canned answer). A hypercorn whose ``TCPServer.__init__`` sets anything else is
refused, as any other change to the internals the gateway overrides."""

from __future__ import annotations

from typing import Any

import trio
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import TrioSingleTask

from gateway import connections
from gateway.connections import GatewayTCPServer


def _server() -> GatewayTCPServer:
    args: Any = (object(), object(), object(), object(), object())
    return GatewayTCPServer(*args)


def test_the_lock_and_the_idle_task_are_made_on_first_use_only() -> None:
    server = _server()
    assert "send_lock" not in vars(server) and "idle_task" not in vars(server)
    lock, task = server.send_lock, server.idle_task
    assert isinstance(lock, trio.Lock) and isinstance(task, TrioSingleTask)
    assert server.send_lock is lock and server.idle_task is task  # made once


def test_every_attribute_hypercorn_sets_is_set_or_made() -> None:
    server = _server()
    for name in connections._init_attributes(TCPServer):
        assert getattr(server, name) is not None, name
    assert connections._init_attributes(TCPServer) == connections._TCPSERVER_ATTRIBUTES


def test_an_init_that_sets_more_is_seen() -> None:
    class Other:
        def __init__(self, a: int) -> None:
            self.a = a
            self.extra: list[int] = []  # annotated assignments count too
            self.declared: int  # a declaration alone does not
            b: int = 2
            self.c = self.d = b

    assert connections._init_attributes(Other) == {"a", "extra", "c", "d"}
