"""Taking a topic over, in the journal's model: fence the previous leader's generation on the store alone
(a put-if-absent of the slot after the highest one listed), then replay the entries below each
generation's seal into the table at their own offsets, then claim the next epoch. Two steps, so that other
processes' steps (the zombie's puts, commits, deletions) interleave between the fence and the claim.
Also the sweep of sealed generations. Pure, like protocol.py.
"""

from __future__ import annotations

from lakelog.platform.journal.protocol import (
    Entry,
    Epoch,
    Fence,
    Gen,
    JournalObject,
    Lead,
    Proc,
    World,
    append_at,
    claim_epoch,
    committed,
    leads,
    put_if_absent,
)


def begin_takeover(world: World, proc: Proc, topic: str) -> bool:
    """Read the topic's latest epoch and fence the generation it names."""
    if not proc.acting or proc.fenced or leads(proc, topic) or topic in proc.taking:
        return False
    epoch = world.latest_epoch(topic)
    gen = world.epochs[topic][epoch].gen
    if world.variant.fence and gen is not None and gen != proc.gen:
        fence(world, gen, proc.pid)
    proc.taking[topic] = epoch
    return True


def fence(world: World, gen: Gen, by: int) -> int:
    """Put a fence at the slot after the highest one listed; the next, if that one was taken meanwhile."""
    slot = max(world.slots.get(gen, {}), default=-1) + 1
    while not put_if_absent(world, gen, slot, Fence(by)):
        slot += 1
    return slot


def complete_takeover(world: World, proc: Proc, topic: str) -> bool:
    """Replay, then claim the next epoch; if another process claimed an epoch since the fence, give up
    (what was replayed stays: replay is idempotent)."""
    if not proc.acting or proc.fenced or topic not in proc.taking:
        return False
    epoch = proc.taking.pop(topic)
    if world.latest_epoch(topic) != epoch:
        return True
    replay_into_table(world, topic)
    starts = tuple(len(world.tables[(topic, p)]) for p in range(world.partitions))
    if claim_epoch(world, topic, epoch + 1, Epoch(proc.gen, starts)):
        proc.leads[topic] = Lead(epoch + 1, list(starts))
    return True


def seal(world: World, gen: Gen) -> float:
    """The lowest fence of a generation: its writer acknowledged nothing at or above it."""
    fences = [slot for slot, held in world.slots.get(gen, {}).items() if isinstance(held, Fence)]
    return min(fences, default=float("inf"))


def replay_entries(world: World, topic: str) -> list[Entry]:
    """The topic's entries in the generations its epochs name, below each generation's seal (all of an
    unsealed one: its writer's landed objects), in (partition, offset) order."""
    gens = {record.gen for record in world.epochs[topic].values() if record.gen is not None}
    entries = []
    for gen in gens:
        below = seal(world, gen)
        entries += [entry for slot, held in world.slots.get(gen, {}).items()
                    if slot < below and isinstance(held, JournalObject)
                    for entry in held.entries if entry.topic == topic]
    return sorted(entries, key=lambda e: (e.partition, e.base))


def replay_into_table(world: World, topic: str) -> None:
    """Append the replayable entries at their offsets, each as soon as the table reaches its base; one past
    a gap stays out (nothing acknowledged may lie there)."""
    waiting = replay_entries(world, topic)
    while waiting:
        left = [entry for entry in waiting if not append_at(world, entry)]
        if len(left) == len(waiting):
            return
        waiting = left


def sweep(world: World, proc: Proc, gen: Gen) -> bool:
    """Delete a sealed generation's committed objects and what lies above its seal (never acknowledged);
    its fences stay, unless the variant lets the last of them go once all below is committed."""
    below = seal(world, gen)
    slots = world.slots.get(gen, {})
    if not proc.acting or below == float("inf") or gen == proc.gen:
        return False
    done = False
    for slot in sorted(slots):
        held = slots[slot]
        if isinstance(held, JournalObject) and (slot > below or committed(world, held)):
            del slots[slot]
            done = True
    if not world.variant.keep_seal and not any(isinstance(held, JournalObject) for held in slots.values()):
        slots.clear()
        done = True
    return done
