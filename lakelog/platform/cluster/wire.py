"""The node-to-node produce call: many clients' produce calls for one topic, partitioned by the node that
received them, sent to the topic's leader as one Arrow IPC stream; the answer is one result per call.

Request: the calls' rows one after the other (TOPIC_FILE_SCHEMA without offsets, plus `partition`), and
in the schema metadata, per call: rows, acks, the time left and the idempotent-producer fields.
Answer (JSON): per call its error (type, code, message, retriability) or its row count; the offsets and
timestamps of all calls together, encoded small (`encode_results`): a few bytes a record.

Also the relayed fetch (journal on, relay.py): the ask as JSON, the leader's records as Arrow IPC.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import orjson
import pyarrow as pa

from lakelog.platform import errors as core
from lakelog.platform.cluster.errors import RemoteError
from lakelog.platform.records import FetchResult, ProducerBatch, ProduceResult

CALLS_KEY = b"lakelog.calls"
FILE_COLUMNS = ["offset", "timestamp", "timestamp_type", "key", "value", "headers", "producer_id",
                "producer_epoch", "sequence"]


@dataclass
class ForwardedCall:
    table: pa.Table  # TOPIC_FILE_SCHEMA rows, offsets not assigned
    partitions: np.ndarray  # int32, one per row
    acks: int
    timeout_ms: int  # what is left of the caller's deadline
    producer: ProducerBatch | None = None


def encode_calls(calls: Sequence[ForwardedCall]) -> bytes:
    tables = [call.table.append_column("partition", pa.array(call.partitions, pa.int32())) for call in calls]
    whole = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    described = [{"rows": call.table.num_rows, "acks": call.acks, "timeout_ms": call.timeout_ms,
                  "producer": None if call.producer is None else
                  [call.producer.producer_id, call.producer.producer_epoch, call.producer.base_sequence]}
                 for call in calls]
    whole = whole.replace_schema_metadata({CALLS_KEY: orjson.dumps(described)})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, whole.schema) as writer:
        writer.write_table(whole)
    return sink.getvalue().to_pybytes()


def decode_calls(data: bytes) -> list[ForwardedCall]:
    """Raises ValueError on a body that is not a forwarded produce call."""
    try:
        whole = pa.ipc.open_stream(data).read_all()
        described = orjson.loads((whole.schema.metadata or {})[CALLS_KEY])
    except (pa.ArrowInvalid, KeyError, orjson.JSONDecodeError) as exc:
        raise ValueError(f"not a forwarded produce call: {exc}") from None
    if sum(call["rows"] for call in described) != whole.num_rows:
        raise ValueError("forwarded produce call: rows do not add up")
    partitions = whole.column("partition").to_numpy().astype(np.int32)
    records = whole.select(FILE_COLUMNS).replace_schema_metadata(None)
    calls, start = [], 0
    for call in described:
        rows = call["rows"]
        producer = None if call["producer"] is None else ProducerBatch(*call["producer"])
        calls.append(ForwardedCall(records.slice(start, rows), partitions[start:start + rows], call["acks"],
                                   call["timeout_ms"], producer))
        start += rows
    return calls


def encode_results(results: Sequence[ProduceResult | core.LakelogError]) -> bytes:
    """Per call its error; or 0, a success whose records went where the call sent them; or a duplicate's
    answer (the partitions of the first attempt) or one with a table version; the successes' offsets and
    timestamps once for all calls, small: offsets as the step from the previous offset of the same
    partition (a forwarded batch's records mostly land one after another, so the steps are runs of 1),
    timestamps as runs of equal values. The sender knows the partitions."""
    answers: list = []
    done = [r for r in results if not isinstance(r, core.LakelogError)]
    for result in results:
        if isinstance(result, core.LakelogError):
            answers.append(_error_json(result))
        else:
            plain = not result.duplicate and result.version == -1
            answers.append(0 if plain else {"duplicate": result.duplicate, "version": result.version,
                                            "partitions": result.partitions})
    body: dict = {"calls": answers}
    if done:
        partitions = np.concatenate([r.partitions for r in done]).astype(np.int32)
        offsets = np.concatenate([r.offsets for r in done]).astype(np.int64)
        body["steps"] = _runs(_steps(partitions, offsets))
        body["timestamps"] = _runs(np.concatenate([r.timestamps_ms for r in done]).astype(np.int64))
    return orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY)


def decode_results(data: bytes, calls: Sequence[ForwardedCall]) -> list[ProduceResult | core.LakelogError]:
    body = orjson.loads(data)
    answered = body["calls"]
    if len(answered) != len(calls):
        raise ValueError(f"{len(answered)} results for {len(calls)} forwarded calls")
    # A retry's partitions are the first attempt's: an answered duplicate says where the records went.
    partitions = [np.asarray(item["partitions"] if item else call.partitions, dtype=np.int32)
                  for item, call in zip(answered, calls) if not _is_error(item)]
    if not partitions:
        return [error_from(item) for item in answered]
    every = np.concatenate(partitions)
    offsets = _offsets(every, _expand(body["steps"]))
    timestamps = _expand(body["timestamps"])
    out: list[ProduceResult | core.LakelogError] = []
    start = 0
    for item, partition in zip(answered, _partitions_per_answer(answered, partitions)):
        if partition is None:
            out.append(error_from(item))
            continue
        end = start + len(partition)
        out.append(ProduceResult(partition, offsets[start:end], timestamps[start:end],
                                 bool(item and item["duplicate"]), item["version"] if item else -1))
        start = end
    return out


def _is_error(item: int | dict) -> bool:
    return isinstance(item, dict) and "error" in item


def _partitions_per_answer(answered: list, partitions: list[np.ndarray]) -> Iterator[np.ndarray | None]:
    """Each answer's partitions (None for an error), in the order of the answers."""
    successes = iter(partitions)
    for item in answered:
        yield None if _is_error(item) else next(successes)


def _steps(partitions: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Each offset less the previous offset of its partition (a partition's first: the offset itself)."""
    order = np.argsort(partitions, kind="stable")
    ordered, stepped = partitions[order], offsets[order].copy()
    first = np.ones(len(ordered), dtype=bool)
    first[1:] = ordered[1:] != ordered[:-1]
    stepped[~first] = np.diff(offsets[order])[~first[1:]]
    out = np.empty_like(stepped)
    out[order] = stepped
    return out


def _offsets(partitions: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """`_steps` undone."""
    order = np.argsort(partitions, kind="stable")
    ordered, stepped = partitions[order], steps[order]
    first = np.ones(len(ordered), dtype=bool)
    first[1:] = ordered[1:] != ordered[:-1]
    summed = np.cumsum(stepped)
    group = np.cumsum(first) - 1
    starts = np.flatnonzero(first)
    ordered_offsets = summed - (summed[starts] - stepped[starts])[group]
    out = np.empty_like(ordered_offsets)
    out[order] = ordered_offsets
    return out


def _runs(values: np.ndarray) -> dict | np.ndarray:
    """Runs of equal values, [values, lengths], where that is shorter than the values themselves."""
    change = np.ones(len(values), dtype=bool)
    change[1:] = values[1:] != values[:-1]
    starts = np.flatnonzero(change)
    if 2 * len(starts) >= len(values):
        return values
    return {"values": values[starts], "lengths": np.diff(np.append(starts, len(values)))}


def _expand(encoded: dict | list) -> np.ndarray:
    if isinstance(encoded, dict):
        return np.repeat(np.asarray(encoded["values"], dtype=np.int64), np.asarray(encoded["lengths"], dtype=np.int64))
    return np.asarray(encoded, dtype=np.int64)


def _error_json(error: core.LakelogError) -> dict:
    extra = {}
    if isinstance(error, core.OffsetOutOfRange):
        extra = {"log_start_offset": error.log_start_offset, "log_end_offset": error.log_end_offset}
    return {"error": type(error).__name__, "code": error.code, "message": error.message,
            "retriable": error.retriable, **extra}


def error_from(item: dict) -> core.LakelogError:
    """The owner's error as this node's type of the same name when there is one, else a RemoteError."""
    kind = getattr(core, item["error"], None)
    if isinstance(kind, type) and issubclass(kind, core.LakelogError) and kind.__init__ is core.LakelogError.__init__:
        return kind(item["message"])
    if kind is core.OffsetOutOfRange:
        return core.OffsetOutOfRange(item["message"], item["log_start_offset"], item["log_end_offset"])
    return RemoteError(item["message"], item["code"], item["retriable"])


# ---- relayed reads (journal on): a non-leader's fetch past its table's end, answered by the leader ----

FETCHED_KEY = b"lakelog.fetched"


@dataclass(frozen=True)
class FetchAsk:
    """A fetch a non-leader relays to the topic's leader (JSON body)."""

    partition: int
    offset: int
    max_records: int
    max_bytes: int | None
    timeout_ms: int  # how long the leader may wait for records (long poll)
    min_bytes: int = 1

    def encode(self) -> bytes:
        return orjson.dumps(self.__dict__)

    @classmethod
    def decode(cls, data: bytes) -> FetchAsk:
        """Raises ValueError on a body that is not a relayed fetch."""
        try:
            fields = orjson.loads(data)
            ask = cls(**fields)
        except (orjson.JSONDecodeError, TypeError) as exc:
            raise ValueError(f"not a relayed fetch: {exc}") from None
        ints = [ask.partition, ask.offset, ask.max_records, ask.timeout_ms, ask.min_bytes]
        if ask.max_bytes is not None:
            ints.append(ask.max_bytes)
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in ints):
            raise ValueError(f"relayed fetch: integers expected, got {fields}")
        return ask


def encode_fetched(result: FetchResult) -> bytes:
    """The leader's answer to a relayed fetch: its records (TOPIC_SCHEMA) as one Arrow IPC stream, the offsets
    around them in the schema metadata."""
    offsets = {"log_start_offset": result.log_start_offset, "high_watermark": result.high_watermark,
               "last_stable_offset": result.last_stable_offset}
    records = result.records.replace_schema_metadata({FETCHED_KEY: orjson.dumps(offsets)})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, records.schema) as writer:
        writer.write_table(records)
    return sink.getvalue().to_pybytes()


def decode_fetched(topic: str, partition: int, data: bytes) -> FetchResult:
    """Raises ValueError on an answer that is not a relayed fetch's."""
    try:
        records = pa.ipc.open_stream(data).read_all()
        offsets = orjson.loads((records.schema.metadata or {})[FETCHED_KEY])
        return FetchResult(topic, partition, records.replace_schema_metadata(None), int(offsets["log_start_offset"]),
                           int(offsets["high_watermark"]), int(offsets["last_stable_offset"]))
    except (pa.ArrowInvalid, KeyError, TypeError, orjson.JSONDecodeError) as exc:
        raise ValueError(f"not a relayed fetch's answer: {exc}") from None
