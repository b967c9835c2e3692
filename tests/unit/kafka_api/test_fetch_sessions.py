"""Fetch sessions (KIP-227), the cache alone: opening, incremental requests, errors, closing, eviction."""

from __future__ import annotations

from lakelog.kafka_api.fetch_sessions import (
    FETCH_SESSION_ID_NOT_FOUND,
    INVALID_FETCH_SESSION_EPOCH,
    MAX_EPOCH,
    Answer,
    FetchSessions,
    Kind,
    next_epoch,
)

IDLE = Answer(has_records=False, error_code=0, high_watermark=5, log_start_offset=0, last_stable_offset=5)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def opened(sessions: FetchSessions, partitions: int = 3, answer: Answer = IDLE) -> int:
    """A full request over t-0..t-(n-1) at offset 5, answered `answer` each: the new session's id."""
    plan = sessions.plan(0, 0, {("t", p): (5, 1024) for p in range(partitions)}, [])
    assert plan.kind is Kind.FULL
    outcome = sessions.finish(plan, [(key, answer) for key, _, _ in plan.wanted])
    assert outcome.error_code == 0 and outcome.listed == [("t", p) for p in range(partitions)]
    return outcome.session_id


def test_a_full_request_opens_a_session_that_later_requests_need_not_repeat():
    sessions = FetchSessions()
    session_id = opened(sessions)
    assert session_id != 0 and len(sessions) == 1
    plan = sessions.plan(session_id, 1, {}, [])
    assert plan.kind is Kind.INCREMENTAL
    assert plan.wanted == [(("t", 0), 5, 1024), (("t", 1), 5, 1024), (("t", 2), 5, 1024)]
    outcome = sessions.finish(plan, [(key, IDLE) for key, _, _ in plan.wanted])
    assert (outcome.session_id, outcome.error_code, outcome.listed) == (session_id, 0, [])  # nothing changed


def test_an_incremental_answer_lists_records_errors_and_moved_offsets_only():
    sessions = FetchSessions()
    session_id = opened(sessions, 5)
    plan = sessions.plan(session_id, 1, {("t", 1): (7, 2048), ("u", 0): (0, 10)}, [("t", 4)])
    assert [w[0] for w in plan.wanted] == [("t", 0), ("t", 1), ("t", 2), ("t", 3), ("u", 0)]
    assert plan.wanted[1] == (("t", 1), 7, 2048)  # updated in place
    answers = {("t", 0): IDLE,
               ("t", 1): Answer(True, 0, 9, 0, 9),  # records
               ("t", 2): Answer(False, 0, 5, 3, 5),  # the log start moved (retention)
               ("t", 3): Answer(False, 3, -1, -1, -1),  # an error
               ("u", 0): Answer(False, 0, 0, 0, 0)}  # new to the session: its first answer
    outcome = sessions.finish(plan, list(answers.items()))
    assert outcome.listed == [("t", 1), ("t", 2), ("t", 3), ("u", 0)]
    # Answered the same again: only the error (kept until it is gone) and the partition with records.
    plan = sessions.plan(session_id, 2, {}, [])
    assert [w[0] for w in plan.wanted] == [("t", 0), ("t", 2), ("t", 3), ("u", 0), ("t", 1)]  # records: last
    assert sessions.finish(plan, [(key, answers[key]) for key, _, _ in plan.wanted]).listed == [("t", 3), ("t", 1)]
    plan = sessions.plan(session_id, 3, {}, [])
    healed = {**answers, ("t", 1): Answer(False, 0, 9, 0, 9), ("t", 3): IDLE}
    assert sessions.finish(plan, [(key, healed[key]) for key, _, _ in plan.wanted]).listed == [("t", 3)]


def test_a_last_stable_offset_that_moves_is_listed():
    sessions = FetchSessions()
    session_id = opened(sessions, 1, Answer(False, 0, 5, 0, 3))  # an open transaction from offset 3
    plan = sessions.plan(session_id, 1, {}, [])
    assert sessions.finish(plan, [(("t", 0), Answer(False, 0, 5, 0, 5))]).listed == [("t", 0)]


def test_a_wrong_epoch_or_an_unknown_session_is_an_error_and_changes_nothing():
    sessions = FetchSessions()
    session_id = opened(sessions)
    wrong = sessions.plan(session_id, 2, {("t", 9): (0, 1)}, [("t", 0)])
    assert (wrong.kind, wrong.error_code, wrong.wanted) == (Kind.ERROR, INVALID_FETCH_SESSION_EPOCH, [])
    assert sessions.finish(wrong, []).session_id == 0
    unknown = sessions.plan(session_id + 1, 1, {}, [])
    assert (unknown.kind, unknown.error_code) == (Kind.ERROR, FETCH_SESSION_ID_NOT_FOUND)
    assert sessions.plan(0, 1, {}, []).error_code == FETCH_SESSION_ID_NOT_FOUND  # epoch > 0 needs a session
    right = sessions.plan(session_id, 1, {}, [])
    assert [w[0] for w in right.wanted] == [("t", 0), ("t", 1), ("t", 2)]  # the wrong request changed nothing


def test_a_request_overtaken_by_the_sessions_next_one_answers_an_epoch_error():
    sessions = FetchSessions()
    session_id = opened(sessions)
    first = sessions.plan(session_id, 1, {}, [])
    second = sessions.plan(session_id, 2, {}, [])
    assert sessions.finish(second, [(key, IDLE) for key, _, _ in second.wanted]).error_code == 0
    late = sessions.finish(first, [(key, IDLE) for key, _, _ in first.wanted])
    assert (late.error_code, late.listed) == (INVALID_FETCH_SESSION_EPOCH, [])


def test_epoch_minus_one_closes_the_session_and_epoch_zero_starts_it_over():
    sessions = FetchSessions()
    session_id = opened(sessions)
    closing = sessions.plan(session_id, -1, {("t", 0): (1, 1)}, [])
    assert closing.kind is Kind.SESSIONLESS and closing.wanted == [(("t", 0), 1, 1)]
    assert sessions.finish(closing, [(("t", 0), IDLE)]).session_id == 0
    assert len(sessions) == 0 and sessions.plan(session_id, 1, {}, []).error_code == FETCH_SESSION_ID_NOT_FOUND
    again = opened(sessions)
    restarted = sessions.plan(again, 0, {("t", 0): (5, 1)}, [])  # a full request naming its session: a new one
    assert restarted.kind is Kind.FULL and sessions.get(again) is None


def test_forgetting_every_partition_ends_the_session():
    sessions = FetchSessions()
    session_id = opened(sessions, 2)
    plan = sessions.plan(session_id, 1, {}, [("t", 0), ("t", 1)])
    assert plan.kind is Kind.SESSIONLESS and plan.wanted == [] and len(sessions) == 0


def test_a_full_cache_answers_without_a_session_until_one_may_be_evicted():
    clock = Clock()
    sessions = FetchSessions(max_sessions=2, eviction_s=120, clock=clock)
    small, large = opened(sessions, 1), opened(sessions, 4)
    assert opened(sessions, 9) == 0  # both are younger than the eviction time: none is evicted
    clock.now += 121
    sessions.finish(sessions.plan(small, 1, {}, []), [(("t", 0), IDLE)])  # used: not stale
    sessions.finish(plan := sessions.plan(large, 1, {}, []), [(key, IDLE) for key, _, _ in plan.wanted])
    assert opened(sessions, 1) == 0  # no larger than the smallest settled session
    newer = opened(sessions, 2)  # larger than the smallest: it goes
    assert newer != 0 and sessions.get(small) is None and sessions.get(large) is not None
    clock.now += 60
    sessions.finish(plan := sessions.plan(newer, 1, {}, []), [(key, IDLE) for key, _, _ in plan.wanted])
    clock.now += 121  # the least recently used, unused for longer than the eviction time: stale, whatever its size
    assert opened(sessions, 1) != 0 and len(sessions) == 2 and sessions.get(large) is None


def test_epochs_wrap_to_one():
    assert next_epoch(0) == 1 and next_epoch(MAX_EPOCH) == 1 and next_epoch(-1) == -1
