"""The Python examples of docs/guide/python.md, run as written (read from the page itself): the Python client's
example against a real server on a fresh root, its printed lines compared with the page's; and the Python
API's example in a fresh folder."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.http.conftest import REPO, start_server  # noqa: F401
from tests.http.test_readme_tour import page_sections

PAGE = "guide/python.md"


def block(section: str, language: str, index: int = 0, page: str = PAGE) -> str:
    found = re.findall(rf"^```{language}\n(.*?)^```", page_sections(page)[section], flags=re.M | re.S)
    return found[index]


def run_python(code: str, cwd: Path) -> list[str]:
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, timeout=120,
                            env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_the_python_client_example_prints_what_the_page_shows(start_server, tmp_path) -> None:  # noqa: F811
    server = start_server(tmp_path / "x")  # "Run against `lakelog --root /tmp/x serve`": a fresh root
    code = block("Python client", "python").replace("http://127.0.0.1:8080", server.url)
    assert run_python(code, tmp_path) == block("Python client", "console").splitlines()


def test_the_python_api_example_runs(tmp_path) -> None:
    printed = run_python(block("Python API", "python"), tmp_path)
    # The produce result, then the records of partition 0 (which of the keys land there is murmur2's call).
    assert re.fullmatch(r"\[\(\d, 0, \d{13}\)\]", printed[0]), printed
    assert all(re.fullmatch(r"\d+ b'[\w-]+' b'[\w ]+'", line) for line in printed[1:]), printed
    assert (tmp_path / "data" / "topics" / "orders" / "_delta_log").is_dir()
