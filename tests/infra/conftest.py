"""Fixtures for the infrastructure tests: terraform through the local provider
mirror (no network), working copies of infra/terraform in temporary
directories, and a local AWS endpoint (moto server on 127.0.0.1).

Environment:
  LAKELOG_TF_PLUGIN_MIRROR   filesystem mirror holding
                             registry.terraform.io/hashicorp/aws/5.100.0/<os_arch>
                             (default /opt/tf-plugins)
  LAKELOG_TERRAFORM          terraform binary (default: `terraform` on PATH)
  LAKELOG_REQUIRE_TERRAFORM  set to 1 to fail, not skip, when terraform or
                             the mirror is missing
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # dockerfile_check, moto_local, tf_helpers

from tf_helpers import PROVIDER_VERSION, REPO, TF_MODULE, Terraform, make_workdir  # noqa: E402


def _missing(reason: str):
    if os.environ.get("LAKELOG_REQUIRE_TERRAFORM") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def terraform(tmp_path_factory) -> Terraform:
    binary = os.environ.get("LAKELOG_TERRAFORM") or shutil.which("terraform")
    if not binary:
        _missing("terraform is not installed")
    mirror = Path(os.environ.get("LAKELOG_TF_PLUGIN_MIRROR", "/opt/tf-plugins"))
    provider_dir = mirror / "registry.terraform.io" / "hashicorp" / "aws" / PROVIDER_VERSION
    if not provider_dir.is_dir():
        _missing(f"the AWS provider {PROVIDER_VERSION} is not in the filesystem mirror {mirror}")

    home = tmp_path_factory.mktemp("tf-cli")
    template = (REPO / "infra" / "mirror.tfrc.tpl").read_text()
    cli_config = home / "mirror.tfrc"
    cli_config.write_text(template.replace("@MIRROR@", json.dumps(str(mirror))[1:-1]))

    env = {
        k: v
        for k, v in os.environ.items()
        # Never let a real AWS identity or a stray terraform setting in.
        if not k.startswith(("AWS_", "TF_")) or k == "AWS_CA_BUNDLE"
    }
    env.update(
        TF_CLI_CONFIG_FILE=str(cli_config),
        TF_IN_AUTOMATION="1",
        TF_INPUT="0",
        CHECKPOINT_DISABLE="1",  # no version check over the network
        AWS_EC2_METADATA_DISABLED="true",
        AWS_SHARED_CREDENTIALS_FILE=str(home / "no-credentials"),
        AWS_CONFIG_FILE=str(home / "no-config"),
    )
    return Terraform(binary=binary, env=env)


@pytest.fixture(scope="session")
def initialized_module(terraform, tmp_path_factory) -> Path:
    """A copy of infra/terraform after `terraform init -backend=false`."""
    work = tmp_path_factory.mktemp("tf-base") / "terraform"
    shutil.copytree(TF_MODULE, work, ignore=shutil.ignore_patterns(".terraform", "*.tfstate*", "override.tf", "*.tfplan"))
    terraform.run(["init", "-backend=false", "-input=false", "-no-color"], work, timeout=180)
    return work


@pytest.fixture(scope="session")
def local_aws():
    from moto_local import LocalAws

    aws = LocalAws().start()
    try:
        yield aws
    finally:
        aws.stop()


@pytest.fixture
def plan_workdir(initialized_module, local_aws, tmp_path) -> Path:
    return make_workdir(initialized_module, tmp_path, local_aws.endpoint)


@pytest.fixture(scope="session")
def stack(terraform, initialized_module, local_aws, tmp_path_factory):
    """infra/terraform applied to the local AWS endpoint (tf_stack.py), once for all the apply tests
    (test_infra_terraform_apply_*.py); test_infra_terraform_destroy.py, sorted after them, destroys it."""
    from tf_stack import applied_stack

    yield from applied_stack(terraform, initialized_module, local_aws, tmp_path_factory)
