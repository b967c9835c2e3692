"""Helpers of the infrastructure tests (imported by conftest.py and the test
modules; a uniquely named module, since `conftest` is ambiguous in a suite
with several conftest.py files)."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TF_MODULE = REPO / "infra" / "terraform"
TF_TEST_DIR = REPO / "infra" / "test"
PROVIDER_VERSION = "5.100.0"


@dataclass
class Terraform:
    binary: str
    env: dict[str, str]

    def run(self, args: list[str], cwd: Path, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            [self.binary, *args],
            cwd=cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"terraform {' '.join(args)} failed ({proc.returncode}) in {cwd}\n"
                f"--- stdout ---\n{proc.stdout[-6000:]}\n--- stderr ---\n{proc.stderr[-6000:]}"
            )
        return proc

    def show_plan(self, cwd: Path, args: list[str], timeout: float = 300) -> dict:
        """`terraform plan -out` + `terraform show -json`."""
        self.run(["plan", "-input=false", "-lock=false", "-no-color", "-out=tfplan", *args], cwd, timeout)
        proc = self.run(["show", "-json", "tfplan"], cwd, timeout)
        return json.loads(proc.stdout)


def make_workdir(initialized: Path, dest: Path, endpoint: str | None) -> Path:
    """A fresh copy of the initialized module; with the test-only provider
    override pointing every AWS service at ``endpoint``."""
    work = dest / "terraform"
    shutil.copytree(initialized, work, symlinks=True, ignore=shutil.ignore_patterns("*.tfstate*", "tfplan"))
    if endpoint is not None:
        override = (TF_TEST_DIR / "override.tf.tpl").read_text().replace("@ENDPOINT@", endpoint)
        (work / "override.tf").write_text(override)
    return work


def self_signed_certificate(folder: Path, names: list[str]) -> tuple[Path, Path]:
    """A self-signed certificate for the DNS ``names`` and its unencrypted
    key, as PEM files in ``folder`` (made with the openssl command, as a user
    would for a first deployment)."""
    certificate, key = folder / "kafka.crt", folder / "kafka.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", f"/CN={names[0]}",
         "-addext", "subjectAltName=" + ",".join(f"DNS:{n}" for n in names), "-keyout", str(key), "-out", str(certificate)],
        check=True, capture_output=True,
    )
    return certificate, key
