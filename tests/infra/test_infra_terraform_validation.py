"""Offline checks of infra/terraform's variable validations: plans with inconsistent or bad values
(scale-out settings, prefixes, the network, the Kafka listener's port, CIDRs, DNS namespace and TLS
files) are refused, with a message naming each problem."""

from __future__ import annotations

from tf_helpers import self_signed_certificate
from tf_plans import KAFKA_TLS_SECRET_ARN, plan_error


def test_scale_out_values_are_validated(terraform, plan_workdir):
    """Any number of tasks is accepted (the single-task refusal is gone); what
    is refused is an inconsistent cluster: autoscaling below desired_count, a
    session timeout that one late heartbeat would exceed, a stop timeout
    Fargate does not allow, cluster settings set behind the module's back."""
    message = plan_error(
        terraform,
        plan_workdir,
        "-var", "desired_count=4",
        "-var", "max_task_count=3",
        "-var", "broker_heartbeat_interval_ms=5000",
        "-var", "broker_session_timeout_ms=9000",
        "-var", "stop_timeout_seconds=300",
        "-var", 'service_environment={"LAKELOG_CLUSTER_SECRET":"x","LAKELOG_ADVERTISE":"http://10.0.0.1:8080"}',
    )
    for expected in [
        "max_task_count must be at least desired_count",
        "at least twice broker_heartbeat_interval_ms",
        "stop_timeout_seconds must be a whole number between 10 and 120",
        "must not set LAKELOG_API_KEYS_JSON or LAKELOG_CLUSTER_SECRET",
    ]:
        assert expected in message, f"missing {expected!r} in:\n{message}"
    assert "does not yet coordinate" not in message, "the single-task refusal is gone"

    message = plan_error(terraform, plan_workdir, "-var", "desired_count=1.5", "-var", "cluster_secret_arn=not-an-arn")
    assert "desired_count must be a whole number between 0" in message
    assert "cluster_secret_arn must be a Secrets Manager secret ARN or null" in message


def test_bad_values_are_refused(terraform, plan_workdir):
    message = plan_error(
        terraform,
        plan_workdir,
        "-var", "root_prefix=",
        "-var", "emr_release_label=emr-7.9.0",
        "-var", "vpc_id=vpc-0123456789abcdef0",
        "-var", "retention_interval_minutes=1",
        "-var", "create_bucket=false",
        "-var", 'service_environment={"LAKELOG_API_KEYS_JSON":"x"}',
    )
    for expected in [
        "an empty prefix would grant access to the whole bucket",
        "must be a Spark 4 release (emr-spark-8.x.y)",
        "give at least two public_subnet_ids",
        "retention_interval_minutes must be a whole number, at least 5",
        "bucket_name is required when create_bucket is false",
        "must not set LAKELOG_API_KEYS_JSON",
    ]:
        assert expected in message, f"missing {expected!r} in:\n{message}"


def test_artifacts_inside_the_root_are_refused(terraform, plan_workdir):
    message = plan_error(terraform, plan_workdir, "-var", "artifacts_prefix=lakelog/artifacts")
    assert "must not contain one another" in message


def test_kafka_values_are_validated(terraform, plan_workdir, tmp_path):
    certificate, key = self_signed_certificate(tmp_path, ["kafka.lakelog-test.internal"])
    message = plan_error(
        terraform,
        plan_workdir,
        "-var", "kafka_port=8080",
        "-var", 'kafka_client_cidrs=["10.0.0.0/8","everyone"]',
        "-var", "kafka_dns_namespace=Not A Domain",
        "-var", f"kafka_tls_certificate_file={certificate}",
        "-var", 'service_environment={"LAKELOG_KAFKA_ADVERTISE":"x:9092"}',
    )
    for expected in [
        "kafka_port must be a whole TCP port number between 1 and 65535, other than the HTTP port 8080",
        "kafka_client_cidrs must be a list of IPv4 CIDR blocks",
        "kafka_dns_namespace must be a lowercase DNS domain",
        "Give kafka_tls_certificate_file and kafka_tls_private_key_file together, or neither",
        "the module sets the Kafka listener up from the kafka_* variables",
    ]:
        assert expected in message, f"missing {expected!r} in:\n{message}"

    # (Terraform skips the validations that refer to another variable when
    # that one is invalid: one refused file per plan.)
    message = plan_error(
        terraform,
        plan_workdir,
        "-var", f"kafka_tls_certificate_file={certificate}",
        "-var", f"kafka_tls_private_key_file={certificate}",  # a certificate, not a key
    )
    assert "kafka_tls_private_key_file must be a readable, unencrypted PEM private key" in message

    message = plan_error(
        terraform,
        plan_workdir,
        "-var", "vpc_id=vpc-0a1b2c3d4e5f60718",
        "-var", 'public_subnet_ids=["subnet-0aaaaaaaaaaaaaaa1","subnet-0aaaaaaaaaaaaaaa2"]',
        "-var", 'private_subnet_ids=["subnet-0bbbbbbbbbbbbbbb1"]',
        "-var", f"kafka_tls_certificate_file={tmp_path / 'missing.crt'}",
        "-var", f"kafka_tls_private_key_file={key}",
        "-var", f"kafka_tls_secret_arn={KAFKA_TLS_SECRET_ARN}",
    )
    assert "kafka_tls_certificate_file must be a readable PEM file holding a certificate" in message
    assert "cannot be combined with an existing kafka_tls_secret_arn" in message
    assert "With an existing vpc_id, kafka_client_cidrs must list the CIDR blocks of the Kafka clients" in message
