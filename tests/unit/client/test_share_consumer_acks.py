"""The share consumer's acknowledgements (`lakelog/client/share_acks.py`, pure): implicit mode accepts what
was handed out unless told otherwise, explicit mode sends only what was chosen, and the wire form groups
offsets per partition and type."""

from __future__ import annotations

import pytest

from lakelog.client.share_acks import AcknowledgeType, Acknowledgements, wire

ACCEPT, RELEASE, REJECT = AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT


def test_implicit_mode_accepts_everything_handed_out_unless_chosen_otherwise() -> None:
    acks = Acknowledgements("implicit")
    acks.handed([("t", 0, 1), ("t", 0, 2), ("t", 1, 5)])
    acks.choose(("t", 0, 2), REJECT)
    assert acks.take() == {("t", 0, 1): ACCEPT, ("t", 0, 2): REJECT, ("t", 1, 5): ACCEPT}
    assert acks.take() == {} and acks.pending() == 0


def test_explicit_mode_sends_only_what_was_chosen_the_last_choice_winning() -> None:
    acks = Acknowledgements("explicit")
    acks.handed([("t", 0, 1), ("t", 0, 2)])
    acks.choose(("t", 0, 1), RELEASE)
    acks.choose(("t", 0, 1), ACCEPT)
    assert acks.take() == {("t", 0, 1): ACCEPT}
    assert acks.pending() == 1  # offset 2: its lock runs out on the server
    acks.choose(("t", 0, 2), RELEASE)
    assert acks.take() == {("t", 0, 2): RELEASE}


def test_only_records_held_may_be_chosen_and_a_lost_member_holds_none() -> None:
    acks = Acknowledgements("explicit")
    with pytest.raises(KeyError):
        acks.choose(("t", 0, 1), ACCEPT)
    acks.handed([("t", 0, 1)])
    acks.forget()
    with pytest.raises(KeyError):
        acks.choose(("t", 0, 1), ACCEPT)
    with pytest.raises(ValueError, match="implicit or explicit"):
        Acknowledgements("manual")


def test_wire_groups_offsets_per_partition_and_type() -> None:
    sent = wire({("b", 0, 4): ACCEPT, ("a", 1, 9): REJECT, ("a", 1, 3): ACCEPT, ("a", 1, 2): ACCEPT})
    assert sent == [{"topic": "a", "partition": 1, "offsets": [2, 3], "type": "accept"},
                    {"topic": "a", "partition": 1, "offsets": [9], "type": "reject"},
                    {"topic": "b", "partition": 0, "offsets": [4], "type": "accept"}]
