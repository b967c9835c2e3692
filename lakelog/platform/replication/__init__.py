"""Replicated commits: a topic's Delta table copied commit for commit to follower sites."""
