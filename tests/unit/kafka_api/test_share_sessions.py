"""Share sessions: epochs, added and forgotten partitions, closing."""

from __future__ import annotations

import pytest

from lakelog.kafka_api.share_sessions import ShareSessions
from lakelog.platform.errors import InvalidRequest
from lakelog.platform.share.errors import InvalidShareSessionEpoch, ShareSessionNotFound


def test_a_session_opens_at_epoch_0_and_carries_its_partitions_from_request_to_request():
    sessions = ShareSessions()
    opened = sessions.step("g", "m", 0, [("t", 0), ("t", 1)], [], acknowledging=False)
    assert opened is not None and opened.partitions == [("t", 0), ("t", 1)] and opened.epoch == 1
    later = sessions.step("g", "m", 1, [("u", 0)], [("t", 0)], acknowledging=True)
    assert later is not None and later.partitions == [("t", 1), ("u", 0)] and later.epoch == 2


def test_a_wrong_epoch_or_a_missing_session_is_refused_and_changes_nothing():
    sessions = ShareSessions()
    with pytest.raises(ShareSessionNotFound):
        sessions.step("g", "m", 1, [], [], acknowledging=False)
    sessions.step("g", "m", 0, [("t", 0)], [], acknowledging=False)
    with pytest.raises(InvalidShareSessionEpoch):
        sessions.step("g", "m", 5, [("t", 1)], [], acknowledging=False)
    again = sessions.step("g", "m", 1, [], [], acknowledging=False)
    assert again is not None and again.partitions == [("t", 0)]


def test_opening_cannot_acknowledge_and_closing_cannot_forget():
    sessions = ShareSessions()
    with pytest.raises(InvalidRequest):
        sessions.step("g", "m", 0, [("t", 0)], [], acknowledging=True)
    sessions.step("g", "m", 0, [("t", 0)], [], acknowledging=False)
    with pytest.raises(InvalidRequest):
        sessions.step("g", "m", -1, [], [("t", 0)], acknowledging=False)
    assert sessions.step("g", "m", -1, [], [], acknowledging=True) is None
    with pytest.raises(ShareSessionNotFound):
        sessions.step("g", "m", 2, [], [], acknowledging=False)


def test_share_acknowledge_moves_the_epoch_and_may_close_a_session_that_is_gone():
    sessions = ShareSessions()
    sessions.step("g", "m", 0, [("t", 0)], [], acknowledging=False)
    sessions.check("g", "m", 1, acknowledging=True)
    with pytest.raises(InvalidShareSessionEpoch):
        sessions.check("g", "m", 1, acknowledging=True)
    sessions.check("g", "m", -1, acknowledging=False)
    sessions.check("g", "m", -1, acknowledging=False)  # already gone: nothing to do
    with pytest.raises(ShareSessionNotFound):
        sessions.check("g", "m", -1, acknowledging=True)  # acknowledgements need the session
