"""A typed topic's `value_typed` column: written by the flush beside the `value` bytes, its schema evolving
with the subject (three versions), kept by the roll's rewrite, read by delta-rs and by DuckDB; fetches and
consumers see `value` byte for byte and nothing else."""

from __future__ import annotations

import io
import json
import shutil
from datetime import date, datetime, timezone
from decimal import Decimal

import fastavro
import pyarrow as pa
from deltalake import DeltaTable

from lakelog.platform import Broker, Record
from lakelog.platform.layout import topic_path
from lakelog.platform.log import CHECKPOINT_INTERVAL
from lakelog.platform.schema_registry.wire_format import framed
from lakelog.platform.typed.column import TYPED_COLUMN
from lakelog.settings import Settings
from lakelog.spark_jobs.jobs import run_job
from delta_readers import assert_duckdb_agrees, duckdb_column
from log_check import assert_topic_intact
from outside_writer import run_delta_rs

TYPED = {"confluent.value.schema.validation": "true"}
V1 = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"}, {"name": "item", "type": "string"},
    {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "attrs", "type": {"type": "map", "values": "long"}},
]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "note", "type": ["null", "string"], "default": None}]}
SHIP = {"type": "record", "name": "Ship",
        "fields": [{"name": "city", "type": "string"}, {"name": "days", "type": "int"}]}
V3 = {**V2, "fields": [*V2["fields"], {"name": "ship", "default": None, "type": ["null", SHIP]}]}
AT = datetime(2026, 11, 26, 12, 30, tzinfo=timezone.utc)


def order(n: int, **more: object) -> dict:
    return {"id": n, "item": f"item-{n}", "status": "PAID" if n % 2 else "NEW", "day": date(2026, 1, 1 + n % 28),
            "at": AT, "price": Decimal(f"{n}.25"), "tags": [f"t{n}"], "attrs": {"n": n}, **more}


def encoded(schema_id: int, schema: dict, datum: dict) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), datum)
    return framed(schema_id, out.getvalue())


def table_of(broker: Broker, topic: str) -> pa.Table:
    uri = broker.storage.uri(topic_path(topic))
    return DeltaTable(uri, storage_options=broker.storage.delta_options()).to_pyarrow_table()


def typed_by_offset(table: pa.Table) -> dict[tuple[int, int], dict | None]:
    rows = table.select(["partition", "offset", TYPED_COLUMN]).to_pylist()
    return {(r["partition"], r["offset"]): r[TYPED_COLUMN] for r in rows}


def test_typed_column_beside_value_evolving_over_three_versions(make_broker):
    broker, root, storage = make_broker(), make_broker.root, make_broker.storage  # a local folder, and S3
    registry = broker.schema_registry()
    broker.create_topic("orders", partitions=2, config=TYPED)
    ids = [registry.register("orders-value", json.dumps(schema)) for schema in (V1, V2, V3)]
    assert len(set(ids)) == 3
    sent = {
        0: encoded(ids[0], V1, order(0)),
        1: encoded(ids[0], V1, order(1)),
        2: encoded(ids[1], V2, order(2, note="gift")),
        3: encoded(ids[2], V3, order(3, note=None, ship={"city": "Oslo", "days": 2})),
        4: b"not in the wire format",
        5: encoded(9999, V1, order(5)),  # no such schema
        6: None,
    }
    schemas_seen = []
    for n, value in sent.items():  # one flush each: the table's schema evolves flush by flush
        broker.produce("orders", [Record(value, key=str(n).encode(), partition=n % 2)])
        schemas_seen.append(table_of(broker, "orders").schema)

    table = table_of(broker, "orders")
    typed_type = table.schema.field(TYPED_COLUMN).type
    assert [f.name for f in typed_type] == [
        "id", "item", "status", "day", "at", "price", "tags", "attrs", "note", "ship"]
    assert typed_type.field("ship").type == pa.struct([pa.field("city", pa.string()), pa.field("days", pa.int32())])
    assert typed_type.field("price").type == pa.decimal128(9, 2)
    # The schema grew with the versions: v1's fields, then `note`, then `ship`, each a nullable addition.
    grown = [len(s.field(TYPED_COLUMN).type) for s in schemas_seen[:4]]
    assert grown == [8, 8, 9, 10]

    where = {n: (n % 2, n // 2) for n in sent}  # each partition's offsets in the order produced
    typed = typed_by_offset(table)
    assert typed[where[0]] == {**order(0), "tags": ["t0"], "attrs": [("n", 0)], "note": None, "ship": None}
    assert typed[where[2]]["note"] == "gift" and typed[where[2]]["ship"] is None
    assert typed[where[3]]["ship"] == {"city": "Oslo", "days": 2} and typed[where[3]]["at"] == AT
    assert typed[where[1]]["status"] == "PAID" and typed[where[1]]["price"] == Decimal("1.25")
    assert [typed[where[n]] for n in (4, 5, 6)] == [None, None, None]

    # Consumers read `value` byte for byte, and no other column.
    for p in range(2):
        fetched = broker.fetch("orders", p, 0, max_records=100).records
        assert TYPED_COLUMN not in fetched.column_names
        assert fetched.column("value").to_pylist() == [sent[n] for n in sent if n % 2 == p]
    acked = {where[n]: value for n, value in sent.items()}
    assert_duckdb_agrees(root, "orders", storage, acked=acked)
    ducked = duckdb_column(root, "orders", TYPED_COLUMN, storage)
    assert ducked[where[3]]["ship"] == {"city": "Oslo", "days": 2} and ducked[where[3]]["item"] == "item-3"
    assert ducked[where[0]]["note"] is None and ducked[where[4]] is None
    assert_topic_intact(root, "orders", storage)

    # The roll rewrites the shared files into per-partition files: the typed column goes with the records.
    run_job("roll", broker)
    assert typed_by_offset(table_of(broker, "orders")) == typed
    assert duckdb_column(root, "orders", TYPED_COLUMN, storage)[where[2]]["note"] == "gift"
    assert_topic_intact(root, "orders", storage)


def test_untyped_topics_have_no_typed_column(local_broker: Broker):
    broker = local_broker
    sid = broker.schema_registry().register("plain-value", json.dumps(V1))
    broker.create_topic("plain", partitions=1)
    value = encoded(sid, V1, order(1))
    broker.produce("plain", [Record(value)])
    assert TYPED_COLUMN not in table_of(broker, "plain").column_names
    assert broker.fetch("plain", 0, 0, max_records=10).records.column("value").to_pylist() == [value]


def test_a_topic_typed_later_adds_the_column(local_broker: Broker):
    broker, root = local_broker, local_broker.settings.root
    sid = broker.schema_registry().register("later-value", json.dumps(V1))
    broker.create_topic("later", partitions=1)
    broker.produce("later", [Record(encoded(sid, V1, order(1)))])
    broker.alter_topic_config("later", TYPED)
    broker.produce("later", [Record(encoded(sid, V1, order(2)))])
    typed = typed_by_offset(table_of(broker, "later"))
    assert typed[(0, 0)] is None and typed[(0, 1)]["id"] == 2  # files written before lack the column: null
    assert duckdb_column(root, "later", TYPED_COLUMN)[(0, 1)]["item"] == "item-2"
    assert_topic_intact(root, "later")


def test_schema_changes_survive_the_checkpoints(tmp_path):
    """The writer's own checkpoints (written from its state) never carry a schema from before a change:
    a reader starting from the last checkpoint alone sees the evolved column; each change is one commit."""
    root = tmp_path / "root"
    with Broker(Settings(root=str(root), linger_ms=0)) as broker:
        registry = broker.schema_registry()
        v1, v2 = (registry.register("t-value", json.dumps(s)) for s in (V1, V2))
        broker.create_topic("t", partitions=1, config=TYPED)
        for n in range(2 * CHECKPOINT_INTERVAL + 5):  # versions past two checkpoints; the change in between
            schema_id, schema = (v1, V1) if n < CHECKPOINT_INTERVAL - 3 else (v2, V2)
            broker.produce("t", [Record(encoded(schema_id, schema, order(n, **({"note": f"n{n}"} if schema is V2
                                                                                   else {}))))])
        topic_log = broker.topic_log("t")
        assert topic_log.wait_for_checkpoints()
        last = topic_log.version // CHECKPOINT_INTERVAL * CHECKPOINT_INTERVAL
    log_dir = root / "topics" / "t" / "_delta_log"
    schema_commits = [p.name for p in sorted(log_dir.glob("*.json")) if b'"metaData"' in p.read_bytes()]
    assert len(schema_commits) == 3  # the create, the column added, `note` added
    copy = tmp_path / "copy"
    shutil.copytree(root / "topics" / "t", copy)
    for commit in (copy / "_delta_log").glob("*.json"):
        if int(commit.stem) <= last:
            commit.unlink()  # only the checkpoint tells the schema
    table = DeltaTable(str(copy))
    kind = pa.schema(table.schema().to_arrow()).field(TYPED_COLUMN).type
    assert kind.get_field_index("note") >= 0
    notes = table.to_pyarrow_table().sort_by("offset").column(TYPED_COLUMN).to_pylist()
    assert notes[0]["note"] is None and notes[-1]["note"] == f"n{2 * CHECKPOINT_INTERVAL + 4}"
    assert_topic_intact(str(root), "t")


def test_another_tools_rewrite_of_a_typed_table_is_served_and_keeps_the_column(local_broker: Broker):
    """delta-rs's OPTIMIZE (another Delta tool) rewrites the typed table's files with `value_typed` in them:
    lakelog indexes them by content (the column is no sign of a foreign change) and serves every record."""
    broker, root = local_broker, local_broker.settings.root
    registry = broker.schema_registry()
    v1, v2 = (registry.register("t-value", json.dumps(s)) for s in (V1, V2))
    broker.create_topic("t", partitions=2, config=TYPED)
    sent = {}
    for n in range(8):
        value = encoded(v1, V1, order(n)) if n < 4 else encoded(v2, V2, order(n, note=f"n{n}"))
        result = broker.produce("t", [Record(value, partition=n % 2)])
        sent[(n % 2, int(result.offsets[0]))] = value
    typed = typed_by_offset(table_of(broker, "t"))
    run_delta_rs(broker.storage.uri("topics", "t"), broker.storage.delta_options(), "print(dt.optimize.compact())")
    log = broker.topic_log("t")
    log.refresh()
    assert any(s.by_content for p in range(2) for s in log.segments(p))  # the tool's files are served
    for p in range(2):
        fetched = broker.fetch("t", p, 0, max_records=100).records
        assert dict(zip(((p, o) for o in fetched.column("offset").to_pylist()),
                        fetched.column("value").to_pylist())) == {k: v for k, v in sent.items() if k[0] == p}
    assert typed_by_offset(table_of(broker, "t")) == typed
    broker.produce("t", [Record(encoded(v2, V2, order(9, note="after")), partition=0)])  # nothing refused
    assert_topic_intact(root, "t")


def test_two_writers_evolve_one_table(tmp_path):
    """Two nodes writing one typed topic, each behind the other's commits: a schema change that loses its
    version is made again on the table as the other left it; no field is lost, no record written twice."""
    root = str(tmp_path / "data")
    with Broker(Settings(root=root, linger_ms=0)) as a, Broker(Settings(root=root, linger_ms=0)) as b:
        registry = a.schema_registry()
        v1, v2, v3 = (registry.register("t-value", json.dumps(s)) for s in (V1, V2, V3))
        a.create_topic("t", partitions=1, config=TYPED)
        b.produce("t", [Record(b"untyped bytes")])  # b's log open: its snapshot goes stale from here
        a.produce("t", [Record(encoded(v1, V1, order(1)))])  # the column added by a
        a.produce("t", [Record(encoded(v3, V3, order(3, note="a", ship={"city": "Rome", "days": 1})))])
        b.produce("t", [Record(encoded(v2, V2, order(2, note="b")))])  # b's change loses, then holds a's too
        a.produce("t", [Record(encoded(v1, V1, order(4)))])
    kind = table_of_root(root, "t").schema.field(TYPED_COLUMN).type
    assert [f.name for f in kind][-2:] == ["note", "ship"]
    typed = [row[TYPED_COLUMN] for row in table_of_root(root, "t").sort_by("offset").to_pylist()]
    assert typed[0] is None and [t["id"] for t in typed[1:]] == [1, 3, 2, 4]
    assert typed[2]["ship"] == {"city": "Rome", "days": 1} and typed[3]["note"] == "b"
    assert_topic_intact(root, "t")


def table_of_root(root: str, topic: str) -> pa.Table:
    return DeltaTable(f"{root}/topics/{topic}").to_pyarrow_table()
