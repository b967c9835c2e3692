"""Typed topics' produce against untyped: what `confluent.value.schema.validation=true` costs.

`lakelog serve --no-jobs`, its Kafka listener on a free port; the clients run in this process, on the same
machine. The same records (keys `key-<i>`, values of about 100 bytes in Confluent's wire format: a record of
six fields, Avro; the same fields as Protobuf's first message of a file) go to an untyped topic and to a topic
with `confluent.value.schema.validation=true` (each value checked against the registry at produce time, its
`value_typed` column decoded by the table commit behind the acknowledgement), in alternated rounds:

- through confluent-kafka's Producer (acks=all, idempotent, linger.ms=5), as users produce;
- through HTTP, Arrow IPC streams of 10,000 records POSTed by 4 clients.

A round's time runs from the first produce to the last acknowledgement; the server's CPU-seconds are counted
until it is idle again (the table commits behind the acknowledgements, which decode the typed column, are
in them). Ratios: typed over untyped records/s, against the issue's 0.5x target.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from typing import Callable

import fastavro
import httpx
import pyarrow as pa
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from lakelog.platform.schema_registry import protobuf_schema
from lakelog.platform.schema_registry.wire_format import framed
from rich.console import Console

from benchmarks.bench_kafka import Server
from benchmarks.common import Figure

SUITE = "typed"
PARTITIONS = 4
RECORDS = 210_000  # by each path to each topic, in ROUNDS alternated rounds
ROUNDS = 3  # each topic's path measured first in one of them
ARROW_BATCH, HTTP_CLIENTS = 10_000, 4
IN_FLIGHT = ARROW_BATCH * HTTP_CLIENTS
TARGET = 0.5
ARROW_STREAM = "application/vnd.apache.arrow.stream"
AVRO = {"type": "record", "name": "Trade", "namespace": "bench", "fields": [
    {"name": "id", "type": "long"}, {"name": "symbol", "type": "string"}, {"name": "price", "type": "double"},
    {"name": "qty", "type": "int"},
    {"name": "side", "type": {"type": "enum", "name": "Side", "symbols": ["BUY", "SELL"]}},
    {"name": "venue", "type": ["null", "string"], "default": None}]}
PROTO = """syntax = "proto3";
package bench;
message Trade {
  int64 id = 1;
  string symbol = 2;
  double price = 3;
  int32 qty = 4;
  enum Side { BUY = 0; SELL = 1; }
  Side side = 5;
  string venue = 6;
}
"""
Rows = list[dict]


def _rows(n: int) -> Rows:
    return [{"id": i, "symbol": f"SYM{i % 500:04d}", "price": 100.0 + (i % 1000) / 7, "qty": i % 10_000,
             "side": "BUY" if i % 2 else "SELL", "venue": f"exchange-venue-{i % 37:02d}-{'x' * 40}"}
            for i in range(n)]


def avro_values(schema_id: int, rows: Rows) -> list[bytes]:
    parsed = fastavro.parse_schema(AVRO)
    out = []
    for row in rows:
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, parsed, row)
        out.append(framed(schema_id, buffer.getvalue()))
    return out


def protobuf_values(schema_id: int, rows: Rows) -> list[bytes]:
    cls = protobuf_schema.parse(PROTO).message_class([0])
    prefix = protobuf_schema.write_indexes([0])
    return [framed(schema_id, prefix + cls(**{**row, "side": 0 if row["side"] == "BUY" else 1}).SerializeToString())
            for row in rows]


def register(url: str, subject: str, schema: str, schema_type: str) -> int:
    body: dict = {"schema": schema} if schema_type == "AVRO" else {"schema": schema, "schemaType": schema_type}
    answer = httpx.post(f"{url}/subjects/{subject}/versions", json=body, timeout=60)
    answer.raise_for_status()
    return int(answer.json()["id"])


def create_topics(bootstrap: str, typed: list[str], untyped: list[str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = [NewTopic(t, PARTITIONS, 1, config={"confluent.value.schema.validation": "true"}) for t in typed]
    new += [NewTopic(t, PARTITIONS, 1) for t in untyped]
    for future in admin.create_topics(new).values():
        future.result(60)


def kafka_produce(bootstrap: str, topic: str, values: list[bytes], first: int) -> tuple[float, int]:
    """The values (keys from `first` on) through one confluent-kafka Producer: (seconds, failed deliveries)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "queue.buffering.max.messages": IN_FLIGHT})
    producer.list_topics(topic, timeout=30)
    done, failed = [0], [0]

    def delivered(err, _msg) -> None:  # type: ignore[no-untyped-def]
        done[0] += 1
        if err is not None:
            failed[0] += 1

    produce, poll = producer.produce, producer.poll
    started = time.perf_counter()
    for i, value in enumerate(values):
        key = f"key-{first + i}".encode()
        while True:
            try:
                produce(topic, value, key, on_delivery=delivered)
                break
            except BufferError:
                poll(0.005)
        poll(0)
    while done[0] < len(values):
        producer.flush(1)
    return time.perf_counter() - started, failed[0]


def _arrow_body(keys: list[bytes], values: list[bytes]) -> bytes:
    table = pa.table({"key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary())})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def arrow_produce(url: str, topic: str, values: list[bytes], first: int) -> tuple[float, int]:
    """The values as Arrow IPC requests of ARROW_BATCH records, HTTP_CLIENTS clients: (seconds, failed requests)."""
    chunks = iter(range(0, len(values), ARROW_BATCH))
    lock = threading.Lock()
    errors = [0]

    def client() -> None:
        with httpx.Client(base_url=url, timeout=300) as c:
            while True:
                with lock:
                    start = next(chunks, None)
                if start is None:
                    return
                part = values[start:start + ARROW_BATCH]
                keys = [f"key-{first + start + j}".encode() for j in range(len(part))]
                response = c.post(f"/v1/topics/{topic}/records", content=_arrow_body(keys, part),
                                  headers={"content-type": ARROW_STREAM})
                if response.status_code != 200:
                    with lock:
                        errors[0] += 1

    threads = [threading.Thread(target=client) for _ in range(HTTP_CLIENTS)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - started, errors[0]


def _settle(server: Server, limit_s: float = 60.0) -> None:
    """Until the server is idle (under 10% of a core over half a second): its table commits are done."""
    deadline = time.monotonic() + limit_s
    last = server.cpu_seconds()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = server.cpu_seconds()
        if now - last < 0.05:
            return
        last = now


class Path:
    """One (client path, topic): records/s over its rounds, the server's CPU-seconds until idle."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.records = 0
        self.wall_s = self.server_s = 0.0
        self.errors = 0
        self.rates: list[float] = []

    def measure(self, server: Server, func: Callable[..., tuple[float, int]], *args: object) -> None:
        _settle(server)
        before = server.cpu_seconds()
        seconds, errors = func(*args)
        _settle(server)
        self.server_s += server.cpu_seconds() - before
        values = args[2]
        assert isinstance(values, list)
        self.records += len(values)
        self.wall_s += seconds
        self.errors += errors
        self.rates.append(len(values) / seconds)

    @property
    def rate(self) -> float:
        return self.records / self.wall_s

    @property
    def cpu_per_million(self) -> float:
        return self.server_s / self.records * 1e6

    def note(self) -> str:
        return (f"rounds {', '.join(f'{r:,.0f}' for r in self.rates)}; server {self.cpu_per_million:.1f} "
                f"CPU-s per million records (table commits included); {self.errors} errors")


def run(console: Console, quick: bool = False) -> list[Figure]:
    n = 50_000 if quick else RECORDS
    per_round = n // ROUNDS // ARROW_BATCH * ARROW_BATCH or ARROW_BATCH
    work = tempfile.mkdtemp(prefix="lakelog-bench-typed-")
    kinds = ("untyped", "avro", "protobuf")
    paths = {(via, kind): Path(f"{via} {kind}") for via in ("kafka", "http") for kind in kinds}
    load = os.getloadavg()[0]
    try:
        server = Server(os.path.join(work, "root"))
        try:
            topics = {(via, kind): f"{via}-{kind}" for via in ("kafka", "http", "warm") for kind in kinds}
            create_topics(server.bootstrap, [t for (_, k), t in topics.items() if k != "untyped"],
                          [t for (_, k), t in topics.items() if k == "untyped"])
            ids = {}
            for via in ("kafka", "http", "warm"):
                ids[(via, "avro")] = register(server.url, f"{via}-avro-value", json.dumps(AVRO), "AVRO")
                ids[(via, "protobuf")] = register(server.url, f"{via}-protobuf-value", PROTO, "PROTOBUF")
            rows = _rows(per_round * ROUNDS)
            avro_id, proto_id = ids[("kafka", "avro")], ids[("kafka", "protobuf")]
            assert all(ids[(v, "avro")] == avro_id and ids[(v, "protobuf")] == proto_id for v in ("http", "warm"))
            values = {"avro": avro_values(avro_id, rows), "protobuf": protobuf_values(proto_id, rows)}
            values["untyped"] = values["avro"]  # the very same bytes, to a topic that does not check them
            console.log(f"typed: values {sum(map(len, values['avro'])) / len(rows):.0f} bytes (Avro), "
                        f"{sum(map(len, values['protobuf'])) / len(rows):.0f} bytes (Protobuf)")
            for kind in kinds:
                warm = values[kind][:10_000]
                kafka_produce(server.bootstrap, topics[("warm", kind)], warm, 0)
                arrow_produce(server.url, topics[("warm", kind)], warm, 0)
            for r in range(ROUNDS):
                console.log(f"typed: round {r + 1} of {ROUNDS}: {per_round:,} records each path and topic")
                part = slice(r * per_round, (r + 1) * per_round)
                for kind in kinds[r % len(kinds):] + kinds[:r % len(kinds)]:  # no topic always first
                    paths[("kafka", kind)].measure(server, kafka_produce, server.bootstrap, topics[("kafka", kind)],
                                                   values[kind][part], r * per_round)
                    paths[("http", kind)].measure(server, arrow_produce, server.url, topics[("http", kind)],
                                                  values[kind][part], r * per_round)
        finally:
            server.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    figures = []
    for via, label in (("kafka", "confluent-kafka Producer, acks=all, idempotent, linger.ms=5"),
                       ("http", f"HTTP Arrow IPC, {ARROW_BATCH:,} records/request, {HTTP_CLIENTS} clients")):
        base = paths[(via, "untyped")]
        figures.append(Figure(SUITE, f"produce to an untyped topic, {label}", base.rate, "records/s",
                              note=f"reference; {base.records:,} records; {base.note()}; 1-minute load at the start: "
                                   f"{load:.1f}"))
        for kind in ("avro", "protobuf"):
            path = paths[(via, kind)]
            ratio = path.rate / base.rate
            figures.append(Figure(SUITE, f"produce to a typed topic ({kind}, schema validation), {label}", path.rate,
                                  "records/s", f">= {TARGET}x untyped", ratio >= TARGET, ratio,
                                  f"ratio to untyped; {path.note()}"))
        for kind in kinds:
            path = paths[(via, kind)]
            figures.append(Figure(SUITE, f"server CPU-s per million records, {via}, {kind}", path.cpu_per_million,
                                  "CPU-s", ratio=path.cpu_per_million / base.cpu_per_million,
                                  note="ratio to untyped"))
    return figures


if __name__ == "__main__":  # pragma: no cover
    for figure in run(Console(stderr=True), quick="--quick" in sys.argv):
        print(figure)
