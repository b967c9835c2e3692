"""The node-to-node produce call: many clients' produce calls for one topic, partitioned by the node that
received them, sent to the topic's leader as one Arrow IPC stream; the answer is one result per call.

Request: the calls' rows one after the other (TOPIC_FILE_SCHEMA without offsets, plus `partition`), and
in the schema metadata, per call: rows, acks, the time left and the idempotent-producer fields.
Answer (JSON): per call, partitions, offsets and timestamps, or the error's type, code, message and retriability.

Also the relayed fetch (journal on, relay.py): the ask as JSON, the leader's records as Arrow IPC.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import orjson
import pyarrow as pa

from lakelog.platform import errors as core
from lakelog.platform.cluster.errors import RemoteError
from lakelog.platform.records import FetchResult, ProduceResult, ProducerBatch

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
    return orjson.dumps([_result_json(result) for result in results], option=orjson.OPT_SERIALIZE_NUMPY)


def decode_results(data: bytes, calls: Sequence[ForwardedCall]) -> list[ProduceResult | core.LakelogError]:
    answered = orjson.loads(data)
    if len(answered) != len(calls):
        raise ValueError(f"{len(answered)} results for {len(calls)} forwarded calls")
    return [_result(item, call) for item, call in zip(answered, calls)]


def _result_json(result: ProduceResult | core.LakelogError) -> dict:
    if isinstance(result, core.LakelogError):
        extra = {}
        if isinstance(result, core.OffsetOutOfRange):
            extra = {"log_start_offset": result.log_start_offset, "log_end_offset": result.log_end_offset}
        return {"error": type(result).__name__, "code": result.code, "message": result.message,
                "retriable": result.retriable, **extra}
    return {"partitions": result.partitions.astype(np.int32), "offsets": result.offsets.astype(np.int64),
            "timestamps": result.timestamps_ms.astype(np.int64), "duplicate": result.duplicate,
            "version": result.version}


def _result(item: dict, call: ForwardedCall) -> ProduceResult | core.LakelogError:
    if "error" in item:
        return error_from(item)
    # A retry's partitions are the first attempt's: an answered duplicate says where the records went.
    return ProduceResult(np.asarray(item["partitions"], dtype=np.int32), np.asarray(item["offsets"], dtype=np.int64),
                         np.asarray(item["timestamps"], dtype=np.int64), item["duplicate"], item["version"])


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
    def decode(cls, data: bytes) -> "FetchAsk":
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
