"""Offline checks of infra/terraform as a module: formatting (the module, the test-only provider override,
the example tfvars), `init -backend=false` through the provider mirror, `validate`, every variable and
output described, none carrying a secret, and the example tfvars passing the variable validations."""

from __future__ import annotations

import json

from tf_helpers import TF_MODULE, TF_TEST_DIR
from tf_plans import created_resources


def test_fmt(terraform):
    proc = terraform.run(["fmt", "-check", "-recursive", "-diff", "-no-color", str(TF_MODULE)], TF_MODULE, check=False)
    assert proc.returncode == 0, f"terraform fmt -recursive infra/terraform needed:\n{proc.stdout}{proc.stderr}"


def test_test_override_is_formatted(terraform, tmp_path):
    rendered = tmp_path / "override.tf"
    rendered.write_text((TF_TEST_DIR / "override.tf.tpl").read_text().replace("@ENDPOINT@", "http://127.0.0.1:1"))
    proc = terraform.run(["fmt", "-check", "-diff", "-no-color", str(rendered)], tmp_path, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_init_uses_only_the_mirror_and_pins_the_provider(initialized_module):
    lock = (initialized_module / ".terraform.lock.hcl").read_text()
    assert 'provider "registry.terraform.io/hashicorp/aws"' in lock
    assert 'version     = "5.100.0"' in lock
    assert 'constraints = "5.100.0"' in lock


def test_validate(terraform, initialized_module):
    proc = terraform.run(["validate", "-json", "-no-color"], initialized_module)
    result = json.loads(proc.stdout)
    assert result["valid"], result
    assert result["warning_count"] == 0, result["diagnostics"]


def test_every_variable_and_output_is_described():
    import re

    for path in sorted(TF_MODULE.rglob("*.tf")):
        text = path.read_text()
        for kind in ("variable", "output"):
            for match in re.finditer(rf'^{kind} "([^"]+)" \{{\n(.*?)^\}}', text, re.S | re.M):
                assert "description" in match.group(2), f"{path.name}: {kind} {match.group(1)} has no description"


def test_no_variable_or_output_carries_a_secret():
    """The API keys never pass through Terraform: no variable or output may
    hold them (an ARN is fine), so nothing needs `sensitive`."""
    import re

    for path in sorted(TF_MODULE.rglob("*.tf")):
        for name in re.findall(r'^(?:variable|output) "([^"]+)"', path.read_text(), re.M):
            lowered = name.lower()
            if any(word in lowered for word in ("password", "api_key", "token", "secret", "credential")):
                assert lowered.endswith("_arn") or lowered.startswith("secret_recovery"), f"{path.name}: {name}"


def test_tfvars_example_is_formatted_and_accepted(terraform, plan_workdir, tmp_path):
    example = TF_MODULE / "terraform.tfvars.example"
    copy = tmp_path / "example.tfvars"
    copy.write_text(example.read_text())
    proc = terraform.run(["fmt", "-check", "-diff", "-no-color", str(copy)], tmp_path, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # Every value in the example passes the variable validations.
    plan = created_resources(terraform.show_plan(plan_workdir, [f"-var-file={copy}"]))
    assert plan["aws_ecs_service.ingest"]["desired_count"] == 0
    assert all(s["state"] == "DISABLED" for a, s in plan.items() if a.startswith("aws_scheduler_schedule.job"))
