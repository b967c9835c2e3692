"""Clients that share no code with lakelog or with its Python dependencies, on lakelog's Kafka listener:
kcat (librdkafka, Debian's package) and KafkaJS (npm, pinned in tests/kafka/js/package-lock.json), both
installed by `make test`. Each test drives the client as a user would (kcat's command line; small node
scripts in tests/kafka/js/ that take a JSON argument and print JSON) and then checks what happened over
lakelog's HTTP API, never by the client's exit code alone:

- produce with each compression codec the client has, which a tap between client and server sees on the
  wire, to the partitions lakelog's own HTTP produce picks for the same keys;
- a consumer group of two members: the second joins, the partitions are split, both commit; one leaves,
  the other takes everything over;
- admin (KafkaJS): create topics, alter configs (the AlterConfigs API), set and reset a group's offsets,
  delete records (DeleteRecords), describe groups.

Every client here connects through `WireTap`: the server advertises the tap's address, so every
connection, the bootstrap one and those Metadata names, passes through it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx
import pytest
from aiokafka.record.util import calc_crc32c

from tests.conftest import free_port
from tests.http.conftest import ThreadServer, fetch_all, start_server  # noqa: F401  (the fixture)
from tests.log_check import assert_topic_intact
from tests.patience import STUCK_S

JS = Path(__file__).resolve().parent / "js"
IN_CI = bool(os.environ.get("CI"))
CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


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


# ---- a tap on the wire: which codec each produced batch used ------------------------------------------------


class WireTap:
    """A TCP forwarder in front of the Kafka listener. It forwards bytes as they come and, on the side,
    reads the client's request frames: the v2 record batches of every Produce request (found by their
    CRC-32C, so no request version needs parsing) are remembered with their codec and record count."""

    def __init__(self) -> None:
        self.port = free_port()
        self.listener = socket.create_server(("127.0.0.1", self.port))
        self.target: tuple[str, int] | None = None
        self.batches: list[tuple[str, int]] = []  # (codec, records) per produced batch
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        self.closed = False
        threading.Thread(target=self.accept, name=f"tap-{self.port}", daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def forward_to(self, address: str) -> None:
        host, port = address.rsplit(":", 1)
        self.target = (host, int(port))

    def accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            assert self.target is not None, "the tap got a connection before it knew the server"
            server = socket.create_connection(self.target)
            with self.lock:
                self.sockets += [client, server]
            threading.Thread(target=self.pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self.pump, args=(server, client, False), daemon=True).start()

    def pump(self, source: socket.socket, sink: socket.socket, requests: bool) -> None:
        pending = b""
        try:
            while data := source.recv(65536):
                sink.sendall(data)
                if requests:
                    pending += data
                    while len(pending) >= 4 and len(pending) >= 4 + (size := struct.unpack(">i", pending[:4])[0]):
                        self.read_request(pending[4:4 + size])
                        pending = pending[4 + size:]
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def read_request(self, frame: bytes) -> None:
        api_key = struct.unpack(">h", frame[:2])[0]
        if api_key != 0:  # Produce
            return
        found = []
        i = 0
        while i + 61 <= len(frame):
            # baseOffset int64, batchLength int32, leaderEpoch int32, magic int8 (2), crc uint32, attributes ...
            if frame[i + 16] == 2:
                length = struct.unpack(">i", frame[i + 8:i + 12])[0]
                end = i + 12 + length
                if 49 <= length and end <= len(frame):
                    crc = struct.unpack(">I", frame[i + 17:i + 21])[0]
                    if calc_crc32c(frame[i + 21:end]) == crc:
                        attributes = struct.unpack(">h", frame[i + 21:i + 23])[0]
                        count = struct.unpack(">i", frame[i + 57:i + 61])[0]
                        found.append((CODEC_NAMES.get(attributes & 0x07, f"codec {attributes & 0x07}"), count))
                        i = end
                        continue
            i += 1
        with self.lock:
            self.batches += found

    def produced(self) -> list[tuple[str, int]]:
        with self.lock:
            return list(self.batches)

    def close(self) -> None:
        self.closed = True
        self.listener.close()
        with self.lock:
            for s in self.sockets:
                s.close()


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
def served(start_server: Callable[..., ThreadServer]) -> Iterator[Served]:  # noqa: F811
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


# ---- kcat ----------------------------------------------------------------------------------------------------


def kcat_base(kcat: str, served: Served) -> list[str]:
    return [kcat, "-b", served.bootstrap, "-m", str(int(STUCK_S)), "-X", "topic.message.timeout.ms=300000"]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_kcat_produces_with_each_codec(kcat: str, served: Served, codec: str) -> None:
    topic, partitions = f"kcat-{codec}", 3
    create_topic(served.http, topic, partitions)
    keys = [f"user-{i}" for i in range(20)]
    lines = [f"{k}\t{k}-{n}" for n in range(3) for k in keys]
    compression = [] if codec == "none" else ["-z", codec]
    done = run(kcat_base(kcat, served) + ["-P", "-t", topic, "-K", "\t", "-H", "source=kcat", *compression,
                                         "-X", "partitioner=murmur2_random", "-X", "enable.idempotence=true"],
               stdin="\n".join(lines).encode() + b"\n")
    assert done.returncode == 0, done.stderr.decode()

    batches = served.tap.produced()
    # librdkafka 2.0 (Debian's kcat) sends gzip, snappy and lz4 only to a broker that serves Produce v0 (its
    # check asks for a Produce version in [0, 0]; zstd's for one in [0, 7]): otherwise it logs "Broker does
    # not support compression type" at debug level and sends the batch uncompressed.
    assert batches and {c for c, _ in batches} == {codec}, f"batches on the wire (codec, records): {batches}"
    assert sum(n for _, n in batches) == len(lines)
    where = lakelog_partitions(served.http, keys, partitions)
    stored = all_records(served.http, topic)
    assert len(stored) == len(lines)
    for record in stored:
        key = record["key"]
        assert record["partition"] == where[key], f"{key} on {record['partition']}, lakelog puts it on {where[key]}"
        assert record["headers"] == [{"key": "source", "value": "kcat"}]
    for key in keys:  # each key's records in the order sent
        assert [r["value"] for r in stored if r["key"] == key] == [f"{key}-{n}" for n in range(3)]
    assert_topic_intact(served.root, topic)


def test_kcat_metadata_names_the_topics(kcat: str, served: Served) -> None:
    create_topic(served.http, "listed-a", 2)
    create_topic(served.http, "listed-b", 5)
    done = run(kcat_base(kcat, served) + ["-L", "-J"])
    assert done.returncode == 0, done.stderr.decode()
    metadata = json.loads(done.stdout)
    assert [b["name"] for b in metadata["brokers"]] == [served.bootstrap]  # the advertised address
    # Kafka's internal topics (__consumer_offsets, as Kafka lists it) are in Metadata, not in the HTTP API's list
    seen = {t["topic"]: sorted(p["partition"] for p in t["partitions"]) for t in metadata["topics"]
            if not t["topic"].startswith("__")}
    over_http = {t["name"]: t["partitions"] for t in served.http.get("/v1/topics").json()["topics"]}
    assert {name: len(ps) for name, ps in seen.items()} == over_http == {"listed-a": 2, "listed-b": 5}
    assert seen["listed-b"] == list(range(5))


@pytest.mark.parametrize("compression_type", ["producer", "gzip", "snappy", "lz4", "zstd"])
def test_kcat_reads_what_http_wrote(kcat: str, served: Served, compression_type: str) -> None:
    """kcat -C reads each partition to its end; the topic's compression.type is how lakelog compresses
    the fetched batches."""
    topic = f"fetched-{compression_type}"
    create_topic(served.http, topic, 2, **{"compression.type": compression_type})
    produce_http(served.http, topic, [{"key": f"k{i}", "value": f"v{i}" * 50, "partition": i % 2,
                                       "headers": [{"key": "n", "value": str(i)}]} for i in range(40)])
    done = run(kcat_base(kcat, served) + ["-C", "-t", topic, "-o", "beginning", "-e", "-J"])
    assert done.returncode == 0, done.stderr.decode()
    got = sorted((m["partition"], m["offset"], m["key"], m["payload"], m["headers"])
                 for m in map(json.loads, done.stdout.decode().splitlines()))
    stored = sorted((r["partition"], r["offset"], r["key"], r["value"], [h["key"], h["value"]])
                    for r in all_records(served.http, topic) for h in r["headers"])
    assert got == stored and len(got) == 40
    assert_topic_intact(served.root, topic)


def test_kcat_group_two_members_rebalance_and_commits(kcat: str, served: Served, members: list[Member]) -> None:
    topic, group, partitions = "kcat-grouped", "kcat-readers", 4
    http = served.http
    create_topic(http, topic, partitions)
    phase_1 = set(produce_http(http, topic, [{"key": f"a{i}", "value": "x"} for i in range(40)]))

    def member(client_id: str) -> Member:
        started = Member(kcat_base(kcat, served) + [
            "-G", group, "-X", f"client.id={client_id}", "-X", "auto.offset.reset=earliest",
            "-X", "auto.commit.interval.ms=100", "-X", "heartbeat.interval.ms=300",
            "-X", "session.timeout.ms=10000", "-J", "-u", topic], client_id, stop_by_stdin=False)
        members.append(started)
        return started

    a = member("kcat-a")
    owners_1 = wait_owned(http, group, topic, {"kcat-a": 4}, partitions)
    wait_committed_to_end(http, group, topic)

    b = member("kcat-b")  # joins: a rebalance splits the partitions
    owners_2 = wait_owned(http, group, topic, {"kcat-a": 2, "kcat-b": 2}, partitions)
    phase_2 = set(produce_http(http, topic, [{"key": f"b{i}", "value": "y"} for i in range(40)]))
    wait_committed_to_end(http, group, topic)

    a.stop()  # leaves: b takes everything over
    owners_3 = wait_owned(http, group, topic, {"kcat-b": 4}, partitions)
    phase_3 = set(produce_http(http, topic, [{"key": f"c{i}", "value": "z"} for i in range(12)]))
    wait_committed_to_end(http, group, topic)
    b.stop()

    consumed = {"kcat-a": records_of(a.events()), "kcat-b": records_of(b.events())}
    check_group_run(http, group, topic, consumed,
                    [(owners_1, phase_1), (owners_2, phase_2), (owners_3, phase_3)])
    assert wait_for("the group empty", lambda: http.get(f"/v1/groups/{group}").json()["state"] == "Empty")
    assert_topic_intact(served.root, topic)


# ---- KafkaJS -------------------------------------------------------------------------------------------------


def kafkajs(node: str, script: str, served: Served, **args: Any) -> dict[str, Any]:
    return node_script(node, script, {"brokers": [served.bootstrap], **args})


def admin(node: str, served: Served, *calls: tuple[str, Any]) -> list[dict[str, Any]]:
    """KafkaJS admin calls in one client; each one's {ok, result} or {ok: false, error}."""
    return kafkajs(node, "admin.js", served, calls=[{"call": c, "args": a} for c, a in calls])["results"]


def ok(result: dict[str, Any]) -> Any:
    assert result["ok"], f"KafkaJS: {result['error']}"
    return result["result"]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy"])  # snappy: the kafkajs-snappy plugin
def test_kafkajs_produces_with_each_codec(node: str, served: Served, codec: str) -> None:
    topic, partitions = f"kafkajs-{codec}", 3
    create_topic(served.http, topic, partitions)
    keys = [f"user-{i}" for i in range(20)]
    batches = [[{"key": k, "value": f"{k}-{n}", "headers": {"source": "kafkajs"}} for k in keys] for n in range(3)]
    sent = kafkajs(node, "produce.js", served, topic=topic, codec=codec, batches=batches)["sent"]

    assert {c for c, _ in served.tap.produced()} == {codec}, served.tap.produced()
    assert sum(n for _, n in served.tap.produced()) == 60
    where = lakelog_partitions(served.http, keys, partitions)
    stored = all_records(served.http, topic)
    assert len(stored) == 60
    by_offset = {(r["partition"], r["offset"]): r for r in stored}
    for messages, answer in zip(batches, sent):  # each send's base offsets, as KafkaJS was told
        for partition, base in {(m["partition"], m["baseOffset"]) for m in answer}:
            mine = [m for m in messages if where[m["key"]] == partition]
            for i, message in enumerate(mine):
                record = by_offset[(partition, base + i)]
                assert (record["key"], record["value"]) == (message["key"], message["value"])
                assert record["headers"] == [{"key": "source", "value": "kafkajs"}]
    assert_topic_intact(served.root, topic)


@pytest.mark.parametrize("client", ["kcat murmur2_random", "kafkajs DefaultPartitioner"])
def test_keys_land_where_lakelog_puts_them(client: str, served: Served, request: pytest.FixtureRequest) -> None:
    """The partitioners the README's table names as agreeing with lakelog's, over 300 keys."""
    topic, partitions = f"placed-{client.split()[0]}", 6
    create_topic(served.http, topic, partitions)
    keys = [f"customer-{i}" for i in range(300)]
    if client.startswith("kcat"):
        done = run(kcat_base(request.getfixturevalue("kcat"), served) + [
            "-P", "-t", topic, "-K", "\t", "-X", "partitioner=murmur2_random"],
            stdin="".join(f"{k}\t{k}\n" for k in keys).encode())
        assert done.returncode == 0, done.stderr.decode()
    else:
        kafkajs(request.getfixturevalue("node"), "produce.js", served, topic=topic, partitioner="default",
                batches=[[{"key": k, "value": k} for k in keys]])
    where = lakelog_partitions(served.http, keys, partitions)
    placed = {r["key"]: r["partition"] for r in all_records(served.http, topic)}
    assert len(placed) == 300
    agree = sum(placed[k] == where[k] for k in keys)
    assert agree == 300, f"{client}: {agree}/300 keys on lakelog's partition"
    assert_topic_intact(served.root, topic)


def js_member(node: str, served: Served, topic: str, group: str, client_id: str, **extra: Any) -> Member:
    args = {"brokers": [served.bootstrap], "topic": topic, "groupId": group, "clientId": client_id, **extra}
    return Member([node, str(JS / "member.js"), json.dumps(args)], client_id, stop_by_stdin=True)


def test_kafkajs_group_two_members_rebalance_and_commits(node: str, served: Served, members: list[Member]) -> None:
    topic, group, partitions = "kafkajs-grouped", "kafkajs-readers", 4
    http = served.http
    create_topic(http, topic, partitions)
    phase_1 = set(produce_http(http, topic, [{"key": f"a{i}", "value": "x"} for i in range(40)]))

    a = js_member(node, served, topic, group, "kafkajs-a")
    members.append(a)
    owners_1 = wait_owned(http, group, topic, {"kafkajs-a": 4}, partitions)
    wait_committed_to_end(http, group, topic)

    b = js_member(node, served, topic, group, "kafkajs-b")  # joins: a rebalance splits the partitions
    members.append(b)
    owners_2 = wait_owned(http, group, topic, {"kafkajs-a": 2, "kafkajs-b": 2}, partitions)
    phase_2 = set(produce_http(http, topic, [{"key": f"b{i}", "value": "y"} for i in range(40)]))
    wait_committed_to_end(http, group, topic)

    a.stop()  # disconnect: commits and leaves; b takes everything over
    owners_3 = wait_owned(http, group, topic, {"kafkajs-b": 4}, partitions)
    phase_3 = set(produce_http(http, topic, [{"key": f"c{i}", "value": "z"} for i in range(12)]))
    wait_committed_to_end(http, group, topic)
    b.stop()

    for member in (a, b):
        events = member.events()
        assert not [e for e in events if e["event"] in ("crash", "error")], (member.name, member.stderr())
        assert events[-1]["event"] == "stopped", (member.name, events[-3:], member.stderr())
        assert any(e["event"] == "commit" for e in events)
    joins = lambda m: [e["assignment"] for e in m.events() if e["event"] == "join"]  # noqa: E731
    assert joins(a)[0] == [0, 1, 2, 3] and joins(a)[-1] == owners_2["kafkajs-a"]  # what the member itself saw
    assert joins(b)[0] == owners_2["kafkajs-b"] and joins(b)[-1] == [0, 1, 2, 3]
    consumed = {"kafkajs-a": records_of(a.events()), "kafkajs-b": records_of(b.events())}
    check_group_run(http, group, topic, consumed,
                    [(owners_1, phase_1), (owners_2, phase_2), (owners_3, phase_3)])
    assert wait_for("the group empty", lambda: http.get(f"/v1/groups/{group}").json()["state"] == "Empty")
    assert_topic_intact(served.root, topic)


# ---- KafkaJS admin ---------------------------------------------------------------------------------------------

TOPIC_RESOURCE = 2  # KafkaJS ConfigResourceTypes.TOPIC


def described_configs(node: str, served: Served, topic: str, names: list[str]) -> dict[str, str]:
    (result,) = admin(node, served, ("describeConfigs", {"includeSynonyms": False, "resources": [
        {"type": TOPIC_RESOURCE, "name": topic, "configNames": names}]}))
    (resource,) = ok(result)["resources"]
    assert resource["errorCode"] == 0, resource
    return {c["configName"]: c["configValue"] for c in resource["configEntries"]}


def test_kafkajs_admin_creates_topics(node: str, served: Served) -> None:
    spec = {"topic": "made-by-kafkajs", "numPartitions": 3, "configEntries": [
        {"name": "retention.ms", "value": "3600000"}, {"name": "cleanup.policy", "value": "compact"}]}
    created, again, listed, metadata = admin(
        node, served,
        ("createTopics", {"topics": [spec], "waitForLeaders": True}),
        ("createTopics", {"topics": [spec]}),  # already there: KafkaJS answers false
        ("listTopics", None),
        ("fetchTopicMetadata", {"topics": ["made-by-kafkajs"]}))
    assert ok(created) is True and ok(again) is False
    detail = topic_detail(served.http, "made-by-kafkajs")
    assert [p["partition"] for p in detail["partitions"]] == [0, 1, 2]
    assert detail["config"]["retention.ms"] == 3_600_000 and detail["config"]["cleanup.policy"] == "compact"
    assert "made-by-kafkajs" in ok(listed)
    (described,) = ok(metadata)["topics"]
    assert sorted(p["partitionId"] for p in described["partitions"]) == [0, 1, 2]
    assert described_configs(node, served, "made-by-kafkajs", ["retention.ms", "cleanup.policy"]) == {
        "retention.ms": "3600000", "cleanup.policy": "compact"}
    assert_topic_intact(served.root, "made-by-kafkajs")


def test_kafkajs_admin_alters_configs(node: str, served: Served) -> None:
    """KafkaJS's alterConfigs is Kafka's AlterConfigs (API 33), not the incremental one: the entries given
    become the topic's whole dynamic config, so one not named goes back to its default."""
    topic = "altered-by-kafkajs"
    create_topic(served.http, topic, 1, **{"retention.ms": 3_600_000})

    def alter(entries: dict[str, str], validate_only: bool = False) -> dict[str, Any]:
        (result,) = admin(node, served, ("alterConfigs", {"validateOnly": validate_only, "resources": [
            {"type": TOPIC_RESOURCE, "name": topic,
             "configEntries": [{"name": k, "value": v} for k, v in entries.items()]}]}))
        return result

    checked = alter({"segment.ms": "1000"}, validate_only=True)
    (resource,) = ok(checked)["resources"]
    assert resource["errorCode"] == 0, resource
    assert topic_detail(served.http, topic)["config"]["segment.ms"] == 7 * 24 * 3600 * 1000  # validated only

    refused = alter({"retention.ms": "soon"})
    assert not refused["ok"] and refused["error"]["type"] == "INVALID_CONFIG", refused
    assert topic_detail(served.http, topic)["config"]["retention.ms"] == 3_600_000

    done = alter({"max.message.bytes": "2000000", "cleanup.policy": "compact,delete"})
    (resource,) = ok(done)["resources"]
    assert (resource["errorCode"], resource["resourceName"]) == (0, topic), resource
    config = topic_detail(served.http, topic)["config"]
    assert config["max.message.bytes"] == 2_000_000 and config["cleanup.policy"] == "compact,delete"
    assert config["retention.ms"] == 7 * 24 * 3600 * 1000  # not named: back to Kafka's default
    assert described_configs(node, served, topic, ["max.message.bytes", "cleanup.policy"]) == {
        "max.message.bytes": "2000000", "cleanup.policy": "compact,delete"}


def consume_all_and_leave(node: str, served: Served, members: list[Member], topic: str, group: str) -> Member:
    """One KafkaJS member reads from the group's position until it committed every partition's end."""
    member = js_member(node, served, topic, group, f"{group}-reader")
    members.append(member)
    wait_committed_to_end(served.http, group, topic)
    member.stop()
    return member


def test_kafkajs_admin_sets_and_resets_offsets(node: str, served: Served, members: list[Member]) -> None:
    """setOffsets commits the offsets given; resetOffsets commits -2 (earliest) or -1 (latest), which
    Kafka keeps as they are and a consumer resolves when it starts (KafkaJS: by its fromBeginning)."""
    topic, group, http = "reset-by-kafkajs", "resettable", served.http
    create_topic(http, topic, 2)
    produce_http(http, topic, [{"key": f"k{i}", "value": str(i), "partition": i % 2} for i in range(20)])
    first = consume_all_and_leave(node, served, members, topic, group)
    assert len(records_of(first.events())) == 20
    assert committed(http, group, topic) == {0: 10, 1: 10}

    set_result, fetched = admin(node, served, (
        "setOffsets", {"groupId": group, "topic": topic, "partitions": [
            {"partition": 0, "offset": "3"}, {"partition": 1, "offset": "7"}]}),
        ("fetchOffsets", {"groupId": group, "topics": [topic]}))
    ok(set_result)
    assert committed(http, group, topic) == {0: 3, 1: 7}
    (fetched_topic,) = ok(fetched)
    assert {p["partition"]: int(p["offset"]) for p in fetched_topic["partitions"]} == {0: 3, 1: 7}

    (earliest,) = admin(node, served, ("resetOffsets", {"groupId": group, "topic": topic, "earliest": True}))
    ok(earliest)
    assert set(committed(http, group, topic).values()) <= {-2, 0}  # kept as sent, or resolved to the start
    again = consume_all_and_leave(node, served, members, topic, group)
    assert sorted(records_of(again.events())) == sorted((r["partition"], r["offset"])
                                                        for r in all_records(http, topic))
    assert committed(http, group, topic) == {0: 10, 1: 10}

    produce_http(http, topic, [{"key": "late", "value": "x", "partition": 0}])
    (latest,) = admin(node, served, ("resetOffsets", {"groupId": group, "topic": topic, "earliest": False}))
    ok(latest)
    after = committed(http, group, topic)
    assert after[0] in (-1, 11) and after[1] in (-1, 10), after
    assert_topic_intact(served.root, topic)


def test_kafkajs_admin_deletes_records(node: str, served: Served) -> None:
    topic, http = "trimmed-by-kafkajs", served.http
    create_topic(http, topic, 2)
    produce_http(http, topic, [{"key": f"k{i}", "value": str(i), "partition": i % 2} for i in range(20)])

    # KafkaJS's deleteTopicRecords finds the leaders in the metadata its client already holds: load it first
    # (without that KafkaJS itself answers "Topic metadata not loaded").
    loaded, deleted, offsets = admin(node, served, ("fetchTopicMetadata", {"topics": [topic]}), (
        "deleteTopicRecords", {"topic": topic, "partitions": [
            {"partition": 0, "offset": "4"}, {"partition": 1, "offset": "-1"}]}),  # -1: up to the end
        ("fetchTopicOffsets", topic))
    ok(loaded)
    ok(deleted)
    partitions = {p["partition"]: p for p in topic_detail(http, topic)["partitions"]}
    assert (partitions[0]["log_start_offset"], partitions[0]["log_end_offset"]) == (4, 10)
    assert (partitions[1]["log_start_offset"], partitions[1]["log_end_offset"]) == (10, 10)
    assert [r["offset"] for r in fetch_all(http, topic, 0, offset=4)] == list(range(4, 10))
    assert fetch_all(http, topic, 1, offset=10) == []
    below = http.get(f"/v1/topics/{topic}/partitions/0/records", params={"offset": 0})
    assert below.status_code != 200 or [r["offset"] for r in below.json()["records"]][:1] == [4], below.text
    assert {p["partition"]: (int(p["low"]), int(p["high"])) for p in ok(offsets)} == {0: (4, 10), 1: (10, 10)}
    assert_topic_intact(served.root, topic)


def test_kafkajs_admin_describes_groups(node: str, served: Served, members: list[Member]) -> None:
    topic, group, http = "described", "describable", served.http
    create_topic(http, topic, 2)
    produce_http(http, topic, [{"key": f"k{i}", "value": str(i)} for i in range(6)])
    member = js_member(node, served, topic, group, "describable-a")
    members.append(member)
    wait_owned(http, group, topic, {"describable-a": 2}, 2)
    wait_committed_to_end(http, group, topic)

    described, listed = admin(node, served, ("describeGroups", [group]), ("listGroups", None))
    (seen,) = ok(described)["groups"]
    over_http = http.get(f"/v1/groups/{group}").json()
    assert (seen["groupId"], seen["state"], seen["protocolType"]) == (group, "Stable", "consumer")
    assert seen["protocol"] == over_http["assignor"] == "RoundRobinAssigner"
    assert [m["memberId"] for m in seen["members"]] == [m["member_id"] for m in over_http["members"]]
    assert seen["members"][0]["clientId"] == "describable-a"
    assert {"groupId": group, "protocolType": "consumer"} in ok(listed)["groups"]

    member.stop()
    (described,) = admin(node, served, ("describeGroups", [group]))
    (seen,) = ok(described)["groups"]
    assert (seen["state"], seen["members"]) == ("Empty", [])
    assert http.get(f"/v1/groups/{group}").json()["state"] == "Empty"
    assert committed(http, group, topic) == end_offsets(http, topic)
    assert_topic_intact(served.root, topic)
