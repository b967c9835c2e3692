"""An independent Delta reader for the checks: DuckDB's delta extension (Delta Kernel, Rust), beside delta-rs.

log_check.py reads the topic tables through delta-rs, the library lakelog itself is built on; a table that
only delta-rs could read would pass it. DuckDB's `delta_scan` shares no code with delta-rs's log replay, so
it checks what any Delta reader sees: lakelog's own commit files and checkpoints, the roll's and retention's
commits, shared files and partition columns. The extension comes from PyPI (`duckdb-ext-delta`, with
`duckdb-ext-httpfs` and `duckdb-ext-aws` for S3): nothing is downloaded at run time.
"""

from __future__ import annotations

import sysconfig
from collections import Counter
from pathlib import Path
from typing import Mapping
from urllib.parse import urlparse

import duckdb

from lakelog.platform.storage import Storage
from log_check import topic_offsets

# The duckdb-ext-* wheels install DuckDB's extension folder layout (v<version>/<platform>/<name>.duckdb_extension).
EXTENSIONS = Path(sysconfig.get_paths()["purelib"]) / "duckdb_ext" / "extensions"

Row = tuple[int, int, bytes | None, bytes | None]  # partition, offset, key, value


def connect(storage: Mapping[str, str] | None = None) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the delta extension loaded from the installed wheels (never fetched), and,
    for S3 options (lakelog's `aws_*` keys), a secret for their endpoint."""
    con = duckdb.connect(config={"extension_directory": str(EXTENSIONS), "autoinstall_known_extensions": False,
                                 "autoload_known_extensions": False})
    for extension in ("httpfs", "aws", "delta") if storage else ("delta",):
        con.execute(f"LOAD {extension}")
    if storage:
        con.execute(_s3_secret(storage))
    return con


def _s3_secret(storage: Mapping[str, str]) -> str:
    endpoint = urlparse(storage["aws_endpoint_url"])
    return (f"CREATE SECRET lakelog_s3 (TYPE s3, KEY_ID '{storage['aws_access_key_id']}', "
            f"SECRET '{storage['aws_secret_access_key']}', REGION '{storage.get('aws_region', 'us-east-1')}', "
            f"ENDPOINT '{endpoint.netloc}', URL_STYLE 'path', USE_SSL {str(endpoint.scheme == 'https').lower()})")


def duckdb_rows(root: str, topic: str, storage: Mapping[str, str] | None = None,
                version: int | None = None) -> list[Row]:
    """Every row of the topic's table (at `version`, else the latest) as DuckDB reads it, sorted."""
    uri = Storage.open(root, storage).uri("topics", topic)
    with connect(storage) as con:
        if version is None:
            source = f"delta_scan('{uri}')"
        else:  # time travel: the extension takes a version only through ATTACH
            con.execute(f"ATTACH '{uri}' AS topic_table (TYPE delta, VERSION {int(version)})")
            source = "topic_table"
        rows = con.execute(f'SELECT "partition", "offset", "key", "value" FROM {source} '
                           'ORDER BY "partition", "offset"').fetchall()
    return [(int(p), int(o), _bytes(k), _bytes(v)) for p, o, k, v in rows]


def _bytes(value: bytes | bytearray | memoryview | None) -> bytes | None:
    return None if value is None else bytes(value)


def assert_duckdb_agrees(root: str, topic: str, storage: Mapping[str, str] | None = None,
                         acked: Mapping[tuple[int, int], bytes | None] | None = None) -> list[Row]:
    """DuckDB sees exactly the (partition, offset) rows delta-rs sees (log_check.topic_offsets, duplicates
    included), and each acknowledged record's value at its offset. Returns DuckDB's rows."""
    rows = duckdb_rows(root, topic, storage)
    seen = Counter((p, o) for p, o, _, _ in rows)
    expected = Counter((p, o) for p, offsets in topic_offsets(root, topic, storage).items() for o in offsets)
    assert seen == expected, (f"{topic}: DuckDB and delta-rs disagree: only DuckDB {sorted(seen - expected)[:5]}, "
                              f"only delta-rs {sorted(expected - seen)[:5]}")
    if acked:
        values = {(p, o): v for p, o, _, v in rows}
        wrong = [(where, value, values.get(where, "missing")) for where, value in acked.items()
                 if where not in values or values[where] != value]
        assert not wrong, f"{topic}: {len(wrong)} acknowledged records not as DuckDB reads them, e.g. {wrong[:3]}"
    return rows


def duckdb_column(root: str, topic: str, column: str, storage: Mapping[str, str] | None = None
                  ) -> dict[tuple[int, int], object]:
    """One column of the topic's table as DuckDB reads it (a struct as a dict), by (partition, offset)."""
    uri = Storage.open(root, storage).uri("topics", topic)
    with connect(storage) as con:
        # As Arrow: DuckDB's Python rows would need pytz for a timestamp with a time zone.
        rows = con.execute(f'SELECT "partition", "offset", "{column}" FROM delta_scan(\'{uri}\')').fetch_arrow_table()
    return {(int(p), int(o)): value for p, o, value in zip(*(rows.column(i).to_pylist() for i in range(3)))}
