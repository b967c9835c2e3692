"""The Dockerfile: a slim Python base, a non-root user, `lakelog serve`, and
install steps that really produce a working `lakelog` command.

No Docker engine is available here, so the build stage is replayed by
dockerfile_check (see its docstring): its RUN install commands run in a fresh
virtual environment built from the same build context (.dockerignore applied).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dockerfile_check import StageReplayer, exec_form, parse, parse_env_args

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"


def _stages():
    return parse(DOCKERFILE.read_text())


def _instructions(stage, keyword):
    return [i for i in stage.instructions if i.keyword == keyword]


def _install_stage(stages):
    matches = [s for s in stages if any("pip install" in i.args for i in _instructions(s, "RUN"))]
    assert len(matches) == 1, "exactly one stage should pip-install the package"
    return matches[0]


def test_runtime_stage_is_slim_python_non_root_and_serves():
    global_args, stages = _stages()
    runtime = stages[-1]
    assert runtime.base.startswith("python:3.11") and "slim" in runtime.base, runtime.base

    users = _instructions(runtime, "USER")
    assert users, "the runtime stage must switch to a non-root user"
    user = users[-1].args.split(":")[0]
    assert user not in {"root", "0"}, f"runs as {user}"

    entrypoint = exec_form(_instructions(runtime, "ENTRYPOINT")[-1].args)
    cmd = exec_form(_instructions(runtime, "CMD")[-1].args)
    assert entrypoint == ["lakelog"]
    assert cmd[:1] == ["serve"] and "--port" in cmd and cmd[cmd.index("--port") + 1] == "8080"
    assert cmd[cmd.index("--host") + 1] == "0.0.0.0"
    assert any("8080" in i.args.split() for i in _instructions(runtime, "EXPOSE"))

    # The runtime stage takes the virtual environment the build stage made and
    # puts its bin/ first on PATH, so the ENTRYPOINT `lakelog` resolves to it.
    build = _install_stage(stages)
    build_env = dict(kv for i in _instructions(build, "ENV") for kv in parse_env_args(i.args))
    venv = build_env["VIRTUAL_ENV"]
    copies = [i.args.split() for i in _instructions(runtime, "COPY") if i.args.startswith("--from=")]
    assert [f"--from={build.name}", venv, venv] in copies
    runtime_env = dict(kv for i in _instructions(runtime, "ENV") for kv in parse_env_args(i.args))
    assert runtime_env["PATH"].split(":")[0] == f"{venv}/bin"


def test_install_command_is_the_readme_one():
    _, stages = _stages()
    runs = [i.args for i in _instructions(_install_stage(stages), "RUN")]
    installs = [r for r in runs if "pip install" in r]
    assert len(installs) == 1
    # `pip install .` from the repository root, as the README says.
    assert installs[0].split()[-1] == "."
    assert any("-m venv" in r for r in runs), "the package goes into a virtual environment"


def test_dockerignore_keeps_what_the_install_needs_and_drops_the_rest():
    from dockerfile_check import is_ignored, load_dockerignore

    rules = load_dockerignore(REPO)
    for kept in ["pyproject.toml", "README.md", "lakelog/__init__.py", "lakelog/platform/x.py"]:
        assert not is_ignored(kept, rules), kept
    for dropped in [".venv/bin/python", ".git/HEAD", "tests/test_x.py", "infra/terraform/main.tf",
                    "lakelog/__pycache__/x.cpython-311.pyc", "data/topics/x.parquet", "lakelog.egg-info/PKG-INFO"]:
        assert is_ignored(dropped, rules), dropped


@pytest.mark.slow
def test_build_stage_install_gives_a_working_lakelog_command(tmp_path):
    global_args, stages = _stages()
    stage = _install_stage(stages)

    # `python` in the RUN commands is the image's Python 3.11: use this
    # machine's 3.11 interpreter (not the project venv's) the same way.
    host_bin = tmp_path / "host-bin"
    host_bin.mkdir()
    base_python = getattr(sys, "_base_executable", sys.executable)
    (host_bin / "python").symlink_to(base_python)
    host_path = f"{host_bin}:{os.environ.get('PATH', '/usr/bin:/bin')}"

    replayer = StageReplayer(REPO, tmp_path / "rootfs", global_args, host_path)
    try:
        _check_installed_command(replayer.run(stage, timeout=900), tmp_path)
    finally:
        shutil.rmtree(tmp_path / "rootfs", ignore_errors=True)  # ~1 GB of site-packages


def _check_installed_command(result, tmp_path):
    venv = Path(result.env["VIRTUAL_ENV"])
    assert venv.is_relative_to(tmp_path), "the replay must not touch the real filesystem"
    lakelog = venv / "bin" / "lakelog"
    assert lakelog.exists(), f"`pip install .` did not install the lakelog console script ({result.commands})"

    env = {**os.environ, **result.env, "HOME": str(tmp_path)}
    out = subprocess.run([str(lakelog), "--help"], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "serve" in out.stdout

    out = subprocess.run([str(lakelog), "serve", "--help"], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    for option in ["--host", "--port"]:
        assert option in out.stdout, f"`lakelog serve` lacks {option}, which the image and the task definition use"
    # (The root is passed as LAKELOG_ROOT, which the settings read whatever the CLI's flags.)
