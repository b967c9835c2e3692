"""TLS on the Kafka listener when a certificate is configured, with SASL/PLAIN on top (SASL_SSL)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
from confluent_kafka import KafkaError, Producer

from tests.http.conftest import start_server  # noqa: F401  (the fixture)
from tests.patience import STUCK_S

KEYS = '{"k-admin": "admin"}'


def self_signed(folder: Path) -> tuple[Path, Path]:
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return cert, key


def send_one(config: dict) -> tuple[list, list]:
    delivered: list = []
    errors: list = []
    producer = Producer({"message.timeout.ms": 5000, "socket.timeout.ms": 3000, **config})
    producer.produce("secure", value=b"v", on_delivery=lambda err, msg: (errors if err else delivered).append(
        err or msg.offset()))
    producer.flush(15)
    return delivered, errors


def test_sasl_ssl_produce_and_plaintext_refused(start_server, tmp_path: Path) -> None:  # noqa: F811
    cert, key = self_signed(tmp_path)
    server = start_server(api_keys_json=KEYS, kafka_tls_cert_file=str(cert), kafka_tls_key_file=str(key))
    httpx.post(f"{server.url}/v1/topics", json={"name": "secure"},
               headers={"Authorization": "Bearer k-admin"}, timeout=STUCK_S).raise_for_status()
    secure = {"bootstrap.servers": server.bootstrap, "security.protocol": "SASL_SSL", "ssl.ca.location": str(cert),
              "sasl.mechanism": "PLAIN", "sasl.username": "admin", "sasl.password": "k-admin"}
    assert send_one(secure) == ([0], [])

    delivered, errors = send_one({"bootstrap.servers": server.bootstrap, "message.timeout.ms": 2000})  # no TLS
    assert delivered == [] and errors and errors[0].code() == KafkaError._MSG_TIMED_OUT
    records = httpx.get(f"{server.url}/v1/topics/secure/partitions/0/records", params={"offset": 0},
                        headers={"Authorization": "Bearer k-admin"}, timeout=STUCK_S).json()["records"]
    assert [r["value"] for r in records] == ["v"]
