"""A Kafka consumer group of three members on three different clients, per assignor (range, roundrobin,
cooperative-sticky): one member leaves cleanly, one is SIGKILLed, the partitions move each time, nothing
produced goes unprocessed, and a record is processed twice only inside an uncommitted window.

Roles and clients per assignor (survivor, clean leaver, killed):

- range: kafka-python, aiokafka, confluent-kafka
- roundrobin: confluent-kafka, kafka-python, aiokafka
- cooperative-sticky: confluent-kafka, kafka-python, kafka-python. aiokafka has no cooperative-sticky
  assignor (its "sticky" is the eager KIP-54 one, another protocol name), so kafka-python plays the
  killed member too.

The survivor and the leaver run in threads of the test process; the killed member runs in a subprocess
(group_members.py's `member_main`) and gets SIGKILL: no LeaveGroup, its session runs out. A producer keeps
writing keyed records over HTTP meanwhile. Every member polls, writes what it processed to its journal
(a file, written through before it commits), then commits those partitions synchronously; a partition
whose commit failed is committed again (at the client's position) while the member still owns it.
The killed member takes 300 ms over each batch and is killed in the middle of one, after the leave.

Checked over HTTP: all three members own partitions; after the leave the other two own them all; after
the kill, once the session timed out, the survivor owns them all; its commits reach the log end offsets.
From the journals: every produced (partition, offset) was processed by someone; the killed member's last
batch was processed again by the survivor; a (partition, offset) processed again was, the time before,
processed by a member that either died before committing it or whose commit of it failed, and no commit
past it succeeded between the two (the time a clean leaver would have closed with records uncommitted
does not occur: its commits are synchronous). Then the topic is intact.
"""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import httpx
import pytest

from tests.http import conftest as http_fixtures
from tests.kafka.group_members import HEARTBEAT_MS, SESSION_MS, Config, ProcessMember, ThreadMember
from tests.log_check import assert_topic_intact
from tests.patience import STUCK_S

start_server = http_fixtures.start_server  # the fixture: a real server, HTTP and Kafka listeners on loopback

PARTITIONS = 6
KILLED_PROCESS_MS = 300  # the killed member's batches take this long: it is killed in the middle of one
ROLES = ("survivor", "leaver", "killed")
CASES = {
    "range": ("kafka-python", "aiokafka", "confluent-kafka"),
    "roundrobin": ("confluent-kafka", "kafka-python", "aiokafka"),
    "cooperative-sticky": ("confluent-kafka", "kafka-python", "kafka-python"),  # aiokafka has none
}


# ---- the producer and what the journals say ------------------------------------------------------------


class HttpProducer:
    """Keyed records over HTTP, a small batch every 50 ms, until stopped."""

    def __init__(self, url: str, topic: str) -> None:
        self.url, self.topic = url, topic
        self.placed: list[tuple[int, int]] = []
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True, name="producer")
        self.thread.start()

    def _run(self) -> None:
        try:
            with httpx.Client(base_url=self.url, timeout=30) as http:
                n = 0
                while not self.stop.is_set():
                    body = {"records": [{"key": f"key-{n + i}", "value": f"value-{n + i}"} for i in range(10)]}
                    response = http.post(f"/v1/topics/{self.topic}/records", json=body)
                    response.raise_for_status()
                    self.placed += [(o["partition"], o["offset"]) for o in response.json()["offsets"]]
                    n += 10
                    self.stop.wait(0.05)
        except BaseException as exc:
            self.error = exc

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)
        assert self.error is None, f"the producer failed: {self.error!r}"


@dataclass(frozen=True)
class Commit:
    t: float
    role: str
    offsets: dict[int, int]
    ok: bool


def read_journal(path: Path, role: str) -> tuple[list[tuple[float, str, int, int]], list[Commit]]:
    processed, commits = [], []
    if not path.exists():
        return processed, commits
    for line in path.read_text().splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:  # a line cut by SIGKILL
            continue
        if "processed" in event:
            processed += [(event["t"], role, p, o) for p, o in event["processed"]]
        else:
            commits.append(Commit(event["t"], role, {int(p): o for p, o in event["commit"].items()},
                                  event["error"] is None))
    return processed, commits


def last_event(path: Path) -> dict[str, Any] | None:
    lines = path.read_text().splitlines() if path.exists() else []
    try:
        return json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        return None


def duplicates_outside_windows(processed: list[tuple[float, str, int, int]], commits: list[Commit],
                               killed: str) -> list[str]:
    """Each time a (partition, offset) is processed again, the member that processed it the time before
    must not have committed past it: its commit of it failed, or it was killed before it committed. And no
    commit past it may have succeeded in between."""
    times: dict[tuple[int, int], list[tuple[float, str]]] = defaultdict(list)
    for t, role, p, o in processed:
        times[(p, o)].append((t, role))
    problems = []
    for (p, o), seen in sorted(times.items()):
        seen.sort()
        for (t1, first), (t2, again) in zip(seen, seen[1:]):
            past = [c for c in commits if c.ok and c.offsets.get(p, -1) > o and t1 <= c.t <= t2]
            if past:
                problems.append(f"{p}:{o} processed by {first}, committed past by {past[0].role}, "
                                f"processed again by {again}")
                continue
            attempt = next((c for c in sorted(commits, key=lambda c: c.t)
                            if c.role == first and c.t >= t1 and c.offsets.get(p, -1) > o), None)
            if attempt is None and first != killed:
                problems.append(f"{p}:{o} processed by {first}, never committed, processed again by {again}")
            elif attempt is not None and attempt.ok:
                problems.append(f"{p}:{o} processed by {first}, committed at {attempt.t - t1:+.3f}s, "
                                f"processed again by {again} at {t2 - t1:+.3f}s")
    return problems


# ---- the group over HTTP --------------------------------------------------------------------------------


def wait_for(what: str, check: Callable[[], Any], timeout_s: float, seen: Callable[[], Any] = lambda: None) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}; last seen: {seen()}")
        time.sleep(0.1)


def owned_by(http: httpx.Client, group: str, roles: set[str]) -> Callable[[], bool]:
    """A check: the group is Stable, exactly `roles` are its members (the member id starts with the client
    id, which starts with the role), each owns partitions, together all of them, none twice."""
    def check() -> bool:
        response = http.get(f"/v1/groups/{group}")
        if response.status_code != 200 or response.json()["state"] != "Stable":
            return False
        members = response.json()["members"]
        owned = [a["partition"] for m in members for a in m["assignment"]]
        assert len(owned) == len(set(owned)), f"a partition owned twice in a Stable group: {members}"
        return (sorted(m["member_id"].split("-")[0] for m in members) == sorted(roles)
                and all(m["assignment"] for m in members) and set(owned) == set(range(PARTITIONS)))
    return check


def end_offsets(http: httpx.Client, topic: str) -> dict[int, int]:
    return {p["partition"]: p["log_end_offset"] for p in http.get(f"/v1/topics/{topic}").json()["partitions"]}


def committed_offsets(http: httpx.Client, group: str, topic: str) -> dict[int, int]:
    offsets = http.get(f"/v1/groups/{group}/offsets").json()["offsets"]
    return {o["partition"]: o["offset"] for o in offsets if o["topic"] == topic}


# ---- the test ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("assignor", list(CASES))
def test_one_leaves_one_dies_partitions_move(start_server, tmp_path: Path, assignor: str) -> None:
    server = start_server()
    topic, group = f"moves-{assignor}", f"movers-{assignor}"
    clients = dict(zip(ROLES, CASES[assignor]))
    journals = {role: tmp_path / f"{role}.jsonl" for role in ROLES}
    http = server.client()
    assert http.post("/v1/topics", json={"name": topic, "partitions": PARTITIONS}).status_code == 201

    def config(role: str, process_ms: int = 0) -> Config:
        return Config(assignor, server.bootstrap, topic, group, f"{role}-{clients[role]}", process_ms)

    started = time.monotonic()
    producer = HttpProducer(server.url, topic)
    killed = ProcessMember(clients["killed"], config("killed", process_ms=KILLED_PROCESS_MS), journals["killed"],
                           tmp_path / "killed.stderr")
    survivor = ThreadMember(clients["survivor"], config("survivor"), journals["survivor"])
    leaver = ThreadMember(clients["leaver"], config("leaver"), journals["leaver"])
    timings = {}

    def group_seen() -> Any:
        return http.get(f"/v1/groups/{group}").json()

    def mid_batch() -> bool:  # processing a batch it got after the leave, not committed yet
        event = last_event(journals["killed"])
        return (event is not None and "processed" in event and event["t"] > left
                and time.monotonic() - event["t"] < KILLED_PROCESS_MS / 3000)

    try:
        wait_for("three members sharing the partitions", owned_by(http, group, set(ROLES)), STUCK_S, group_seen)
        wait_for("every member processing", lambda: all(read_journal(journals[r], r)[0] for r in ROLES), STUCK_S)
        timings["three members"] = time.monotonic() - started

        leaver.close()  # LeaveGroup
        left = time.monotonic()
        wait_for("the leaver's partitions to move", owned_by(http, group, {"survivor", "killed"}), STUCK_S, group_seen)
        timings["leave moved"] = time.monotonic() - left

        wait_for("the killed member in the middle of a batch", mid_batch, STUCK_S)
        killed.kill()  # no LeaveGroup, no commit of that batch: its session runs out
        died = time.monotonic()
        last = last_event(journals["killed"])
        assert last is not None and "processed" in last, "killed after it committed its batch"
        window = {(p, o) for p, o in last["processed"]}  # processed, never committed
        wait_for("the dead member's partitions to move", owned_by(http, group, {"survivor"}),
                 SESSION_MS / 1000 + 15, group_seen)
        timings["death moved"] = time.monotonic() - died
        assert timings["death moved"] > SESSION_MS / 1000 - HEARTBEAT_MS / 1000  # it took the session timeout

        producer.close()
        ends = end_offsets(http, topic)
        drain = time.monotonic()
        wait_for("the survivor to commit everything", lambda: committed_offsets(http, group, topic) == ends, STUCK_S,
                 lambda: (committed_offsets(http, group, topic), ends))
        timings["drained"] = time.monotonic() - drain
    except BaseException:
        print("the killed member's stderr:", (tmp_path / "killed.stderr").read_text()[-3000:])
        raise
    finally:
        producer.stop.set()
        killed.kill()
        survivor.stop.set()
        leaver.stop.set()
    survivor.close()
    leaver.close()
    assert committed_offsets(http, group, topic) == ends  # and the survivor's close took nothing back
    http.close()
    timings["total"] = time.monotonic() - started
    print(f"{assignor}: " + ", ".join(f"{k} {v:.1f}s" for k, v in timings.items()))

    produced = set(producer.placed)
    assert len(produced) == len(producer.placed)
    assert produced == {(p, o) for p, end in ends.items() for o in range(end)}  # the only writer
    assert all(ends.values()), ends
    processed, commits = [], []
    for role in ROLES:
        events = read_journal(journals[role], role)
        processed += events[0]
        commits += events[1]
    assert produced - {(p, o) for _, _, p, o in processed} == set()  # nothing lost
    again = {(p, o) for t, role, p, o in processed if role == "survivor" and t > died}
    assert window <= again, f"the killed member's uncommitted records not processed again: {window - again}"
    problems = duplicates_outside_windows(processed, commits, killed="killed")
    assert not problems, f"{len(problems)} duplicates outside uncommitted windows: {problems[:10]}"
    assert_topic_intact(server.root, topic)
