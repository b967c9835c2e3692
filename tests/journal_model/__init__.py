"""A model of the node journal's protocol, for the hypothesis tests that check it."""
