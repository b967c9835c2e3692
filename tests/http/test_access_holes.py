"""Access control without holes (hardening, item 3): metrics, docs, revoked rights on polls, offset resets,
group descriptions, subscription patterns, an empty key set, and the scheduler's secrets (test_serve_jobs)."""

from __future__ import annotations

import json
from typing import Iterator

import httpx
import pytest

from lakelog.ingest_api.server import RefusedToStart, check_exposure
from lakelog.settings import Settings
from tests.http.conftest import ThreadServer, make_settings

KEYS = {"key-admin": "admin", "key-alice": "alice", "key-mallory": "mallory", "key-ops": "ops"}


def as_(server: ThreadServer, key: str | None) -> httpx.Client:
    return server.client(headers={"Authorization": f"Bearer {key}"} if key else {})


def grant(server: ThreadServer, *acls: dict) -> None:
    with as_(server, "key-admin") as admin:
        assert admin.post("/v1/acls", json={"acls": list(acls)}).status_code == 201


def revoke(server: ThreadServer, **acl_filter: str) -> None:
    with as_(server, "key-admin") as admin:
        assert admin.delete("/v1/acls", params=acl_filter).status_code == 200


@pytest.fixture
def secured(tmp_path) -> Iterator[ThreadServer]:
    server = ThreadServer(make_settings(tmp_path / "root", api_keys_json=json.dumps(KEYS))).start()
    with as_(server, "key-admin") as admin:
        for name in ("open", "private"):
            assert admin.post("/v1/topics", json={"name": name, "partitions": 2}).status_code == 201
            admin.post(f"/v1/topics/{name}/records", json={"records": [{"value": f"{name}-{i}"} for i in range(4)]})
    yield server
    server.stop()


def test_metrics_need_describe_on_the_cluster(secured: ThreadServer) -> None:
    with as_(secured, "key-admin") as admin:  # metrics that name the private topic exist
        admin.get("/v1/topics/private/partitions/0/records", params={"offset": 0})
        assert "private" in admin.get("/metrics").text
    with as_(secured, None) as nobody:
        assert nobody.get("/metrics").status_code == 401
    with as_(secured, "key-alice") as alice:
        refused = alice.get("/metrics")
        assert refused.status_code == 403 and refused.json()["error_code"] == "CLUSTER_AUTHORIZATION_FAILED"
        assert "private" not in refused.text
    grant(secured, {"principal": "ops", "resource_type": "cluster", "resource_name": "kafka-cluster",
                    "operation": "describe"})
    with as_(secured, "key-ops") as ops:
        answer = ops.get("/metrics")
        assert answer.status_code == 200 and "lakelog_produce_records" in answer.text
    with as_(secured, "key-admin") as admin:
        bad = admin.post("/v1/acls", json={"acls": [{"principal": "ops", "resource_type": "cluster",
                                                      "resource_name": "other", "operation": "describe"}]})
        assert bad.status_code == 422 and "kafka-cluster" in bad.json()["message"]


def test_docs_can_require_a_key(tmp_path) -> None:
    open_docs = ThreadServer(make_settings(tmp_path / "a", api_keys_json=json.dumps(KEYS))).start()
    guarded = ThreadServer(make_settings(tmp_path / "b", api_keys_json=json.dumps(KEYS),
                                         docs_require_key=True)).start()
    try:
        with as_(open_docs, None) as nobody:
            assert nobody.get("/openapi.json").status_code == 200
        with as_(guarded, None) as nobody:
            for path in ("/openapi.json", "/docs", "/redoc"):
                refused = nobody.get(path)
                assert refused.status_code == 401 and refused.json()["error_code"] == "SASL_AUTHENTICATION_FAILED"
            assert nobody.get("/healthz").status_code == 200
        with as_(guarded, "key-alice") as alice:
            assert alice.get("/openapi.json").json()["info"]["title"] == "lakelog"
            assert alice.get("/docs").status_code == 200
    finally:
        open_docs.stop()
        guarded.stop()


def test_a_revoked_read_right_stops_a_member_that_already_joined(secured: ThreadServer) -> None:
    grant(secured, {"principal": "alice", "resource_type": "topic", "resource_name": "open", "operation": "read"},
          {"principal": "alice", "resource_type": "group", "resource_name": "g", "operation": "read"})
    with as_(secured, "key-alice") as alice:
        member = alice.post("/v1/groups/g/members", json={"topics": ["open"], "auto.offset.reset": "earliest"})
        base = f"/v1/groups/g/members/{member.json()['member_id']}"
        alice.post(f"{base}/heartbeat")
        first = alice.get(f"{base}/records", params={"max_records": 2})
        assert first.status_code == 200 and first.json()["records"]
        revoke(secured, principal="alice", resource_type="topic")
        refused = alice.get(f"{base}/records")
        assert refused.status_code == 403 and refused.json()["error_code"] == "TOPIC_AUTHORIZATION_FAILED"
        assert "open" in refused.json()["message"] and "records" not in refused.json()


def test_resetting_all_offsets_needs_read_on_every_topic_touched(secured: ThreadServer) -> None:
    with as_(secured, "key-admin") as admin:  # the group has offsets on both topics
        admin.post("/v1/groups/shared/offsets", json={"member_id": None, "generation": -1, "offsets": [
            {"topic": "open", "partition": 0, "offset": 3}, {"topic": "private", "partition": 0, "offset": 3}]})
    grant(secured, {"principal": "mallory", "resource_type": "topic", "resource_name": "open", "operation": "read"},
          {"principal": "mallory", "resource_type": "group", "resource_name": "shared", "operation": "read"})
    with as_(secured, "key-mallory") as mallory:
        refused = mallory.post("/v1/groups/shared/offsets/reset", json={"to": "earliest"})
        assert refused.status_code == 403 and "private" in refused.json()["message"]
        assert mallory.post("/v1/groups/shared/offsets/reset",
                            json={"to": "earliest", "topics": ["open"]}).status_code == 200
    with as_(secured, "key-admin") as admin:
        offsets = {(o["topic"], o["partition"]): o["offset"] for o in admin.get("/v1/groups/shared/offsets").json()[
            "offsets"]}
    assert offsets[("private", 0)] == 3 and offsets[("open", 0)] == 0


def test_a_group_description_hides_topics_the_caller_may_not_describe(secured: ThreadServer) -> None:
    with as_(secured, "key-admin") as admin:
        admin.post("/v1/groups/mixed/members", json={"topics": ["private"]})
    grant(secured, {"principal": "alice", "resource_type": "topic", "resource_name": "open", "operation": "read"},
          {"principal": "alice", "resource_type": "group", "resource_name": "mixed", "operation": "read"})
    with as_(secured, "key-alice") as alice:
        alice.post("/v1/groups/mixed/members", json={"topics": ["open"]})
        described = alice.get("/v1/groups/mixed")
        assert described.status_code == 200
        assert len(described.json()["members"]) == 2
        assert "private" not in described.text
        assert {tp["topic"] for m in described.json()["members"] for tp in m["assignment"]} == {"open"}
    with as_(secured, "key-admin") as admin:
        assert "private" in admin.get("/v1/groups/mixed").text


def test_a_catastrophic_pattern_is_matched_in_bounded_time(start_server) -> None:
    server = start_server()
    with server.client() as c:
        for i in range(20):
            assert c.post("/v1/topics", json={"name": "a" * 200 + str(i)}).status_code == 201
        joined = c.post("/v1/groups/evil/members", json={"pattern": r"(\w|\w)*!"})
        assert joined.status_code == 201, joined.text
        member = joined.json()["member_id"]
        assert c.post(f"/v1/groups/evil/members/{member}/heartbeat").json()["assignment"] == []
        assert c.get("/healthz").status_code == 200  # a backtracking engine never gets here (pytest-timeout)
        bad = c.post("/v1/groups/evil2/members", json={"pattern": r"(a)\1"})
        assert bad.status_code == 422 and "backreferences" in bad.json()["message"]
        long = c.post("/v1/groups/evil3/members", json={"pattern": "a" * 1001})
        assert long.status_code == 422


def test_an_empty_key_set_is_authentication_off_for_the_exposure_check_too() -> None:
    with pytest.raises(RefusedToStart):
        check_exposure(Settings(host="0.0.0.0", api_keys_json="{}"))
    check_exposure(Settings(host="0.0.0.0", api_keys_json='{"k": "admin"}'))
    assert not Settings(api_keys_json="{}").authentication
    with pytest.raises(ValueError, match="API key -> principal"):
        Settings(api_keys_json='["k"]')
