"""docs/guide/delta-tools.md's example of delta-rs OPTIMIZE on a topic table that lakelog serves, run as
written (read from the page itself) in a fresh folder: its printed lines are the page's."""

from __future__ import annotations

from tests.http.test_readme_python import block, run_python

PAGE = "guide/delta-tools.md"
SECTION = "What other Delta tools may do to a topic table"


def test_the_optimize_example_prints_what_the_page_shows(tmp_path) -> None:
    assert run_python(block(SECTION, "python", page=PAGE), tmp_path) == \
        block(SECTION, "console", page=PAGE).splitlines()
