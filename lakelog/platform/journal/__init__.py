"""The node journal (issue 26): one journal object per flush of a node for every topic it leads,
acknowledged once durable, the topic tables committed behind it (docs/architecture.md, "The node journal").

Built, opt-in (settings `journal_enable`, LAKELOG_JOURNAL_ENABLE): the writer (`writer.py`), the object
format (`objects.py`), the per-topic state served to fetches (`topic_state.py`), the background table
commits (`committer.py`, `table_commit.py`, planned by `planner.py`), topic epochs with fencing and replay
of the previous holder (`claims.py`), the replay of the node's own journal at start (`recovery.py`), and the
broker's door to them (`node.py`). Designed and modelled, not built: forwarded produce by reference (a
non-leader forwards the bytes, as without the journal), sweeping a gone node's generations. The protocol as
a pure state machine: `protocol.py`, `takeover.py`, `invariants.py`.
"""
