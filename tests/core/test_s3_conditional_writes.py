"""The guarantee lakelog's commits rest on, checked on the suite's S3 endpoint: of several concurrent
put-if-absent requests for one key, exactly one wins and its bytes are what is stored. moto's server needs
`tests/moto_fidelity.py` for it (S3 gives it); a second winner would let two writers commit one version."""

from __future__ import annotations

import threading

import pytest

from lakelog.platform.storage import Storage

CONTENDERS, KEYS = 4, 150


@pytest.mark.s3
def test_concurrent_put_if_absent_has_exactly_one_winner(s3) -> None:  # type: ignore[no-untyped-def]
    storage = Storage.open(s3.root(), s3.options)
    for key in range(KEYS):
        uri = storage.uri("race", f"{key:05d}.json")
        winners: list[bytes] = []
        start = threading.Barrier(CONTENDERS)

        def contend(who: int, uri: str = uri, winners: list[bytes] = winners,
                    start: threading.Barrier = start) -> None:
            data = b"%d" % who * 4096
            start.wait()
            if storage.put_if_absent(uri, data):
                winners.append(data)

        threads = [threading.Thread(target=contend, args=(who,)) for who in range(CONTENDERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(winners) == 1, f"key {key}: {len(winners)} winners"
        assert storage.read_bytes(uri) == winners[0]
