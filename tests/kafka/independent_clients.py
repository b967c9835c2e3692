"""What the tests of clients that share no code with lakelog (kcat, KafkaJS; tests/kafka/test_independent_*.py)
share: the tools (installed by `make test`), a lakelog server whose Kafka listener is reached through a
`WireTap` (the server advertises the tap's address, so every connection, the bootstrap one and those
Metadata names, passes through it), the HTTP calls the tests check against, and running the clients:
kcat's command line, the node scripts in tests/kafka/js/ (a JSON argument in, JSON lines out), and
long-running group members.

Fixtures (a test module takes them by name: `served = independent_clients.served`): kcat, node, served,
members; `served` needs the module to have tests/http/conftest.py's start_server too.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx
import pytest

from tests.http.conftest import ThreadServer, fetch_all
from tests.kafka.wire_tap import WireTap
from tests.patience import STUCK_S

JS = Path(__file__).resolve().parent / "js"
IN_CI = bool(os.environ.get("CI"))


# ---- the tools: installed by `make test`; a skip outside CI names the command, a failure in CI ---------------


def need(tool: str, found: bool, install: str) -> None:
    if found:
        return
    message = f"{tool} is not installed ({install}; `make test` does it)"
    if IN_CI:
        pytest.fail(message + ": under CI=true make test must have installed it")
    pytest.skip(message)


@pytest.fixture(scope="session")
def kcat() -> str:
    path = shutil.which("kcat")
    need("kcat", path is not None, "apt-get install kcat")
    return str(path)


@pytest.fixture(scope="session")
def node() -> str:
    path = shutil.which("node")
    need("node", path is not None, "apt-get install nodejs npm")
    need("KafkaJS", (JS / "node_modules" / "kafkajs" / "package.json").exists(),
         f"cd {JS.relative_to(JS.parents[2])} && npm ci")
    return str(path)


# ---- a lakelog server behind the tap -------------------------------------------------------------------------


@dataclass
class Served:
    server: ThreadServer
    tap: WireTap
    http: httpx.Client

    @property
    def bootstrap(self) -> str:
        return self.tap.address

    @property
    def root(self) -> str:
        return self.server.root


@pytest.fixture
def served(start_server: Callable[..., ThreadServer]) -> Iterator[Served]:
    tap = WireTap()
    server = start_server(kafka_advertise=tap.address)
    tap.forward_to(server.bootstrap)
    with server.client() as http:
        yield Served(server, tap, http)
    tap.close()


# ---- HTTP: what the tests check against ----------------------------------------------------------------------


def create_topic(http: httpx.Client, name: str, partitions: int, **config: Any) -> None:
    response = http.post("/v1/topics", json={"name": name, "partitions": partitions, "config": config})
    assert response.status_code == 201, response.text


def produce_http(http: httpx.Client, topic: str, records: list[dict[str, Any]]) -> list[tuple[int, int]]:
    response = http.post(f"/v1/topics/{topic}/records", json={"records": records})
    assert response.status_code == 200, response.text
    return [(o["partition"], o["offset"]) for o in response.json()["offsets"]]


def topic_detail(http: httpx.Client, topic: str) -> dict[str, Any]:
    response = http.get(f"/v1/topics/{topic}")
    assert response.status_code == 200, response.text
    return response.json()


def end_offsets(http: httpx.Client, topic: str) -> dict[int, int]:
    return {p["partition"]: p["log_end_offset"] for p in topic_detail(http, topic)["partitions"]}


def all_records(http: httpx.Client, topic: str) -> list[dict[str, Any]]:
    return [r for p in sorted(end_offsets(http, topic)) for r in fetch_all(http, topic, p)]


def committed(http: httpx.Client, group: str, topic: str) -> dict[int, int]:
    response = http.get(f"/v1/groups/{group}/offsets")
    if response.status_code == 404 and response.json()["error_code"] == "GROUP_ID_NOT_FOUND":
        return {}  # not there yet
    assert response.status_code == 200, response.text
    return {o["partition"]: o["offset"] for o in response.json()["offsets"] if o["topic"] == topic}


def lakelog_partitions(http: httpx.Client, keys: list[str], partitions: int) -> dict[str, int]:
    """Where lakelog's own HTTP produce puts each key, on a scratch topic of as many partitions."""
    reference = f"placement-{partitions}-{time.monotonic_ns()}"
    create_topic(http, reference, partitions)
    placed = produce_http(http, reference, [{"key": k, "value": ""} for k in keys])
    return {k: p for k, (p, _) in zip(keys, placed)}


def wait_for(what: str, check: Callable[[], Any], seen: Callable[[], Any] = lambda: None) -> Any:
    """Until check() is true; STUCK_S is only the bound that says nothing happens any more."""
    deadline = time.monotonic() + STUCK_S
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"nothing changed for {STUCK_S}s waiting for {what}; last seen: {seen()}")
        time.sleep(0.05)


def group_owners(http: httpx.Client, group: str, topic: str) -> dict[str, list[int]] | None:
    """{client id: sorted partitions} of a Stable group, by its members' ids (a member id starts with its
    client id), or None while it is not Stable."""
    response = http.get(f"/v1/groups/{group}")
    if response.status_code != 200 or response.json()["state"] != "Stable":
        return None
    owners: dict[str, list[int]] = {}
    for member in response.json()["members"]:
        client_id = member["member_id"].rsplit("-", 5)[0]  # kcat-a-<uuid>: the uuid has 5 parts
        owners[client_id] = sorted(a["partition"] for a in member["assignment"] if a["topic"] == topic)
    return owners


def wait_owned(http: httpx.Client, group: str, topic: str, expected: dict[str, int], partitions: int) -> dict:
    """Until the group is Stable with exactly the expected members, each with that many partitions, together
    all of them once."""
    def check() -> dict | None:
        owners = group_owners(http, group, topic)
        if owners is None or set(owners) != set(expected):
            return None
        if any(len(owners[c]) != n for c, n in expected.items()):
            return None
        owned = sorted(p for ps in owners.values() for p in ps)
        return owners if owned == list(range(partitions)) else None
    return wait_for(f"{group} Stable with {expected}", check, lambda: http.get(f"/v1/groups/{group}").text)


def wait_committed_to_end(http: httpx.Client, group: str, topic: str) -> dict[int, int]:
    return wait_for(f"{group} committed up to the end of {topic}",
                    lambda: (ends := end_offsets(http, topic)) == committed(http, group, topic) and ends,
                    lambda: (committed(http, group, topic), end_offsets(http, topic)))


# ---- running the clients -------------------------------------------------------------------------------------


def run(argv: list[str], stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(argv, input=stdin, capture_output=True, timeout=STUCK_S, cwd=JS)


def node_script(node: str, script: str, args: dict[str, Any]) -> dict[str, Any]:
    """Run one of tests/kafka/js/*.js; its one JSON answer ({ok, ...} or {ok: false, error})."""
    done = run([node, str(JS / script), json.dumps(args)])
    lines = done.stdout.decode().strip().splitlines()
    assert lines, f"{script} answered nothing (exit {done.returncode}): {done.stderr.decode()[-3000:]}"
    answer = json.loads(lines[-1])
    assert answer["ok"], f"{script} failed: {answer['error']}; its log: {done.stderr.decode()[-3000:]}"
    return answer


class Member:
    """A long-running group member (kcat -G, or member.js) whose JSON lines are collected as they come."""

    def __init__(self, argv: list[str], name: str, stop_by_stdin: bool) -> None:
        self.name = name
        self.stop_by_stdin = stop_by_stdin
        self.log = tempfile.NamedTemporaryFile(prefix=f"member-{name}-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, cwd=JS)
        self.lines: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self.read, daemon=True)
        self.reader.start()

    def read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.strip():
                try:
                    event = json.loads(line)
                except ValueError:
                    event = {"event": "text", "text": line.decode(errors="replace")}
                with self.lock:
                    self.lines.append(event)

    def events(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.lines)

    def stderr(self) -> str:
        return Path(self.log.name).read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        """Stop as a user would (kcat: SIGTERM; member.js: end of its input), and wait for the exit."""
        if self.proc.poll() is None:
            if self.stop_by_stdin:
                assert self.proc.stdin is not None
                self.proc.stdin.close()
            else:
                self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(STUCK_S)
        finally:
            self.reader.join(STUCK_S)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(STUCK_S)


@pytest.fixture
def members() -> Iterator[list[Member]]:
    started: list[Member] = []
    yield started
    for member in started:
        member.kill()


def records_of(events: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """(partition, offset) of every record a member printed: member.js' "record" events, kcat -J's lines."""
    return [(e["partition"], e["offset"]) for e in events if e.get("event", "record") == "record" and "offset" in e]


def check_group_run(http: httpx.Client, group: str, topic: str, consumed: dict[str, list[tuple[int, int]]],
                    owners_by_phase: list[tuple[dict[str, list[int]], set[tuple[int, int]]]]) -> None:
    """Each record of the topic was consumed once over all members, and each phase's records by the member
    that owned their partition then; the group committed the end of every partition."""
    every = [r for records in consumed.values() for r in records]
    assert len(every) == len(set(every)), f"records consumed twice: {sorted(r for r in every if every.count(r) > 1)}"
    stored = {(r["partition"], r["offset"]) for r in all_records(http, topic)}
    assert set(every) == stored
    for owners, produced in owners_by_phase:
        for client_id, partitions in owners.items():
            mine = {r for r in produced if r[0] in partitions}
            assert mine <= set(consumed[client_id]), (client_id, sorted(mine - set(consumed[client_id])))
    assert committed(http, group, topic) == end_offsets(http, topic)


# ---- starting kcat and KafkaJS -------------------------------------------------------------------------------


def kcat_base(kcat: str, served: Served) -> list[str]:
    # librdkafka's own bounds (10 s for ApiVersions, 60 s a request) are patience a loaded moment can
    # outlast, and kcat exits once its one broker connection is down: STUCK_S is the only bound.
    stuck_ms = int(STUCK_S * 1000)
    return [kcat, "-b", served.bootstrap, "-m", str(int(STUCK_S)), "-X", f"topic.message.timeout.ms={stuck_ms}",
            "-X", f"api.version.request.timeout.ms={stuck_ms}", "-X", f"socket.timeout.ms={stuck_ms}"]


def kafkajs(node: str, script: str, served: Served, **args: Any) -> dict[str, Any]:
    return node_script(node, script, {"brokers": [served.bootstrap], **args})


def js_member(node: str, served: Served, topic: str, group: str, client_id: str, **extra: Any) -> Member:
    args = {"brokers": [served.bootstrap], "topic": topic, "groupId": group, "clientId": client_id, **extra}
    return Member([node, str(JS / "member.js"), json.dumps(args)], client_id, stop_by_stdin=True)
