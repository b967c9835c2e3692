"""Property tests: fetch ranges against a model of the log (a list per partition)."""

from __future__ import annotations

import itertools
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakelog.platform import Broker, Record
from lakelog.platform.errors import OffsetOutOfRange
from lakelog.settings import Settings

PARTITIONS = 3
_names = itertools.count()

batch = st.lists(
    st.tuples(st.integers(0, PARTITIONS - 1), st.binary(min_size=0, max_size=40)), min_size=1, max_size=30
)
query = st.tuples(
    st.integers(0, PARTITIONS - 1), st.integers(-2, 130), st.integers(1, 50),
    st.one_of(st.none(), st.integers(1, 400)),
)


def _check(broker: Broker, batches: list, queries: list, via_cache: bool) -> None:
    topic = f"prop-{next(_names)}"
    broker.create_topic(topic, PARTITIONS)
    model: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    for records in batches:
        result = broker.produce(topic, [Record(v, partition=p) for p, v in records])
        for (p, value), (rp, offset, _) in zip(records, result.records()):
            assert (rp, offset) == (p, len(model[p]))
            model[p].append(value)
    reader = broker if via_cache else Broker(broker.settings)  # a fresh node reads files, not its cache
    try:
        for p, offset, max_records, max_bytes in queries:
            expected = model[p]
            if offset < 0 or offset > len(expected):
                with pytest.raises(OffsetOutOfRange):
                    reader.fetch(topic, p, offset, max_records, max_bytes)
                continue
            got = [(r.offset, r.value) for r in reader.fetch(topic, p, offset, max_records, max_bytes)]
            want = list(enumerate(expected))[offset:offset + max_records]
            if max_bytes is not None and want:
                total, keep = 0, 0
                for _, value in want:
                    total += len(value)
                    if total > max_bytes and keep > 0:
                        break
                    keep += 1
                want = want[:keep]
            assert got == want
    finally:
        if reader is not broker:
            reader.close()


@pytest.fixture(scope="module")
def local_prop_broker():
    with tempfile.TemporaryDirectory() as tmp:
        broker = Broker(Settings(root=tmp, linger_ms=1))
        yield broker
        broker.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(batch, min_size=1, max_size=5), queries=st.lists(query, min_size=1, max_size=12),
       via_cache=st.booleans())
def test_fetch_matches_model_local(local_prop_broker: Broker, batches, queries, via_cache) -> None:
    _check(local_prop_broker, batches, queries, via_cache)


@pytest.fixture(scope="module")
def s3_prop_broker(s3):
    broker = Broker(Settings(root=s3.root(), storage=s3.options, linger_ms=1))
    yield broker
    broker.close()


@pytest.mark.s3
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(batch, min_size=1, max_size=4), queries=st.lists(query, min_size=1, max_size=10),
       via_cache=st.booleans())
def test_fetch_matches_model_s3(s3_prop_broker: Broker, batches, queries, via_cache) -> None:
    _check(s3_prop_broker, batches, queries, via_cache)
