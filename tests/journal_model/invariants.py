"""The journal's safety invariants, checked on a model `World` after every step: what must hold whatever
the interleaving, crashes and pauses. Pure: the recovery it checks against is computed on a copy.
"""

from __future__ import annotations

from dataclasses import replace

from tests.journal_model.protocol import World
from tests.journal_model.takeover import replay_into_table


def problems(world: World) -> list[str]:
    """Every broken invariant, described; empty when the world is safe."""
    found = list(world.violations)
    found += fenced_acknowledgements(world)
    found += acknowledged_outside_epochs(world)
    found += lost_acknowledgements(world)
    return found


def fenced_acknowledgements(world: World) -> list[str]:
    """A fenced zombie cannot acknowledge: no slot at or above a fence ever put in its generation."""
    return [f"slot {slot} of generation {gen} acknowledged at or above a fence at {fence}"
            for gen, slot in sorted(world.acked_slots)
            for fenced_gen, fence in world.fences_placed if fenced_gen == gen and fence <= slot]


def acknowledged_outside_epochs(world: World) -> list[str]:
    """A generation acknowledges a topic's offsets only within an epoch naming it: from the epoch's start to
    the next epoch's (which a taker set after replaying what lay below its fence)."""
    found = []
    for (topic, partition, offset), gens in sorted(world.acked_in.items()):
        epochs = world.epochs[topic]
        for gen in sorted(gens):
            if not any(record.gen == gen and record.starts[partition] <= offset <
                       (epochs[number + 1].starts[partition] if number + 1 in epochs else float("inf"))
                       for number, record in epochs.items()):
                found.append(f"{topic}/{partition}@{offset} acknowledged by generation {gen} outside its epochs")
    return found


def recovered(world: World) -> World:
    """What a takeover of every topic would make of the tables now: the world after replaying each, on a copy
    (replay conflicts land in the copy's violations)."""
    after = _tables_copied(world)
    for topic in after.topics:
        replay_into_table(after, topic)
    return after


def lost_acknowledgements(world: World) -> list[str]:
    """No acknowledged record lost, no offset reused: each acknowledged record is, at its offset, in the
    table or in what a takeover would replay, and replay finds no offset holding two records."""
    after = recovered(world)
    found = [f"replay: {problem}" for problem in after.violations]
    for (topic, partition, offset), record in sorted(world.acked.items()):
        table = after.tables[(topic, partition)]
        held = table[offset] if offset < len(table) else None
        if held != record:
            found.append(f"acknowledged record {record} at {topic}/{partition}@{offset} lost (recovery holds {held})")
    return found


def replay_is_idempotent(world: World, topic: str) -> list[str]:
    """Replaying a topic twice leaves what replaying it once did, and neither reports a conflict."""
    once = _tables_copied(world)
    replay_into_table(once, topic)
    twice = _tables_copied(once)
    replay_into_table(twice, topic)
    found = [f"replay of {topic}: {problem}" for problem in once.violations + twice.violations]
    if twice.tables != once.tables:
        found.append(f"replaying {topic} again changed its table")
    return found


def _tables_copied(world: World) -> World:
    """The world sharing everything a replay only reads (slots, epochs), with its own tables and violations."""
    return replace(world, tables={key: list(records) for key, records in world.tables.items()}, violations=[])
