"""ingest_api.fast_path and answers: which requests the raw produce path takes, its header and body reading,
and the journal's answers reaching the event loop in batches."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future
from typing import Any

import pytest
from starlette.requests import ClientDisconnect

from lakelog.ingest_api.answers import answered
from lakelog.ingest_api.fast_path import body_chunks, produce_topic, read_headers


def scope(path: str, method: str = "POST", kind: str = "http") -> dict[str, Any]:
    return {"type": kind, "method": method, "path": path}


def test_only_post_to_a_topic_s_records_is_taken() -> None:
    assert produce_topic(scope("/v1/topics/orders/records")) == "orders"
    assert produce_topic(scope("/v1/topics/a.b-c_d/records")) == "a.b-c_d"
    assert produce_topic(scope("/v1/topics/orders/records", "GET")) is None
    assert produce_topic(scope("/v1/topics/orders/records", kind="websocket")) is None
    assert produce_topic(scope("/v1/topics//records")) is None
    assert produce_topic(scope("/v1/topics/a/b/records")) is None
    assert produce_topic(scope("/v1/topics/orders/partitions/0/records")) is None
    assert produce_topic(scope("/v1/topics/" + "t" * 249 + "/records")) == "t" * 249
    assert produce_topic(scope("/v1/topics/" + "t" * 250 + "/records")) is None  # FastAPI's route answers 422


def test_the_first_of_each_header_read_is_kept() -> None:
    headers = [(b"content-type", b"application/json"), (b"authorization", b"Bearer k1"),
               (b"authorization", b"Bearer k2"), (b"x-other", b"1"), (b"idempotency-key", b"abc")]
    assert read_headers({"headers": headers}) == {"content-type": "application/json", "authorization": "Bearer k1",
                                                  "idempotency-key": "abc"}


def test_body_chunks_as_they_arrive_and_a_disconnect_raises() -> None:
    async def collect(messages: list[dict[str, Any]]) -> list[bytes]:
        queue = list(messages)

        async def receive() -> dict[str, Any]:
            return queue.pop(0)

        return [chunk async for chunk in body_chunks(receive)]

    parts = [{"type": "http.request", "body": b"ab", "more_body": True},
             {"type": "http.request", "body": b"", "more_body": True},
             {"type": "http.request", "body": b"c"}]
    assert asyncio.run(collect(parts)) == [b"ab", b"c"]
    with pytest.raises(ClientDisconnect):
        asyncio.run(collect([{"type": "http.request", "body": b"a", "more_body": True}, {"type": "http.disconnect"}]))


def test_answers_from_another_thread_in_one_batch() -> None:
    async def main() -> list[Any]:
        futures: list[Future] = [Future() for _ in range(50)]
        waits = [asyncio.ensure_future(answered(f)) for f in futures]
        await asyncio.sleep(0)

        def answer() -> None:
            for i, future in enumerate(futures):
                if i == 7:
                    future.set_exception(ValueError("seven"))
                else:
                    future.set_result(i)

        threading.Thread(target=answer).start()
        return await asyncio.gather(*waits, return_exceptions=True)

    results = asyncio.run(main())
    assert [r for i, r in enumerate(results) if i != 7] == [i for i in range(50) if i != 7]
    assert isinstance(results[7], ValueError)


def test_an_answer_already_there_and_a_wait_cancelled() -> None:
    async def main() -> None:
        done: Future = Future()
        done.set_result("now")
        assert await answered(done) == "now"
        pending: Future = Future()
        wait = asyncio.ensure_future(answered(pending))
        await asyncio.sleep(0)
        wait.cancel()
        await asyncio.sleep(0)
        assert not pending.cancelled()  # the core's future stays its owner's to answer
        pending.set_result(1)
        await asyncio.sleep(0.01)  # the drain passes over the cancelled wait
        assert wait.cancelled()

    asyncio.run(main())
