"""The tours, run as written: the README's five-minute tour, and the guide's tour, whose steps are sections of
the site's pages (docs/guide/index.md lists them in order). Each tour's shell blocks are read from the pages
themselves and run in order in bash against a real `lakelog serve` on a free port (`localhost:8080`
rewritten to it, `localhost:9092` to its Kafka listener) and `.venv/bin/lakelog` on the same root, a fresh one
per tour. Each command must exit 0 (or fail when the page shows it printing `error: ...`), and the output the
page shows must match, with placeholders: `…` stands for anything, and timestamps, member ids, sizes and the
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

DOCS = REPO / "docs"
README_FILE = REPO / "README.md"
# The README's five-minute tour: its sections, on a fresh root.
README_TOUR = ["Over HTTP, with curl", "With a Kafka client", "With a Delta reader"]
# The guide's tour: (page, section) in order, on one root and one server (restarted where a page says);
# "Typed topics" last, so its topics do not show in the metrics "Health, logs and metrics" prints.
SITE_TOUR = [("guide/cli.md", "Topics (CLI)"), ("guide/cli.md", "Produce and consume (CLI)"),
             ("guide/cli.md", "Consumer groups (CLI)"), ("guide/http.md", "Topics"), ("guide/http.md", "Produce"),
             ("guide/http.md", "Fetch (no group)"), ("guide/groups.md", "Groups over HTTP"),
             ("operations/access-control.md", "Trying it"), ("guide/http.md", "Errors"),
             ("operations/running.md", "Health, logs and metrics"), ("guide/kafka.md", "Producing and consuming"),
             ("guide/schemas.md", "Typed topics")]
RESTART_COMMAND = [".venv/bin/lakelog", "--root", "./data", "serve"]  # after NAME='value' assignments
PLACEHOLDERS = [  # (a regex over the page's text after escaping, what any run may print there)
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


def page_sections(page: str) -> dict[str, str]:
    return sections((DOCS / page).read_text())


def run_tour(tour: list[Command], tmp_path: Path) -> list[str]:
    """Run the tour's commands in order on a fresh root (its server restarted where the tour says); the
    differences from what the pages show."""
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
    for (_index, output, rc), command in zip(outputs, ran):
        fails = any(line.startswith("error:") for line in command.expected)
        where = f"[{command.section}] $ {command.text}"
        if (rc != "0") != fails:
            failures.append(f"{where}\n  exit {rc}\n  output: {output}")
        elif command.expected and not shows_table(command.expected) and \
                not pattern(command.expected).fullmatch(output.strip()):
            failures.append(f"{where}\n  page: {chr(10).join(command.expected)}\n  actual: {output.strip()}")
    return failures


def test_the_readme_tour_runs_as_written(tmp_path: Path) -> None:
    found = sections(README_FILE.read_text())
    tour = [c for name in README_TOUR for c in commands(f"README.md: {name}", found[name])]
    assert len(tour) >= 7 and not [c for c in tour if c.restart is not None], [c.text for c in tour]
    failures = run_tour(tour, tmp_path)
    assert not failures, f"{len(failures)} of {len(tour)} commands differ from the README:\n\n" + \
        "\n\n".join(failures)


def test_the_guide_tour_runs_as_written(tmp_path: Path) -> None:
    tour = [c for page, name in SITE_TOUR for c in commands(f"docs/{page}: {name}", page_sections(page)[name])]
    assert len(tour) > 70, [c.text for c in tour]
    restarts = [c.restart for c in tour if c.restart is not None]
    assert [sorted(r) for r in restarts] == [["LAKELOG_API_KEYS_JSON"], []]  # keys for access control, then none
    failures = run_tour(tour, tmp_path)
    ran = [c for c in tour if c.restart is None]
    assert not failures, f"{len(failures)} of {len(ran)} commands differ from the pages:\n\n" + \
        "\n\n".join(failures)


def test_the_guide_lists_its_tour_in_the_order_it_runs() -> None:
    """docs/guide/index.md's "The tour" links each step's section, in the order this test runs them."""
    steps = re.findall(r"^\d+\. \[([^\]]+)\]\(([^)#]+)#[^)]*\)", page_sections("guide/index.md")["The tour"],
                       flags=re.M)
    listed = [((DOCS / "guide" / page).resolve().relative_to(DOCS.resolve()).as_posix(), name)
              for name, page in steps]
    assert listed == SITE_TOUR
