from __future__ import annotations

from typing import Callable, Iterator

import pytest

from lakelog.platform import Broker
from lakelog.settings import Settings

BrokerFactory = Callable[..., Broker]


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def make_broker(request: pytest.FixtureRequest, tmp_path) -> Iterator[BrokerFactory]:
    """Opens brokers on one root (a local folder, or a prefix on the S3 endpoint); all closed at the end."""
    if request.param == "local":
        root, storage = str(tmp_path / "data"), {}
    else:
        s3 = request.getfixturevalue("s3")
        root, storage = s3.root(), s3.options
    opened: list[Broker] = []

    def factory(**overrides: object) -> Broker:
        broker = Broker(Settings(root=root, storage=storage, **{"linger_ms": 2, **overrides}))
        opened.append(broker)
        return broker

    factory.root = root  # type: ignore[attr-defined]
    factory.storage = storage  # type: ignore[attr-defined]
    yield factory
    for broker in opened:
        broker.close()


@pytest.fixture
def broker(make_broker: BrokerFactory) -> Broker:
    return make_broker()


@pytest.fixture
def local_broker(tmp_path) -> Iterator[Broker]:
    broker = Broker(Settings(root=str(tmp_path / "data"), linger_ms=2))
    yield broker
    broker.close()
