"""README.md's tour, run as written: the shell blocks of the CLI, HTTP API and Kafka clients sections, read
from the README itself, run in order in bash against a real `lakelog serve` on a free port (the README's
`localhost:8080` rewritten to it, `localhost:9092` to its Kafka listener) and `.venv/bin/lakelog` on the same
root. Each command must exit 0 (or fail when the README shows it printing `error: ...`), and the output the
README shows must match, with placeholders: `…` stands for anything, and timestamps, member ids, sizes and the
like are any value. Aligned tables are printed only in a terminal, so their outputs are not compared. A block
after `<!-- tour: skip -->` is not run; the command of a block after `<!-- tour: restart -->`
(`[NAME='value' ...] .venv/bin/lakelog --root ./data serve`) stops the tour's server and starts it again, on
the same root and ports, with those variables (as access control needs API keys)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tests.http.conftest import REPO, ProcessServer

README = REPO / "README.md"
# The sections of the tour, in README order, on one root and one server (restarted where the README says);
# "Typed topics" last, so its topics do not show in the metrics "Operations" prints.
SECTIONS = ["Topics (CLI)", "Produce and consume (CLI)", "Consumer groups (CLI)",
            "Topics", "Produce", "Fetch (no group)", "Consumer groups", "Access control", "Errors", "Operations",
            "Kafka clients", "Typed topics"]
RESTART_COMMAND = [".venv/bin/lakelog", "--root", "./data", "serve"]  # after NAME='value' assignments
PLACEHOLDERS = [  # (a regex over the README's text after escaping, what any run may print there)
    (r'("(?:timestamp|size_bytes|last_heartbeat_ms_ago)":(?:\\ )?)\d+', r"\g<1>\\d+"),
    (r"member\\-[0-9a-f]+", r"member-[0-9a-f]+"),
    (r"(process_open_fds\\ )\d+", r"\g<1>\\d+"),
]


@dataclass
class Command:
    section: str
    text: str
    expected: list[str] = field(default_factory=list)
    restart: dict[str, str] | None = None  # the server restarts with these variables instead of running this


def restart_variables(command: str) -> dict[str, str]:
    """The variables of a restart command, which must be the tour's own server command and nothing else."""
    words = shlex.split(command)
    assignments = [w for w in words if re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", w)]
    assert words[len(assignments):] == RESTART_COMMAND, f"not a restart of the tour's server: {command}"
    return dict(w.split("=", 1) for w in assignments)


def sections(markdown: str) -> dict[str, str]:
    found: dict[str, str] = {}
    parts = re.split(r"^(#{2,3} .*)$", markdown, flags=re.M)
    for heading, body in zip(parts[1::2], parts[2::2]):
        found.setdefault(heading.lstrip("#").strip(), body)  # the first section of a name wins (CLI before HTTP)
    return found


def complete(command: str) -> bool:
    if command.endswith("\\"):
        return False
    try:
        shlex.split(command, comments=True)
    except ValueError:  # an open quote: the command goes on on the next line
        return False
    return True


def commands(section: str, body: str) -> list[Command]:
    out: list[Command] = []
    blocks = re.finditer(r"(?:<!-- tour: (skip|restart) -->\s*)?^```(sh|console|bash)\n(.*?)^```", body,
                         flags=re.M | re.S)
    for block in blocks:
        if block.group(1) == "skip":
            continue
        current: Command | None = None
        open_command = False
        for line in block.group(3).splitlines():
            if open_command and current is not None:
                current.text += "\n" + line
                open_command = not complete(current.text)
            elif line.startswith("$ "):
                current = Command(section, line[2:])
                out.append(current)
                open_command = not complete(current.text)
            elif current is not None and line.strip():
                current.expected.append(line)
        if block.group(1) == "restart":  # one command, no output
            assert current is not None and out[-1] is current and not current.expected, block.group(0)
            current.restart = restart_variables(current.text)
    return out


def pattern(expected: list[str]) -> re.Pattern[str]:
    text = re.escape("\n".join(expected))
    text = text.replace("…", ".*?")
    for found, replacement in PLACEHOLDERS:
        text = re.sub(found, replacement, text)
    return re.compile(text, re.S)


def shows_table(expected: list[str]) -> bool:
    return any("───" in line for line in expected)


def script(tour: list[tuple[int, Command]], port: int, bootstrap: str) -> str:
    lines = ["set -u"]
    for i, command in tour:
        text = command.text.replace("localhost:8080", f"127.0.0.1:{port}").replace("localhost:9092", bootstrap)
        lines += [f"printf '\\n@@@ {i} begin\\n'", "{", text, "} 2>&1", f"printf '\\n@@@ {i} rc %s\\n' $?"]
    return "\n".join(lines) + "\n"


def segments(tour: list[Command]) -> list[tuple[dict[str, str] | None, list[tuple[int, Command]]]]:
    """The tour cut at its restarts: (the variables the server restarts with first, or None, the commands)."""
    out: list[tuple[dict[str, str] | None, list[tuple[int, Command]]]] = [(None, [])]
    for i, command in enumerate(tour):
        if command.restart is not None:
            out.append((command.restart, []))
        else:
            out[-1][1].append((i, command))
    return out


def test_the_readme_tour_runs_as_written(tmp_path: Path) -> None:
    found = sections(README.read_text())
    tour = [c for name in SECTIONS for c in commands(name, found[name])]
    assert len(tour) > 70, [c.text for c in tour]
    restarts = [c.restart for c in tour if c.restart is not None]
    assert [sorted(r) for r in restarts] == [["LAKELOG_API_KEYS_JSON"], []]  # keys for access control, then none
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))  # `.venv/bin/lakelog`, `.venv/bin/python`
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    server_env = {"PYTHONPATH": env["PYTHONPATH"],
                  "LAKELOG_GROUP_INITIAL_REBALANCE_DELAY_MS": "3000",  # the default, as `make run` has
                  "LAKELOG_BROKER_HEARTBEAT_INTERVAL_MS": "200"}  # a stop waits one interval: restarts are quick
    server: ProcessServer | None = None
    stdout, stderr = "", ""
    try:
        for variables, part in segments(tour):
            if server is not None:
                server.terminate()
            same_ports = {"LAKELOG_KAFKA_PORT": str(server.kafka_port)} if server else {}
            server = ProcessServer(str(tmp_path / "data"), port=server.port if server else None,
                                   env={**server_env, **(variables or {}), **same_ports})
            server.start()
            run = subprocess.run(["bash", "-c", script(part, server.port, server.bootstrap)], cwd=tmp_path, env=env,
                                 capture_output=True, text=True, timeout=120)
            stdout, stderr = stdout + run.stdout, stderr + run.stderr
    finally:
        if server is not None:
            server.terminate()
    stdout = stdout.replace("\r\n", "\n")  # `curl -i` headers
    outputs = re.findall(r"@@@ (\d+) begin\n(.*?)\n?@@@ \1 rc (\d+)\n", stdout, flags=re.S)
    ran = [c for c in tour if c.restart is None]
    assert len(outputs) == len(ran), stdout[-3000:] + stderr[-3000:]
    failures = []
    for (index, output, rc), command in zip(outputs, ran):
        fails = any(line.startswith("error:") for line in command.expected)
        where = f"[{command.section}] $ {command.text}"
        if (rc != "0") != fails:
            failures.append(f"{where}\n  exit {rc}\n  output: {output}")
        elif command.expected and not shows_table(command.expected) and \
                not pattern(command.expected).fullmatch(output.strip()):
            failures.append(f"{where}\n  README: {chr(10).join(command.expected)}\n  actual: {output.strip()}")
    assert not failures, f"{len(failures)} of {len(ran)} commands differ from the README:\n\n" + \
        "\n\n".join(failures)
