"""kwire.aio's connection setup given up at the worst moment: between the TCP
connect and the transport's first loop turn (a client closing, or the setup
deadline passing, while ``create_connection(sock=...)`` runs). asyncio's
transport registers its reader a loop turn after it is made, so a socket
closed under it leaves the loop registering a dead fd ("Bad file
descriptor" from the loop's exception handler) or, worse, an fd another
connection already reuses. The server is a plain loopback listener: only the
client's socket lifecycle is under test."""

from __future__ import annotations

import asyncio
import socket

import pytest

from kwire.aio.net import AioConnection
from kwire.config import COMMON, resolve


@pytest.fixture
def listener():
    srv = socket.create_server(("127.0.0.1", 0))
    yield srv.getsockname()[1]
    srv.close()


async def _given_up_after_connect(port: int, how: str, turns: int) -> list:
    loop = asyncio.get_running_loop()
    errors = []
    loop.set_exception_handler(lambda _loop, ctx: errors.append(ctx))
    cfg = resolve(COMMON, {"bootstrap_servers": f"127.0.0.1:{port}"})
    conn = AioConnection(0, "127.0.0.1", port, cfg, loop=loop, on_event=lambda: None)
    done = asyncio.Event()
    held = []

    def give_up(n: int) -> None:              # n loop turns after the transport task was made
        if n:
            loop.call_soon(give_up, n - 1)
            return
        held.append(conn.sock)
        if how == "close":
            conn.close(quiet=True)
        else:
            conn._drop_socket()
        done.set()

    start = conn._start_transport

    def started(sock: socket.socket) -> None:
        start(sock)
        give_up(turns)

    conn._start_transport = started
    conn.connect()
    await asyncio.wait_for(done.wait(), 10)
    sock = held[0]
    fd = sock.fileno() if sock is not None else -1
    for _ in range(20):
        await asyncio.sleep(0)
    await asyncio.sleep(0.05)
    assert fd == -1 or fd not in loop._selector.get_map(), "a reader is left on the given-up socket's fd"
    assert sock is None or sock.fileno() == -1, "the socket of the given-up setup stays open"
    return errors


@pytest.mark.parametrize("how", ["close", "drop"])
@pytest.mark.parametrize("turns", [0, 1, 2, 3])
def test_setup_given_up_during_transport_creation_leaves_no_dead_reader(listener, how, turns):
    errors = asyncio.run(_given_up_after_connect(listener, how, turns))
    assert errors == [], [e.get("message") for e in errors] + [repr(e.get("exception")) for e in errors]
