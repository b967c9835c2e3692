"""Produce calls for a topic this node does not lead, sent to its leader: checked and turned into Arrow
here (the CPU-heavy part stays on the node that received them), then group-sent, every call queued
while one request is in flight going in the next, so the leader sees few large requests.

A leader that cannot be connected to (the request never left) does not lose the calls: they are written
here, which is always correct, only slower if it happens often (two writers of one table). A request
that was sent and got no answer is ambiguous: its calls get a retriable error, as a Kafka client's
request timeout, and an idempotent producer's retry is answered with the original offsets.

With the node journal on, the calls' body goes to the leader by reference (forward_objects.py): one object
PUT per group-send and a reference of a few hundred bytes sent, instead of the records' bytes.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future
from functools import partial
from typing import Callable

import httpx

from lakelog.platform.cluster.errors import NodeUnavailable, RemoteError
from lakelog.platform.cluster.forward_objects import ForwardObjects
from lakelog.platform.cluster.membership import Node
from lakelog.platform.cluster.traffic import Traffic
from lakelog.platform.cluster.wire import ForwardedCall, decode_results, encode_calls, error_from
from lakelog.platform.produce.admission import PendingProduce, checked
from lakelog.platform.produce.group_commit import GroupCommit, copy_outcome, fail, succeed

log = logging.getLogger(__name__)
SECRET_HEADER = "X-Lakelog-Cluster-Secret"
FORWARDED_HEADER = "X-Lakelog-Forwarded"  # set on node-to-node calls: never forwarded again
PRODUCE_PATH = "/internal/v1/topics/{topic}/produce"
PRODUCE_REF_PATH = "/internal/v1/topics/{topic}/produce-ref"  # the calls by reference (journal on)
FETCH_PATH = "/internal/v1/topics/{topic}/fetch"  # a non-leader's fetch past its table's end (journal on)
LOG_ENDS_PATH = "/internal/v1/topics/{topic}/log-ends"  # the leader's log end offsets (journal on)
ARROW_STREAM = "application/vnd.apache.arrow.stream"
ANSWER_GRACE_S = 5.0  # beyond the callers' deadline, for the leader's answer to come back


class NotAccepted(Exception):
    """The leader refused the node-to-node call before doing anything with it."""


class NodeClient:
    """HTTP to the other nodes, with the cluster secret; one connection pool for all of them."""

    def __init__(self, secret: str | None, connections: int = 64) -> None:
        headers = {FORWARDED_HEADER: "1"}
        if secret:
            headers[SECRET_HEADER] = secret
        self.http = httpx.Client(headers=headers, limits=httpx.Limits(max_connections=connections),
                                 timeout=httpx.Timeout(30.0, connect=2.0))

    def produce(self, node: Node, topic: str, body: bytes, timeout_s: float) -> bytes:
        """Raises ConnectionError when the request could not be sent and NotAccepted when the leader refused
        it (nothing happened there in either case), NodeUnavailable when it was sent and no answer came."""
        return self._post(node, PRODUCE_PATH.format(topic=topic), body, ARROW_STREAM, timeout_s)

    def produce_ref(self, node: Node, topic: str, reference: bytes, timeout_s: float) -> bytes:
        """`produce` with a reference to the calls' object for body (reference.py); raises as it does."""
        return self._post(node, PRODUCE_REF_PATH.format(topic=topic), reference, "application/json", timeout_s)

    def fetch(self, node: Node, topic: str, ask: bytes, timeout_s: float) -> bytes:
        """A relayed fetch (wire.FetchAsk) answered by the leader (wire.encode_fetched); raises as `produce`."""
        return self._post(node, FETCH_PATH.format(topic=topic), ask, "application/json", timeout_s, "fetch")

    def log_ends(self, node: Node, topic: str, timeout_s: float) -> bytes:
        """The leader's log end offsets of the topic's partitions (JSON list); raises as `produce`."""
        return self._post(node, LOG_ENDS_PATH.format(topic=topic), b"", "application/json", timeout_s, "log ends")

    def _post(self, node: Node, path: str, body: bytes, content_type: str, timeout_s: float,
              call: str = "forwarded produce") -> bytes:
        url = node.address.rstrip("/") + path
        try:
            response = self.http.post(url, content=body, timeout=httpx.Timeout(timeout_s, connect=2.0),
                                      headers={"Content-Type": content_type})
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            raise ConnectionError(f"node {node.node_id} at {node.address}: {exc}") from None
        except httpx.HTTPError as exc:
            raise NodeUnavailable(f"node {node.node_id} did not answer a {call}: {exc}") from None
        if response.status_code == 403:  # another cluster secret (a rotation under way): nothing was done there
            raise NotAccepted(f"node {node.node_id} refused the cluster secret")
        if response.status_code != 200:
            try:
                answer = response.json()
                if "error_code" in answer:  # the HTTP tier's error body: the leader refused the whole request
                    raise RemoteError(f"node {node.node_id}: {answer['message']}", answer["error_code"],
                                      bool(answer["retriable"]))
                raise error_from(answer)
            except (ValueError, KeyError, TypeError):
                raise NodeUnavailable(f"node {node.node_id} answered {response.status_code} to a "
                                      f"{call}") from None
        return response.content

    def close(self) -> None:
        self.http.close()


LocalWrite = Callable[[PendingProduce], Future]


class TopicForwarder:
    """One topic's calls to one leader node."""

    def __init__(self, topic: str, leader: Node, client: NodeClient, write_here: LocalWrite,
                 batch_bytes: int, unreachable: Callable[[str], None] = lambda node_id: None,
                 objects: ForwardObjects | None = None, traffic: Traffic | None = None) -> None:
        """`objects`: send the calls by reference, through this node's forward objects (journal on)."""
        self.topic = topic
        self.leader = leader
        self._client = client
        self._objects = objects
        self._traffic = traffic or Traffic()
        self._write_here = write_here
        self._unreachable = unreachable
        self._sends = GroupCommit(f"forward-{topic}-{leader.node_id}", self._send, 0, batch_bytes,
                                  lambda pending: pending.nbytes)

    def submit(self, pending: PendingProduce) -> Future:
        self._sends.submit(pending)
        return pending.future

    def close(self, timeout: float | None = None) -> None:
        self._sends.close(timeout)

    def _send(self, batch: list[PendingProduce]) -> None:
        calls = checked([p for p in batch if not p.future.done()], self.topic)  # bad records are answered here
        if not calls:
            return
        forwarded = [ForwardedCall(p.table, p.partitions, p.acks, _left_ms(p), p.producer) for p in calls]
        timeout_s = max(f.timeout_ms for f in forwarded) / 1000 + ANSWER_GRACE_S
        try:
            results = decode_results(self._deliver(forwarded, timeout_s), forwarded)
        except (ConnectionError, NotAccepted) as exc:
            log.warning("leader of %s unreachable, writing here: %s", self.topic, exc)
            if isinstance(exc, ConnectionError):
                self._unreachable(self.leader.node_id)
            for pending in calls:
                written = self._write_here(pending)
                if written is not pending.future:
                    written.add_done_callback(partial(copy_outcome, into=pending.future))
            return
        except Exception as exc:
            for pending in calls:
                fail(pending.future, exc)
            return
        for pending, result in zip(calls, results):
            if isinstance(result, Exception):
                fail(pending.future, result)
            else:
                succeed(pending.future, result)

    def _deliver(self, forwarded: list[ForwardedCall], timeout_s: float) -> bytes:
        """The leader's answer to the calls, sent as bytes or, with forward objects, by reference (the object
        deleted once the call is over, whatever its outcome)."""
        body = encode_calls(forwarded)
        if self._objects is None:
            self._traffic.forwarded(len(body), 0)
            answer = self._client.produce(self.leader, self.topic, body, timeout_s)
        else:
            reference = self._objects.put(body, forwarded)
            sent = reference.encode()
            self._traffic.forwarded(len(sent), 0)
            try:
                answer = self._client.produce_ref(self.leader, self.topic, sent, timeout_s)
            finally:
                self._objects.delete(reference)
        self._traffic.forwarded(0, len(answer))
        return answer


def _left_ms(pending: PendingProduce) -> int:
    return max(1, int(pending.deadline.remaining_s() * 1000))
