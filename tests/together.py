"""Processes started at once and released together: each prints `ready`, waits for `go` on stdin, then
prints its outcome as JSON on its last line. For races between nodes (two creates of one topic, ...)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

# Appended to a child's script: once its outcome is printed, the process ends without the interpreter's
# teardown, where pyarrow's native thread pools now and then abort it ("terminate called without an active
# exception", SIGABRT; apache/arrow#34314) after all the work is done: twice in about ten fresh-clone runs.
CLEAN_EXIT = "\nimport os as _os, sys as _sys\n_sys.stdout.flush()\n_sys.stderr.flush()\n_os._exit(0)\n"


def run_together(script: str, argv: list[list[str]], timeout_s: float) -> list[Any]:
    """One `python -c script *args` per entry of `argv`; their JSON outcomes, in order."""
    procs = [subprocess.Popen([sys.executable, "-c", script + CLEAN_EXIT, *args], stdin=subprocess.PIPE,
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
