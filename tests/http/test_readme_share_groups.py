"""The share groups page's work queue (docs/guide/share-groups.md, "A work queue" and its subsections), run as
written against a real `lakelog serve` on a fresh root, outputs compared as the guide's tour compares them
(`test_readme_tour.py`'s machinery); then the offset scan of the topics it wrote."""

from __future__ import annotations

from pathlib import Path

from tests.http.test_readme_tour import commands, page_sections, run_tour
from tests.log_check import assert_topic_intact

PAGE = "guide/share-groups.md"
SECTIONS = ["A work queue", "A worker with curl", "Four workers in Python", "From the command line"]


def test_the_share_groups_work_queue_runs_as_written(tmp_path: Path) -> None:
    found = page_sections(PAGE)
    tour = [c for name in SECTIONS for c in commands(f"docs/{PAGE}: {name}", found[name])]
    assert len(tour) >= 14 and not [c for c in tour if c.restart is not None], [c.text for c in tour]
    failures = run_tour(tour, tmp_path)
    assert not failures, f"{len(failures)} of {len(tour)} commands differ from the page:\n\n" + "\n\n".join(failures)
    for topic in ("jobs", "jobs-dlq"):
        assert_topic_intact(str(tmp_path / "data"), topic)
