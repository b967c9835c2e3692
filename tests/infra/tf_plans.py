"""Planning infra/terraform offline in the infrastructure tests: the variables of a plan against the
local AWS endpoint (moto.tfvars, fixed secret ARNs), a refused plan's message, and reading `terraform
show -json` (the resources to create, their configuration expressions, the planned outputs). A uniquely
named module, as tf_helpers.py is, imported through the path conftest.py sets."""

from __future__ import annotations

from tf_helpers import TF_TEST_DIR

MOTO_VARS = f"-var-file={TF_TEST_DIR / 'moto.tfvars'}"
API_KEYS_SECRET_ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:lakelog/keys-AbCdEf"
CLUSTER_SECRET_ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:lakelog/cluster-AbCdEf"
KAFKA_TLS_SECRET_ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:lakelog/kafka-tls-AbCdEf"
KAFKA_PEM_PATH = "/tmp/lakelog-kafka-tls.pem"


def plan_error(terraform, workdir, *args) -> str:
    proc = terraform.run(["plan", "-input=false", "-lock=false", "-no-color", MOTO_VARS, *args], workdir, check=False)
    assert proc.returncode != 0, "the plan should have been refused"
    return " ".join((proc.stdout + proc.stderr).split())  # unwrap terraform's line wrapping


def created_resources(plan: dict) -> dict[str, dict]:
    """address -> planned values, for every resource to create."""
    out = {}
    for rc in plan["resource_changes"]:
        if rc["change"]["actions"] == ["create"]:
            out[rc["address"]] = rc["change"]["after"]
    return out


def secrets_by_name(secrets: list[dict]) -> dict[str, str]:
    """A container's secrets, name -> ARN (the provider keeps them sorted by name)."""
    return {s["name"]: s["valueFrom"] for s in secrets}


def configured_expressions(plan: dict, address: str) -> dict:
    """The configuration expressions of a root-module resource (for values
    that are unknown until apply, such as the id a rule refers to)."""
    (resource,) = [r for r in plan["configuration"]["root_module"]["resources"] if r["address"] == address]
    return resource["expressions"]


def three_node_plan(terraform, workdir) -> dict:
    # Known image, bucket and secrets, so that the container definition is
    # known at plan time.
    args = [
        MOTO_VARS,
        "-var", "desired_count=3",
        "-var", "max_task_count=9",
        "-var", "broker_heartbeat_interval_ms=1000",
        "-var", "broker_session_timeout_ms=5000",
        "-var", "bucket_name=lakelog-three-nodes",
        "-var", "image_uri=registry.example.com/lakelog:1.0.0",
        "-var", f"api_keys_secret_arn={API_KEYS_SECRET_ARN}",
        "-var", f"cluster_secret_arn={CLUSTER_SECRET_ARN}",
        "-var", f"kafka_tls_secret_arn={KAFKA_TLS_SECRET_ARN}",
    ]
    return terraform.show_plan(workdir, args)


def planned_outputs(plan: dict) -> dict:
    return {k: v.get("value") for k, v in plan["planned_values"]["outputs"].items()}
