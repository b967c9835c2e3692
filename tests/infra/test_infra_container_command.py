"""The ECS container's command of infra/terraform's plan, run as ECS would (/bin/sh -c) against a stand-in
task metadata endpoint on 127.0.0.1: it advertises the task's address to HTTP peers and Kafka clients,
writes the Kafka TLS bundle to a file only the user can read (which lakelog's listener serves TLS from),
and stops rather than start lakelog without TLS or without the metadata endpoint."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from tf_helpers import self_signed_certificate
from tf_plans import KAFKA_PEM_PATH, created_resources, planned_outputs, three_node_plan


# A task metadata (v4) answer of a Fargate task, as the endpoint gives it
# (trimmed): https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-metadata-endpoint-v4-fargate.html
TASK_METADATA = {
    "Cluster": "arn:aws:ecs:us-east-1:123456789012:cluster/lakelog",
    "TaskARN": "arn:aws:ecs:us-east-1:123456789012:task/lakelog/0123456789abcdef0123456789abcdef",
    "Family": "lakelog-ingest",
    "LaunchType": "FARGATE",
    "Containers": [
        {
            "Name": "lakelog",
            "Networks": [
                {
                    "NetworkMode": "awsvpc",
                    "IPv4Addresses": ["10.40.23.17"],
                    "AttachmentIndex": 0,
                    "PrivateDNSName": "ip-10-40-23-17.ec2.internal",
                    "SubnetGatewayIpv4Address": "10.40.16.1/20",
                }
            ],
        }
    ],
}


def _run_serve_command(script: str, tmp_path, metadata_uri: str | None,
                       extra_env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, Path]:
    """Runs the container's command as ECS would (/bin/sh -c), with the
    image's `python` and a stand-in `lakelog` that records how it was
    started (its arguments and environment, as JSON)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    record = tmp_path / "lakelog-started.json"
    stub = bin_dir / "lakelog"
    stub.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        f"json.dump({{'args': sys.argv[1:], 'env': dict(os.environ)}}, open({str(record)!r}, 'w'))\n"
    )
    stub.chmod(0o755)
    if not (bin_dir / "python").exists():
        (bin_dir / "python").symlink_to(sys.executable)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path), **(extra_env or {})}
    if metadata_uri is not None:
        env["ECS_CONTAINER_METADATA_URI_V4"] = metadata_uri
    proc = subprocess.run(["/bin/sh", "-c", script], env=env, capture_output=True, text=True, timeout=60)
    return proc, record


class _MetadataEndpoint:
    """A stand-in task metadata endpoint (v4) on 127.0.0.1 answering `task`
    at /v4/abc-123/task."""

    def __init__(self, task: dict) -> None:
        self.requests: list[str] = []
        requests, body = self.requests, json.dumps(task).encode()

        class Metadata(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's naming
                requests.append(self.path)
                found = self.path == "/v4/abc-123/task"
                answer = body if found else b"{}"
                self.send_response(200 if found else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args):
                pass

        self._server = HTTPServer(("127.0.0.1", 0), Metadata)
        self.uri = f"http://127.0.0.1:{self._server.server_address[1]}/v4/abc-123"

    def __enter__(self) -> "_MetadataEndpoint":
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()


def _container(plan: dict) -> dict:
    (container,) = json.loads(created_resources(plan)["aws_ecs_task_definition.ingest"]["container_definitions"])
    return container


def _tls_handshake(server_pem: Path, ca_file: Path, server_hostname: str) -> None:
    """A TLS handshake over a socket pair: lakelog's listener context from
    `server_pem` against a client that trusts `ca_file` and checks the host
    name, as librdkafka and the Java client do by default."""
    from lakelog.kafka_api.listener import tls_context

    server_side, client_side = socket.socketpair()
    for end in (server_side, client_side):
        end.settimeout(60)
    failures: list[BaseException] = []

    def serve() -> None:
        try:
            with tls_context(str(server_pem), None).wrap_socket(server_side, server_side=True) as tls:
                tls.sendall(tls.recv(1))
        except (OSError, ssl.SSLError) as exc:
            failures.append(exc)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        client = ssl.create_default_context(cafile=str(ca_file))
        with client.wrap_socket(client_side, server_hostname=server_hostname) as tls:
            tls.sendall(b"k")
            assert tls.recv(1) == b"k"
    finally:
        thread.join(60)
    assert not failures, failures


def test_container_advertises_the_task_ip_from_task_metadata(terraform, plan_workdir, tmp_path):
    raw = three_node_plan(terraform, plan_workdir)
    container = _container(raw)
    (script,) = container["command"]
    # The PEM bundle goes to a fixed path in the task's /tmp volume; here, to
    # this test's folder instead.
    assert script.count(KAFKA_PEM_PATH) == 1
    pem_file = tmp_path / "kafka-tls.pem"
    script = script.replace(KAFKA_PEM_PATH, str(pem_file))
    # A certificate for the names the module says it must cover.
    names = planned_outputs(raw)["kafka_tls_dns_names"]
    assert names == ["kafka.lakelog-test.internal", "*.ec2.internal"]
    certificate, key = self_signed_certificate(tmp_path, names)
    bundle = certificate.read_text().strip() + "\n" + key.read_text().strip()

    with _MetadataEndpoint(TASK_METADATA) as metadata:
        proc, record = _run_serve_command(script, tmp_path, metadata.uri, {"KAFKA_TLS_PEM": bundle})
    assert proc.returncode == 0, proc.stderr
    assert metadata.requests == ["/v4/abc-123/task"]
    started = json.loads(record.read_text())
    assert started["args"] == ["serve", "--host", "0.0.0.0", "--port", "8080"]
    env = started["env"]
    assert env["LAKELOG_ADVERTISE"] == "http://10.40.23.17:8080"
    assert "advertising http://10.40.23.17:8080" in proc.stderr
    # Kafka clients are told the task's private DNS name, which the
    # certificate covers (*.ec2.internal in us-east-1), on the Kafka port.
    assert env["LAKELOG_KAFKA_ADVERTISE"] == "ip-10-40-23-17.ec2.internal:9092"
    assert "warning" not in proc.stderr
    # The certificate and key were written to a file only the user can read,
    # and left the environment before lakelog started.
    assert "KAFKA_TLS_PEM" not in env
    assert pem_file.read_text() == bundle + "\n"
    assert pem_file.stat().st_mode & 0o777 == 0o600
    # lakelog's listener serves TLS from that one file (chain and key), and a
    # client that checks host names accepts it for the bootstrap name and for
    # the advertised name, not for a name the certificate does not cover.
    advertised_host = env["LAKELOG_KAFKA_ADVERTISE"].rsplit(":", 1)[0]
    for host in ("kafka.lakelog-test.internal", advertised_host):
        _tls_handshake(pem_file, certificate, host)
    with pytest.raises(ssl.SSLCertVerificationError):
        _tls_handshake(pem_file, certificate, "ip-10-40-23-17.eu-west-1.compute.internal")
    env_file = {e["name"]: e["value"] for e in container["environment"]}["LAKELOG_KAFKA_TLS_CERT_FILE"]
    assert env_file == KAFKA_PEM_PATH and "LAKELOG_KAFKA_TLS_KEY_FILE" not in env

    # An empty TLS secret stops the task: no Kafka listener without TLS.
    record.unlink()
    pem_file.unlink()
    with _MetadataEndpoint(TASK_METADATA) as metadata:
        proc, record = _run_serve_command(script, tmp_path, metadata.uri, {"KAFKA_TLS_PEM": ""})
    assert proc.returncode != 0
    assert "the Kafka TLS secret is empty" in proc.stderr
    assert not record.exists() and not pem_file.exists()

    # Without the metadata endpoint the task stops rather than advertise an
    # address no other node can reach; lakelog is never started.
    proc, record = _run_serve_command(script, tmp_path, None, {"KAFKA_TLS_PEM": bundle})
    assert proc.returncode != 0
    assert "ECS_CONTAINER_METADATA_URI_V4 is not set" in proc.stderr
    assert not record.exists()


def test_container_without_a_private_dns_name_advertises_its_ip_to_kafka_clients(terraform, plan_workdir, tmp_path):
    (script,) = _container(three_node_plan(terraform, plan_workdir))["command"]
    script = script.replace(KAFKA_PEM_PATH, str(tmp_path / "kafka-tls.pem"))
    task = json.loads(json.dumps(TASK_METADATA))
    del task["Containers"][0]["Networks"][0]["PrivateDNSName"]
    with _MetadataEndpoint(task) as metadata:
        proc, record = _run_serve_command(script, tmp_path, metadata.uri, {"KAFKA_TLS_PEM": "-----BEGIN CERTIFICATE-----"})
    assert proc.returncode == 0, proc.stderr
    env = json.loads(record.read_text())["env"]
    assert env["LAKELOG_ADVERTISE"] == "http://10.40.23.17:8080"
    assert env["LAKELOG_KAFKA_ADVERTISE"] == "10.40.23.17:9092"
    assert "no private DNS name" in proc.stderr
