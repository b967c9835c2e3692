"""Processes started at once and released together: each prints `ready`, waits for `go` on stdin, then
prints its outcome as JSON on its last line. For races between nodes (two creates of one topic, ...)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any


def run_together(script: str, argv: list[list[str]], timeout_s: float) -> list[Any]:
    """One `python -c script *args` per entry of `argv`; their JSON outcomes, in order."""
    procs = [subprocess.Popen([sys.executable, "-c", script, *args], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for args in argv]
    for proc in procs:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()  # type: ignore[union-attr]
    for proc in procs:
        proc.stdin.write("go\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
    outcomes = []
    for proc in procs:
        out, err = proc.communicate(timeout=timeout_s)
        assert proc.returncode == 0, err
        outcomes.append(json.loads(out.strip().splitlines()[-1]))
    return outcomes
