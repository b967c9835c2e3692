"""The node journal: the one write path. One journal object per flush of a node for every topic it leads,
acknowledged once durable, the topic tables committed behind it (docs/architecture.md, "The node journal").

The writer (`writer.py`), the object
format (`objects.py`), the per-topic state served to fetches (`topic_state.py`), the background table
commits (`committer.py`, `table_commit.py`, planned by `planner.py`), topic epochs with fencing and replay
of the previous holder (`claims.py`), the replay of the node's own journal at start (`recovery.py`), and the
broker's door to them (`node.py`), sweeping a gone node's generations (`sweep.py`, `sweep_plan.py`). The
protocol as a pure state machine: `protocol.py`, `takeover.py`, `invariants.py`.
"""
