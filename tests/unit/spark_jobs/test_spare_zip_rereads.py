"""The source's reads leave no zip importer cached for the worker's next task to re-read (Python < 3.12)."""

from __future__ import annotations

import importlib
import sys
import zipfile
import zipimport

import pyarrow as pa
import pytest

from lakelog.spark_jobs.scan import spare_zip_rereads


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="invalidation is lazy from Python 3.12: nothing to spare")
def test_zip_importers_dropped_and_imports_from_the_zip_still_work(tmp_path, monkeypatch):
    archive = tmp_path / "lib.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("zipped_pkg/__init__.py", "VALUE = 1\n")
        zf.writestr("zipped_pkg/later.py", "VALUE = 2\n")
    monkeypatch.syspath_prepend(str(archive))
    monkeypatch.setattr(sys, "path_importer_cache", dict(sys.path_importer_cache))
    monkeypatch.delitem(sys.modules, "zipped_pkg", raising=False)
    monkeypatch.delitem(sys.modules, "zipped_pkg.later", raising=False)

    assert importlib.import_module("zipped_pkg").VALUE == 1
    assert any(isinstance(f, zipimport.zipimporter) for f in sys.path_importer_cache.values())

    spare_zip_rereads()
    assert not any(isinstance(f, zipimport.zipimporter) for f in sys.path_importer_cache.values())
    importlib.invalidate_caches()  # what PySpark's worker does at each task's start: nothing to re-read now
    assert importlib.import_module("zipped_pkg.later").VALUE == 2  # an importer is made again when needed


def _zip_on_path(tmp_path, monkeypatch, name: str) -> None:
    archive = tmp_path / f"{name}.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr(f"{name}/__init__.py", "VALUE = 1\n")
    monkeypatch.syspath_prepend(str(archive))
    monkeypatch.setattr(sys, "path_importer_cache", dict(sys.path_importer_cache))
    monkeypatch.delitem(sys.modules, name, raising=False)
    importlib.import_module(name)
    assert any(isinstance(f, zipimport.zipimporter) for f in sys.path_importer_cache.values())


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="invalidation is lazy from Python 3.12: nothing to spare")
def test_the_planner_workers_entry_points_leave_no_zip_importer(tmp_path, monkeypatch):
    """Spark's planner workers (`create_data_source`: schema; `plan_data_source_read`: reader and partitions,
    or streamReader) are reused across queries and invalidate the import caches first, as executors do."""
    from pyspark.sql.types import StructType

    from lakelog.platform import Broker
    from lakelog.spark_jobs.source import LakelogDataSource, range_of

    root = tmp_path / "root"
    with Broker(root=str(root), linger_ms=0) as broker:
        broker.create_topic("t", 2)
        broker.produce("t", pa.table({"key": [b"k"] * 10, "value": [b"v"] * 10,
                                      "partition": pa.array([i % 2 for i in range(10)], pa.int32())}))
    options = {"lakelog.root": str(root), "subscribe": "t"}

    _zip_on_path(tmp_path, monkeypatch, "zipped_schema")
    assert "value binary" in str(LakelogDataSource(options).schema())
    assert not any(isinstance(f, zipimport.zipimporter) for f in sys.path_importer_cache.values())

    _zip_on_path(tmp_path, monkeypatch, "zipped_partitions")
    partitions = LakelogDataSource(options).reader(StructType()).partitions()
    assert sum(range_of(p).size for p in partitions) == 10
    assert not any(isinstance(f, zipimport.zipimporter) for f in sys.path_importer_cache.values())

    _zip_on_path(tmp_path, monkeypatch, "zipped_stream")
    LakelogDataSource(options).streamReader(StructType())
    assert not any(isinstance(f, zipimport.zipimporter) for f in sys.path_importer_cache.values())
