"""Request and response bodies of the share-group routes (`routes/share_groups.py`), pydantic, as in
`models.py` (unknown fields refused with 422). The records a poll answers are rendered in bulk by
`codec.render_records`, as every fetch's, with each record's `delivery_count` added.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from lakelog.ingest_api.models import MAX_INT64, FetchedRecord, Format, Request, Strict, TopicPartitionModel

AckKind = Literal["accept", "release", "reject"]


class ShareJoin(Request):
    topics: list[str] = Field(..., min_length=1, description="The topics to share records of")
    client_id: str = Field("", max_length=255, description="Shown in the group's description")


class ShareMembership(Strict):
    member_id: str
    epoch: int = Field(description="The member's epoch; a heartbeat may send it back (else the current one)")
    assignment: list[TopicPartitionModel] = Field(
        description="The partitions this member reads (a partition may be shared by several members)")
    heartbeat_interval_ms: int = Field(description="Heartbeat at least this often (the session times out after "
                                                   "group.share.session.timeout.ms)")


class ShareHeartbeat(Request):
    epoch: int | None = Field(None, ge=0, description="The epoch last answered (FENCED_MEMBER_EPOCH when stale); "
                                                      "left out: the member's current one")
    topics: list[str] | None = Field(None, min_length=1, description="A new subscription")


class ShareAck(Request):
    topic: str = Field(..., min_length=1, max_length=249)
    partition: int = Field(..., ge=0, le=2**31 - 1)
    offset: int | None = Field(None, ge=0, le=MAX_INT64, description="One record (or give `offsets`)")
    offsets: list[int] | None = Field(None, min_length=1, description="Several records of the partition")
    type: AckKind = Field("accept", description="accept (done), release (deliver again, to anyone) or reject "
                                                "(never again: dead-lettered when the group has a dead-letter topic)")


class ShareAcks(Request):
    acks: list[ShareAck] = Field(..., min_length=1)


class SharePoll(Request):
    max_records: int = Field(500, ge=1, le=100_000)
    max_bytes: int | None = Field(None, ge=1, le=2**31 - 1)
    timeout_ms: int = Field(0, ge=0, le=300_000, description="Wait up to this long for records to deliver")
    acks: list[ShareAck] = Field(default_factory=list, description="Acknowledgements applied before delivering")
    key_format: Format = "string"
    value_format: Format = "string"


class FailedAck(Strict):
    topic: str
    partition: int
    error_code: str
    message: str


class SharedRecord(FetchedRecord):
    delivery_count: int = Field(description="How many times this record has been delivered, this time included")


class SharePollResponse(Strict):
    records: list[SharedRecord]
    failed_acks: list[FailedAck] = Field(description="Acknowledgements refused (INVALID_RECORD_STATE: the member "
                                                     "no longer holds the record, e.g. its lock expired)")
    errors: list[FailedAck] = Field(description="Partitions that could not be read")


class ShareAckResponse(Strict):
    failed_acks: list[FailedAck]


class ShareMemberDescription(Strict):
    member_id: str
    epoch: int
    client_id: str
    client_host: str
    topics: list[str]
    assignment: list[TopicPartitionModel]
    last_heartbeat_ms_ago: int


class InFlightRecord(Strict):
    offset: int
    state: Literal["available", "acquired", "acknowledged", "archived"]
    delivery_count: int
    owner: str | None = Field(description="The member holding it while acquired")
    lock_until_ms: int | None = Field(description="When its acquisition lock runs out (ms since the epoch)")


class SharePartitionDescription(Strict):
    topic: str
    partition: int
    start_offset: int = Field(description="Every record before it is accepted or archived (Kafka's SPSO)")
    next_offset: int = Field(description="No record from here on has been delivered yet")
    in_flight: list[InFlightRecord]


class ShareGroupDescription(Strict):
    group: str
    type: Literal["share"] = "share"
    state: str
    epoch: int
    members: list[ShareMemberDescription]
    partitions: list[SharePartitionDescription]


class ShareGroupSummary(Strict):
    group: str
    type: Literal["share"] = "share"
    state: str
    members: int


class ShareGroupList(Strict):
    groups: list[ShareGroupSummary]


class ShareConfig(Strict):
    group: str
    config: dict[str, str] = Field(description="Every share group config, the group's own values over the "
                                               "broker's defaults")
    overrides: list[str] = Field(description="The names the group sets itself")


class ShareConfigChange(Request):
    config: dict[str, str | int | None] = Field(..., min_length=1, description="name: value (null: back to "
                                                                                "the default)")
