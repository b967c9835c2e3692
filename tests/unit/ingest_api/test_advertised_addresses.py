"""app.py: the addresses a node advertises (to the other nodes, to Kafka clients) are ones they can reach:
the bound address, or the host name's address when configured to bind every interface."""

from __future__ import annotations

import socket

import pytest

from lakelog.ingest_api.app import kafka_address, own_address, reachable_host
from lakelog.settings import Settings


@pytest.mark.parametrize("host", ["127.0.0.1", "10.1.2.3", "::1", "node-7.internal"])
def test_a_bound_address_is_advertised_as_it_is(host: str) -> None:
    assert reachable_host(host) == host


@pytest.mark.parametrize("host", ["0.0.0.0", "::", ""])
def test_every_interface_is_advertised_as_the_host_names_address(host: str) -> None:
    assert reachable_host(host) == socket.gethostbyname(socket.gethostname())


def test_defaults_are_loopback_and_the_kafka_listener_follows_the_http_host() -> None:
    settings = Settings(port=8081, kafka_port=9093)
    assert (own_address(settings), kafka_address(settings)) == ("http://127.0.0.1:8081", "127.0.0.1:9093")
    assert kafka_address(Settings(host="::1", kafka_port=9093)) == "[::1]:9093"
    assert kafka_address(Settings(kafka_port=9093, kafka_advertise="kafka.example:19092")) == "kafka.example:19092"
    assert kafka_address(Settings(kafka_port=-1)) is None  # no listener
