"""Read the repository's Dockerfile and replay its build stage without Docker.

There is no Docker engine on the test machines, so the image build is checked
by doing what the builder would do, in a temporary directory standing in for
the image's root filesystem:

* ``ARG`` / ``ENV`` / ``WORKDIR`` are tracked; absolute paths in them (e.g.
  ``VIRTUAL_ENV=/opt/lakelog``) are mapped into the fake root, so the same
  ``$VIRTUAL_ENV`` the Dockerfile uses points into the temporary directory;
* ``COPY`` copies from the build context, honouring ``.dockerignore`` with
  Docker's rules (last matching pattern wins; a pattern also matches a file's
  parent directories; ``!`` re-includes), so a file the install needs but the
  context leaves out fails the test as it would fail ``docker build``;
* ``RUN`` commands of the stage are run with ``/bin/sh -c`` in the mapped
  ``WORKDIR`` with the stage's environment, verbatim except for literal
  occurrences of the stage's absolute paths, which are mapped, and
  ``--no-cache-dir``, which is dropped so repeated test runs reuse pip's cache.

Only the instructions this project's Dockerfile uses are supported; anything
else raises, so the checker cannot silently skip a step.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")


@dataclass
class Instruction:
    keyword: str
    args: str
    line: int


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)


def parse(text: str) -> tuple[dict[str, str], list[Stage]]:
    """Dockerfile text -> (global ARG defaults, stages)."""
    logical: list[tuple[int, str]] = []
    buf = ""
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if buf and stripped.startswith("#"):
            continue  # comment lines inside a continued instruction
        if not buf:
            start = number
        if stripped.endswith("\\"):
            buf += stripped[:-1] + " "
            continue
        buf += stripped
        logical.append((start, buf))
        buf = ""
    if buf:
        logical.append((start, buf))

    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for number, line in logical:
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        args = args.strip()
        if keyword == "FROM":
            parts = args.split()
            base = _expand(parts[0], global_args)
            name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(base=base, name=name))
        elif not stages:
            if keyword != "ARG":
                raise ValueError(f"line {number}: {keyword} before FROM")
            key, _, default = args.partition("=")
            global_args[key] = default
        else:
            stages[-1].instructions.append(Instruction(keyword, args, number))
    return global_args, stages


def _expand(value: str, env: dict[str, str]) -> str:
    def repl(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(3)
        default = m.group(2)
        if name in env:
            return env[name]
        return default if default is not None else ""

    return _VAR.sub(repl, value)


def parse_env_args(args: str) -> list[tuple[str, str]]:
    """``ENV A=1 B="x y"`` (or the legacy ``ENV A value``) -> pairs."""
    tokens = shlex.split(args, posix=True)
    if tokens and "=" not in tokens[0]:
        return [(tokens[0], " ".join(tokens[1:]))]
    pairs = []
    for token in tokens:
        key, sep, value = token.partition("=")
        if not sep:
            raise ValueError(f"cannot parse ENV {args!r}")
        pairs.append((key, value))
    return pairs


def exec_form(args: str) -> list[str] | None:
    """The JSON ("exec") form of CMD/ENTRYPOINT/RUN, or None for shell form."""
    if args.startswith("["):
        value = json.loads(args)
        if not all(isinstance(v, str) for v in value):
            raise ValueError(f"bad exec form {args!r}")
        return value
    return None


# --------------------------------------------------------------- .dockerignore


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    out = ""
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "*":
            if pattern[i : i + 2] == "**":
                i += 2
                if pattern[i : i + 1] == "/":
                    i += 1
                    out += "(?:.*/)?"
                else:
                    out += ".*"
                continue
            out += "[^/]*"
        elif c == "?":
            out += "[^/]"
        elif c == "[":
            end = pattern.index("]", i)
            out += "[" + pattern[i + 1 : end].replace("!", "^", 1) + "]"
            i = end
        else:
            out += re.escape(c)
        i += 1
    return re.compile("^" + out + "$")


def load_dockerignore(context: Path) -> list[tuple[bool, re.Pattern[str]]]:
    path = context / ".dockerignore"
    rules: list[tuple[bool, re.Pattern[str]]] = []
    if not path.exists():
        return rules
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = os.path.normpath(line[1:].strip() if negate else line).lstrip("/")
        rules.append((negate, _pattern_regex(pattern)))
    return rules


def is_ignored(rel_path: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Docker's rule: the last pattern matching the path or a parent wins."""
    parts = rel_path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for negate, regex in rules:
        if any(regex.match(c) for c in candidates):
            ignored = not negate
    return ignored


# -------------------------------------------------------------------- replay


@dataclass
class BuildResult:
    root: Path
    env: dict[str, str]
    workdir: Path
    commands: list[str]


class StageReplayer:
    """Replays one stage of a Dockerfile into ``root`` (see module doc)."""

    def __init__(self, context: Path, root: Path, global_args: dict[str, str], host_path: str) -> None:
        self.context = context
        self.root = root
        self.rules = load_dockerignore(context)
        self.args = dict(global_args)
        self.env: dict[str, str] = {"PATH": host_path}
        self.workdir = root
        self.mapped: dict[str, str] = {}  # absolute image path -> fake-root path

    def map_path(self, image_path: str) -> str:
        if not image_path.startswith("/"):
            return image_path
        mapped = str(self.root / image_path.lstrip("/"))
        self.mapped[image_path.rstrip("/") or "/"] = mapped
        return mapped

    def _map_env_value(self, raw: str) -> str:
        # Map literal absolute components (not the ones coming from $VARS).
        components = raw.split(":")
        return ":".join(self.map_path(c) if c.startswith("/") else c for c in components)

    def _map_command(self, command: str) -> str:
        for image_path in sorted(self.mapped, key=len, reverse=True):
            command = re.sub(
                r"(?<![\w/.$-])" + re.escape(image_path) + r"(?=[/\s\"':]|$)",
                self.mapped[image_path],
                command,
            )
        return re.sub(r"\s--no-cache-dir\b", "", command)

    def run(self, stage: Stage, timeout: float) -> BuildResult:
        commands: list[str] = []
        for ins in stage.instructions:
            scope = {**self.args, **self.env}
            if ins.keyword == "ARG":
                key, _, default = ins.args.partition("=")
                self.args[key] = self.args.get(key, default)
            elif ins.keyword == "ENV":
                for key, raw in parse_env_args(ins.args):
                    self.env[key] = _expand(self._map_env_value(raw), {**self.args, **self.env})
            elif ins.keyword == "WORKDIR":
                target = _expand(ins.args, scope)
                self.workdir = Path(self.map_path(target)) if target.startswith("/") else self.workdir / target
                self.workdir.mkdir(parents=True, exist_ok=True)
            elif ins.keyword == "COPY":
                self._copy(ins, scope)
            elif ins.keyword == "RUN":
                form = exec_form(ins.args)
                command = shlex.join(form) if form else ins.args
                command = self._map_command(command)
                commands.append(command)
                env = {**os.environ, **self.env}
                proc = subprocess.run(
                    ["/bin/sh", "-c", command],
                    cwd=self.workdir,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=timeout,
                )
                if proc.returncode != 0:
                    raise RuntimeError(
                        f"Dockerfile line {ins.line}: RUN {command!r} failed ({proc.returncode})\n"
                        f"--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-4000:]}"
                    )
            elif ins.keyword in {"LABEL", "EXPOSE", "USER", "HEALTHCHECK", "ENTRYPOINT", "CMD", "STOPSIGNAL"}:
                continue  # metadata: checked by the tests, nothing to replay
            else:
                raise NotImplementedError(f"Dockerfile line {ins.line}: {ins.keyword} is not supported by the checker")
        return BuildResult(root=self.root, env=self.env, workdir=self.workdir, commands=commands)

    def _copy(self, ins: Instruction, scope: dict[str, str]) -> None:
        tokens = shlex.split(ins.args)
        flags = [t for t in tokens if t.startswith("--")]
        paths = [_expand(t, scope) for t in tokens if not t.startswith("--")]
        if any(f.startswith("--from=") for f in flags):
            raise NotImplementedError("COPY --from is only supported in the runtime stage")
        *sources, dest = paths
        dest_path = Path(self.map_path(dest)) if dest.startswith("/") else self.workdir / dest
        as_dir = dest.endswith("/") or len(sources) > 1
        for src in sources:
            src_path = (self.context / src).resolve()
            if not src_path.is_relative_to(self.context.resolve()):
                raise ValueError(f"COPY source {src!r} is outside the build context")
            rel = src_path.relative_to(self.context.resolve()).as_posix()
            if not src_path.exists():
                raise FileNotFoundError(f"Dockerfile line {ins.line}: COPY source {src!r} does not exist")
            if src_path.is_dir():
                copied = 0
                for file in sorted(src_path.rglob("*")):
                    if not file.is_file():
                        continue
                    file_rel = file.relative_to(self.context.resolve()).as_posix()
                    if is_ignored(file_rel, self.rules):
                        continue
                    target = dest_path / file.relative_to(src_path)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(file, target)
                    copied += 1
                if copied == 0:
                    raise FileNotFoundError(f"Dockerfile line {ins.line}: COPY {src!r}: nothing left after .dockerignore")
            else:
                if is_ignored(rel, self.rules):
                    raise FileNotFoundError(f"Dockerfile line {ins.line}: COPY {src!r} is excluded by .dockerignore")
                target = dest_path / src_path.name if as_dir else dest_path
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src_path, target)
