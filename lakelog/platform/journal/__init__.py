"""The node journal (issue 26), designed and modelled, not yet built: one journal object per flush of a
node for every topic it leads, acknowledged once durable, the topic tables committed behind it, and
fencing on object storage alone (docs/architecture.md, "The node journal (designed, not yet built)").

What is here is the protocol as a pure state machine (`protocol.py`, `takeover.py`) and its safety
invariants (`invariants.py`), for property tests. Nothing in the produce path uses it yet.
"""
