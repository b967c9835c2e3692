"""`kafka.isolation.level` of the lakelog source: read_committed (the default) and read_uncommitted read the
same records (the topic table holds only committed ones; the source's `latest` is the last stable offset);
any other value is refused, as Kafka refuses an unknown isolation level."""

from __future__ import annotations

import pytest

from lakelog.platform.errors import InvalidConfig
from lakelog.spark_jobs.options import SourceOptions

ROOT = {"lakelog.root": "/nowhere", "subscribe": "t"}


@pytest.mark.parametrize("level", [None, "read_committed", "read_uncommitted"])
def test_both_isolation_levels_are_taken(level: str | None) -> None:
    options = {**ROOT, **({"kafka.isolation.level": level} if level else {})}
    assert SourceOptions.parse(options, streaming=True) is not None


def test_an_unknown_isolation_level_is_refused() -> None:
    with pytest.raises(InvalidConfig, match="kafka.isolation.level"):
        SourceOptions.parse({**ROOT, "kafka.isolation.level": "read_maybe"}, streaming=True)
