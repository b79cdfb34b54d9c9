"""kwire.devbroker.free_ports: the ports servers started by tests and the demo listen on.

A CI run once failed because a Kafka node was given the same port for two listeners:
ports asked for one at a time, each socket closed before the next was bound, can repeat.
"""
import socket

from kwire.devbroker import free_port, free_ports


def test_the_ports_are_distinct_and_bindable():
    for _ in range(50):
        ports = free_ports(12)
        assert len(set(ports)) == 12
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[0]))          # released again once chosen


def test_one_port():
    assert 0 < free_port() < 65536
