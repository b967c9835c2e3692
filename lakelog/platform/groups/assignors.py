"""Partition assignors: range, roundrobin and cooperative-sticky, as in Kafka's clients.

An assignor maps each member to a set of (topic, partition) from the
members' subscriptions. Members are ordered by member id, as Kafka does, so
an assignment is deterministic.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Callable, Mapping

from lakelog.platform.records import TopicPartition

# member id -> subscribed topics; topic -> partition count; member id -> partitions owned now
Subscriptions = Mapping[str, frozenset[str]]
PartitionCounts = Mapping[str, int]
Owned = Mapping[str, set[TopicPartition]]
Assignment = dict[str, set[TopicPartition]]

ASSIGNORS = ("range", "roundrobin", "cooperative-sticky")


def range_assign(subscriptions: Subscriptions, counts: PartitionCounts, owned: Owned) -> Assignment:
    """Per topic, contiguous ranges of partitions; the first members get one more when it does not divide."""
    result: Assignment = {m: set() for m in subscriptions}
    for topic in sorted(counts):
        members = sorted(m for m, topics in subscriptions.items() if topic in topics)
        if not members:
            continue
        per, extra = divmod(counts[topic], len(members))
        start = 0
        for i, member in enumerate(members):
            size = per + (1 if i < extra else 0)
            result[member].update((topic, p) for p in range(start, start + size))
            start += size
    return result


def roundrobin_assign(subscriptions: Subscriptions, counts: PartitionCounts, owned: Owned) -> Assignment:
    """All partitions in (topic, partition) order dealt in turn to the members subscribed to their topic."""
    result: Assignment = {m: set() for m in subscriptions}
    members = sorted(subscriptions)
    if not members:
        return result
    turn = 0
    for topic in sorted(counts):
        for partition in range(counts[topic]):
            for _ in range(len(members)):
                member = members[turn % len(members)]
                turn += 1
                if topic in subscriptions[member]:
                    result[member].add((topic, partition))
                    break
    return result


def sticky_assign(subscriptions: Subscriptions, counts: PartitionCounts, owned: Owned) -> Assignment:
    """Balanced, moving as few partitions as possible from their current owners."""
    members = sorted(subscriptions)
    result: Assignment = {m: set() for m in members}
    if not members:
        return result
    every = [(t, p) for t in sorted(counts) for p in range(counts[t])]
    eligible = {tp: [m for m in members if tp[0] in subscriptions[m]] for tp in every}
    floor, ceil = _quotas(every, eligible, members)
    spare = max(sum(1 for tp in every if eligible[tp]) - sum(floor.values()), 0)
    taken: set[TopicPartition] = set()
    kept = {m: sorted(tp for tp in owned.get(m, ()) if tp in eligible and m in eligible[tp]) for m in members}
    for member in members:  # keep what is still valid, up to the fair share
        for tp in kept[member][: floor[member]]:
            if tp not in taken:
                result[member].add(tp)
                taken.add(tp)
    for member in members:  # members over the floor keep one more while the spare lasts
        if spare and ceil[member] > len(result[member]):
            for tp in kept[member]:
                if tp not in taken:
                    result[member].add(tp)
                    taken.add(tp)
                    spare -= 1
                    break
    for tp in every:  # the rest to the least loaded eligible member
        if tp in taken or not eligible[tp]:
            continue
        member = min(eligible[tp], key=lambda m: (len(result[m]) - floor[m], len(result[m]), m))
        result[member].add(tp)
        taken.add(tp)
    return result


def _quotas(every: list[TopicPartition], eligible: Mapping[TopicPartition, list[str]],
            members: list[str]) -> tuple[dict[str, int], dict[str, int]]:
    """Floor and ceiling of a fair share per member, among the partitions it may take."""
    load: dict[str, float] = defaultdict(float)
    for tp in every:
        for member in eligible[tp]:
            load[member] += 1 / len(eligible[tp])
    floor = {m: int(load[m] + 1e-9) for m in members}
    ceil = {m: floor[m] + (1 if load[m] - floor[m] > 1e-9 else 0) for m in members}
    return floor, ceil


AssignorFn = Callable[[Subscriptions, PartitionCounts, Owned], Assignment]
BY_NAME: dict[str, AssignorFn] = {
    "range": range_assign,
    "roundrobin": roundrobin_assign,
    "cooperative-sticky": sticky_assign,
}


def is_cooperative(name: str) -> bool:
    return name == "cooperative-sticky"
