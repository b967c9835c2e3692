"""The authorization matrix: every endpoint with an allowed and a denied principal; 401 without a valid key."""

from __future__ import annotations

import json
from typing import Any, Iterator

import httpx
import pytest

from tests.http.conftest import ThreadServer, make_settings

KEYS = {"key-admin": "admin", "key-alice": "alice", "key-bob": "bob"}
TOPIC = "pub-orders"
PRIVATE = "secret-ledger"
GROUP = "ga-billing"


def as_(server: ThreadServer, key: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return server.client(headers=headers)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadServer]:
    server = ThreadServer(make_settings(tmp_path_factory.mktemp("acl"), api_keys_json=json.dumps(KEYS))).start()
    with as_(server, "key-admin") as admin:
        grants = [
            {"principal": "alice", "resource_type": "topic", "pattern_type": "prefixed", "resource_name": "pub-",
             "operation": "all"},
            {"principal": "alice", "resource_type": "group", "pattern_type": "prefixed", "resource_name": "ga-",
             "operation": "read"},
            {"principal": "bob", "resource_type": "topic", "resource_name": "other", "operation": "read"},
        ]
        assert admin.post("/v1/acls", json={"acls": grants}).status_code == 201
        for name in (TOPIC, PRIVATE):
            assert admin.post("/v1/topics", json={"name": name, "partitions": 2}).status_code == 201
    yield server
    server.stop()


def call(client: httpx.Client, method: str, path: str, body: Any = None, params: Any = None) -> httpx.Response:
    return client.request(method, path, json=body, params=params)


def check_pair(server: ThreadServer, method: str, path: str, ok: int, body: Any = None, params: Any = None,
               denied_code: str = "TOPIC_AUTHORIZATION_FAILED") -> httpx.Response:
    """bob (no grant) is refused with 403 and changes nothing; then alice (granted) gets `ok`."""
    with as_(server, "key-bob") as bob:
        refused = call(bob, method, path, body, params)
        assert refused.status_code == 403, (method, path, refused.text)
        assert refused.json()["error_code"] == denied_code
    with as_(server, None) as nobody:
        assert call(nobody, method, path, body, params).status_code == 401
    with as_(server, "key-wrong") as wrong:
        assert call(wrong, method, path, body, params).status_code == 401
    with as_(server, "key-alice") as alice:
        allowed = call(alice, method, path, body, params)
        assert allowed.status_code == ok, (method, path, allowed.text)
        return allowed


def test_topic_endpoints(secured: ThreadServer) -> None:
    check_pair(secured, "POST", "/v1/topics", 201, {"name": "pub-new", "partitions": 1})
    check_pair(secured, "GET", f"/v1/topics/{TOPIC}", 200)
    check_pair(secured, "PATCH", f"/v1/topics/{TOPIC}/config", 200, {"config": {"retention.ms": 3600000}})
    check_pair(secured, "POST", f"/v1/topics/{TOPIC}/partitions", 200, {"partitions": 3})
    with as_(secured, "key-alice") as alice:
        before = alice.get(f"/v1/topics/{TOPIC}").json()["partitions"]
    check_pair(secured, "POST", f"/v1/topics/{TOPIC}/records", 200, {"records": [{"value": "v"}]})
    with as_(secured, "key-alice") as alice:
        after = alice.get(f"/v1/topics/{TOPIC}").json()["partitions"]
    assert sum(p["log_end_offset"] for p in after) == sum(p["log_end_offset"] for p in before) + 1  # alice's only
    check_pair(secured, "GET", f"/v1/topics/{TOPIC}/partitions/0/records", 200, params={"offset": 0})
    check_pair(secured, "GET", f"/v1/topics/{TOPIC}/partitions/0/offsets", 200, params={"spec": "latest"})
    check_pair(secured, "DELETE", "/v1/topics/pub-new", 200)


def test_listings_hide_what_the_caller_may_not_describe(secured: ThreadServer) -> None:
    with as_(secured, "key-alice") as alice:
        names = [t["name"] for t in alice.get("/v1/topics").json()["topics"]]
        assert TOPIC in names and PRIVATE not in names
    with as_(secured, "key-bob") as bob:
        assert bob.get("/v1/topics").json()["topics"] == []
    with as_(secured, "key-admin") as admin:
        assert {TOPIC, PRIVATE} <= {t["name"] for t in admin.get("/v1/topics").json()["topics"]}
    with as_(secured, None) as nobody:
        assert nobody.get("/v1/topics").status_code == 401
        assert nobody.get("/healthz").status_code == 200


def test_group_endpoints(secured: ThreadServer) -> None:
    join = {"topics": [TOPIC], "auto.offset.reset": "earliest", "enable.auto.commit": False}
    group_denied = "GROUP_AUTHORIZATION_FAILED"
    member = check_pair(secured, "POST", f"/v1/groups/{GROUP}/members", 201, join,
                        denied_code=group_denied).json()["member_id"]
    base = f"/v1/groups/{GROUP}/members/{member}"
    generation = check_pair(secured, "POST", f"{base}/heartbeat", 200, denied_code=group_denied).json()["generation"]
    check_pair(secured, "GET", f"{base}/records", 200, denied_code=group_denied)
    commit = {"member_id": member, "generation": generation,
              "offsets": [{"topic": TOPIC, "partition": 0, "offset": 0}]}
    check_pair(secured, "POST", f"/v1/groups/{GROUP}/offsets", 200, commit, denied_code=group_denied)
    check_pair(secured, "GET", f"/v1/groups/{GROUP}/offsets", 200, denied_code=group_denied)
    check_pair(secured, "GET", f"/v1/groups/{GROUP}", 200, denied_code=group_denied)
    with as_(secured, "key-alice") as alice, as_(secured, "key-bob") as bob:
        assert GROUP in [g["group"] for g in alice.get("/v1/groups").json()["groups"]]
        assert GROUP not in [g["group"] for g in bob.get("/v1/groups").json()["groups"]]
    check_pair(secured, "DELETE", base, 204, denied_code=group_denied)
    check_pair(secured, "POST", f"/v1/groups/{GROUP}/offsets/reset", 200, {"to": "earliest", "topics": [TOPIC]},
               denied_code=group_denied)
    with as_(secured, "key-alice") as alice:  # alice may read her group, but not a topic outside her prefix
        refused = alice.post(f"/v1/groups/{GROUP}/members", json={"topics": [PRIVATE]})
        assert refused.status_code == 403 and refused.json()["error_code"] == "TOPIC_AUTHORIZATION_FAILED"


def test_acl_endpoints_are_for_admins(secured: ThreadServer) -> None:
    grant = {"acls": [{"principal": "carol", "resource_type": "topic", "resource_name": "c", "operation": "read"}]}
    with as_(secured, "key-alice") as alice:
        for method, params, body in (("GET", None, None), ("POST", None, grant), ("DELETE", {"principal": "carol"},
                                                                                   None)):
            refused = call(alice, method, "/v1/acls", body, params)
            assert refused.status_code == 403 and refused.json()["error_code"] == "CLUSTER_AUTHORIZATION_FAILED"
    with as_(secured, "key-admin") as admin:
        assert admin.post("/v1/acls", json=grant).status_code == 201
        assert len(admin.get("/v1/acls", params={"principal": "carol"}).json()["acls"]) == 1
        assert len(admin.delete("/v1/acls", params={"principal": "carol"}).json()["acls"]) == 1
        assert admin.get("/v1/acls", params={"principal": "carol"}).json()["acls"] == []


def test_deny_wins_and_acls_survive_a_restart(secured: ThreadServer, tmp_path) -> None:
    with as_(secured, "key-admin") as admin:
        admin.post("/v1/acls", json={"acls": [
            {"principal": "bob", "resource_type": "topic", "pattern_type": "prefixed", "resource_name": "pub-",
             "operation": "all"},
            {"principal": "bob", "resource_type": "topic", "resource_name": TOPIC, "operation": "write",
             "permission": "deny"}]})
    with as_(secured, "key-bob") as bob:
        assert bob.post(f"/v1/topics/{TOPIC}/records", json={"records": [{"value": "x"}]}).status_code == 403
        assert bob.get(f"/v1/topics/{TOPIC}/partitions/0/records", params={"offset": 0}).status_code == 200
    root = secured.settings.root
    again = ThreadServer(make_settings(root, api_keys_json=json.dumps(KEYS))).start()
    try:
        with as_(again, "key-bob") as bob:
            assert bob.post(f"/v1/topics/{TOPIC}/records", json={"records": [{"value": "x"}]}).status_code == 403
            assert bob.get(f"/v1/topics/{TOPIC}").status_code == 200
    finally:
        again.stop()
    with as_(secured, "key-admin") as admin:
        admin.delete("/v1/acls", params={"principal": "bob", "resource_name": "pub-"})
        admin.delete("/v1/acls", params={"principal": "bob", "resource_name": TOPIC})
