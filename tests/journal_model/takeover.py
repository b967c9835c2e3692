"""Taking a topic over, in the journal's model: fence the previous leader's generation on the store alone
(list its slots; put-if-absent a fence at the slot after the highest one listed; list again, and if a slot
lies above the fence, put another above it, the first one left where it is), then replay the entries below each generation's
seal into the table at their own offsets, then claim the next epoch. Each of these is a step of its own,
so that other processes' steps (the zombie's puts, commits, deletions) interleave between the listing and
the put, and between the fence and the claim: the zombie may land higher slots and delete its committed
lower ones meanwhile, so the slot after a stale listing's highest may be a hole below it
(claims.py, `fence_generation`, which counts only the writer's slots above, not other takers' fences: the
model's rule is the more cautious one). Also the sweep of sealed generations. Pure, like protocol.py.
"""

from __future__ import annotations

from tests.journal_model.protocol import (
    Entry,
    Epoch,
    Fence,
    Gen,
    JournalObject,
    Lead,
    Proc,
    Taking,
    World,
    append_at,
    claim_epoch,
    committed,
    leads,
    put_if_absent,
)


def begin_takeover(world: World, proc: Proc, topic: str) -> bool:
    """Read the topic's latest epoch and list the slots of the generation it names, to fence it."""
    if not proc.acting or proc.fenced or leads(proc, topic) or topic in proc.taking:
        return False
    epoch = world.latest_epoch(topic)
    gen = world.epochs[topic][epoch].gen
    if world.variant.fence and gen is not None and gen != proc.gen:
        proc.taking[topic] = Taking(epoch, gen, next_try=_highest(world, gen) + 1)
    else:
        proc.taking[topic] = Taking(epoch, fenced=True)
    return True


def put_fence(world: World, proc: Proc, topic: str) -> bool:
    """One put-if-absent of the fence at the slot to try; a 412 (the writer's put landed first) moves it to
    the next. Without the re-listing (the variant) a fence that lands is kept at once."""
    taking = proc.taking.get(topic)
    if not proc.acting or taking is None or taking.gen is None or taking.fenced or taking.fence is not None:
        return False
    if not put_if_absent(world, taking.gen, taking.next_try, Fence(proc.pid)):
        taking.next_try += 1
    elif world.variant.relist_fence:
        taking.fence = taking.next_try
    else:
        _keep(world, taking, taking.next_try)
    return True


def check_fence(world: World, proc: Proc, topic: str) -> bool:
    """List the generation again: a slot above the fence means it fell in a hole below the writer, which
    will never meet it; another is put above the highest slot seen. The one in the hole stays: the slot
    above may be another taker's fence, not the writer's, and then deleting this one would free a slot the
    writer may still put (its put in flight), below the other taker's fence but after its listing and
    replay. The variant deletes it (claims.py's `fence_generation` as first fixed)."""
    taking = proc.taking.get(topic)
    if not proc.acting or taking is None or taking.gen is None or taking.fence is None:
        return False
    slots = world.slots.get(taking.gen, {})
    if _highest(world, taking.gen) <= taking.fence:
        _keep(world, taking, taking.fence)
        return True
    if not world.variant.keep_fenced_hole and isinstance(slots.get(taking.fence), Fence):
        del slots[taking.fence]
    taking.next_try, taking.fence = _highest(world, taking.gen) + 1, None
    return True


def _keep(world: World, taking: Taking, slot: int) -> None:
    assert taking.gen is not None
    taking.fence, taking.fenced = slot, True
    world.fences_placed.add((taking.gen, slot))  # from now on the checker holds the writer to it


def _highest(world: World, gen: Gen) -> int:
    return max(world.slots.get(gen, {}), default=-1)


def step_takeover(world: World, proc: Proc, topic: str) -> bool:
    """The takeover's next step, whichever it is: put the fence, list again, or replay and claim."""
    taking = proc.taking.get(topic)
    if taking is None:
        return False
    if taking.fenced:
        return complete_takeover(world, proc, topic)
    if taking.fence is None:
        return put_fence(world, proc, topic)
    return check_fence(world, proc, topic)


def complete_takeover(world: World, proc: Proc, topic: str) -> bool:
    """Once the fence stands: replay, then claim the next epoch; if another process claimed an epoch since
    the fence, give up (what was replayed stays: replay is idempotent)."""
    taking = proc.taking.get(topic)
    if not proc.acting or proc.fenced or taking is None or not taking.fenced:
        return False
    epoch = proc.taking.pop(topic).epoch
    if world.latest_epoch(topic) != epoch:
        return True
    replay_into_table(world, topic)
    starts = tuple(len(world.tables[(topic, p)]) for p in range(world.partitions))
    if claim_epoch(world, topic, epoch + 1, Epoch(proc.gen, starts)):
        proc.leads[topic] = Lead(epoch + 1, list(starts))
    return True


def seal(world: World, gen: Gen) -> float:
    """The lowest fence above every other slot of a generation: its writer acknowledged nothing at or above
    it. A fence below a slot of the writer's (one in a hole, left by a taker that stopped before its
    re-listing, or by the variant without it) seals nothing."""
    slots = world.slots.get(gen, {})
    written = max((slot for slot, held in slots.items() if not isinstance(held, Fence)), default=-1)
    fences = [slot for slot, held in slots.items() if isinstance(held, Fence) and slot > written]
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
