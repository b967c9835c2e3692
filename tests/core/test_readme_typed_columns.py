"""The typed-column example of docs/guide/schemas.md, run as written in a fresh folder: it prints what the
page shows, and DuckDB's query from the page answers what its comment says."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from delta_readers import connect
from tests.http.test_readme_tour import page_sections

REPO = Path(__file__).resolve().parents[2]
SECTION = "Typed columns: `value_typed`"


def blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", page_sections("guide/schemas.md")[SECTION], flags=re.M | re.S)


def test_the_typed_column_example_prints_what_the_readme_shows(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-c", blocks("python")[0]], capture_output=True, text=True,
                            cwd=tmp_path, timeout=300, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == blocks("console")[0].splitlines()

    query = blocks("sql")[0]
    expected = re.search(r"^-- DuckDB.*?: (\[.*\])$", query, flags=re.M).group(1)  # type: ignore[union-attr]
    with connect() as con:
        rows = con.execute(query.replace("./data", str(tmp_path / "data"))).fetchall()
    assert repr(rows) == expected
