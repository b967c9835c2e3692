"""How long a test waits before it calls something stuck. A loaded machine is slow, not stuck: these bounds
say "nothing is happening any more", in minutes, never "this was too slow" (speed is for `benchmarks/`)."""

STUCK_S = 300.0  # a client's timeout, or a wait for a condition that should hold soon
