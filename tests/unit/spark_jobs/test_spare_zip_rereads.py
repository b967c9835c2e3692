"""The source's reads leave no zip importer cached for the worker's next task to re-read (Python < 3.12)."""

from __future__ import annotations

import importlib
import sys
import zipfile
import zipimport

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
