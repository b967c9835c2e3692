"""Consumer groups: the coordinator, its assignors and the committed-offsets control table.

Imports no HTTP framework: the ingest tier translates requests into calls on
`GroupCoordinator`.
"""

from lakelog.platform.groups.assignors import ASSIGNORS
from lakelog.platform.groups.coordinator import GroupCoordinator, GroupView, MemberView, Poll
from lakelog.platform.groups.membership import Heartbeat, JoinOptions
from lakelog.platform.groups.offsets import CommittedOffset, OffsetStore

__all__ = ["ASSIGNORS", "CommittedOffset", "GroupCoordinator", "GroupView", "Heartbeat", "JoinOptions",
           "MemberView", "OffsetStore", "Poll"]
