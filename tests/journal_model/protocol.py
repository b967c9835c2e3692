"""The node journal's protocol as pure data and transitions: no I/O, no clocks, no threads.

A `World` is the object store (journal slots, epoch records), the topic tables and the processes. Each
transition is one atomic step of one process (or of the store, for a put still in flight when its
process crashed); a test interleaves them in any order. A transition that is not enabled does nothing
and returns False, so a test may pick steps at random; `enabled_*` helpers list what may be picked.

Safety rules of the protocol (docs/architecture.md, "The node journal") are switched by `Variant`, so
that a test can show the invariants' checker catching a protocol without one of them.
Takeover (fence, replay, claim) and sweeping are in takeover.py; the invariants in invariants.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

Gen = tuple[int, int]  # a generation: (process id, run number), unique for the life of the store
Key = tuple[str, int, int]  # (topic, partition, offset)


@dataclass(frozen=True)
class Variant:
    """The protocol's safety rules; every one on is the protocol as designed."""

    fence: bool = True  # a takeover fences the previous leader's generation before it replays
    relist_fence: bool = True  # a fence is kept only if the listing after it finds no slot above it
    keep_fenced_hole: bool = True  # a fence found below a slot stays (another goes above); never deleted
    window: int = 1  # journal puts in flight per process (the design: one)
    keep_seal: bool = True  # a generation's highest object becomes a tombstone; fences are never deleted
    self_fence: bool = True  # a writer that gives up on a slot fences it itself before opening a new generation
    keep_forwarded: bool = True  # records forwarded to a leader stay until the table holds them


@dataclass(frozen=True)
class Entry:
    """The records of one (topic, partition) in one journal object, at offsets base, base + 1, ..."""

    topic: str
    partition: int
    base: int
    records: tuple[int, ...]
    ref: tuple[Gen, int] | None = None  # forwarded: the records' bytes are in that slot of another generation

    @property
    def end(self) -> int:
        return self.base + len(self.records)


@dataclass(frozen=True)
class Forwarded:
    """Records a node wrote for a topic it does not lead; its leader gives them offsets by reference."""

    topic: str
    partition: int
    records: tuple[int, ...]


@dataclass(frozen=True)
class JournalObject:
    entries: tuple[Entry, ...]
    forwarded: tuple[Forwarded, ...] = ()


@dataclass(frozen=True)
class Fence:
    by: int  # the process that put it (a taker, or the generation's own writer giving up on a slot)


@dataclass(frozen=True)
class Tombstone:
    """A committed object's stand-in that keeps its slot taken."""


Slot = Union[JournalObject, Fence, Tombstone]


@dataclass(frozen=True)
class Epoch:
    gen: Gen | None  # None: nobody has led the topic yet
    starts: tuple[int, ...]  # the first offset of each partition under this epoch


@dataclass
class Lead:
    epoch: int
    leo: list[int]  # per partition, the next offset to assign
    claimed: bool = True  # False after a reopen, until the epoch is claimed again for the new generation


@dataclass
class Taking:
    """A takeover under way: the epoch read, and the fence of the generation it names, put in steps (list,
    put, list again) that other processes' steps interleave with."""

    epoch: int
    gen: Gen | None = None  # the generation to fence; None: nothing to fence
    next_try: int = 0  # the slot the fence is put at next: the highest one listed + 1, then the next, ...
    fence: int | None = None  # the slot the fence landed in, until the listing after it (kept, or in a hole)
    fenced: bool = False  # the fence stands above every slot listed after it (or nothing to fence): replay


@dataclass
class Proc:
    pid: int
    run: int = 0
    alive: bool = True
    paused: bool = False
    fenced: bool = False  # a put of its generation failed (fenced) or was given up: it writes there no more
    next_slot: int = 0
    pending: dict[tuple[Gen, int], JournalObject] = field(default_factory=dict)  # puts in flight
    in_doubt: list[tuple[Gen, int, JournalObject]] = field(default_factory=list)  # puts given up on
    landed: dict[Gen, dict[int, JournalObject]] = field(default_factory=dict)  # own objects that landed
    acked: dict[Gen, int] = field(default_factory=dict)  # per generation: slots below this acknowledged
    leads: dict[str, Lead] = field(default_factory=dict)
    buffer: list[tuple[str, int, int]] = field(default_factory=list)  # (topic, partition, record) to flush
    outbox: list[Forwarded] = field(default_factory=list)  # records for other leaders, to flush
    referenced: list[tuple[Gen, int, Forwarded]] = field(default_factory=list)  # references taken, to flush
    taking: dict[str, Taking] = field(default_factory=dict)  # topic -> its takeover under way

    @property
    def gen(self) -> Gen:
        return (self.pid, self.run)

    @property
    def acting(self) -> bool:
        return self.alive and not self.paused


@dataclass
class World:
    topics: tuple[str, ...] = ("a", "b")
    partitions: int = 1
    variant: Variant = field(default_factory=Variant)
    slots: dict[Gen, dict[int, Slot]] = field(default_factory=dict)
    epochs: dict[str, dict[int, Epoch]] = field(default_factory=dict)
    tables: dict[tuple[str, int], list[int]] = field(default_factory=dict)  # record ids at offsets 0, 1, ...
    procs: list[Proc] = field(default_factory=list)
    orphans: list[tuple[Gen, int, JournalObject]] = field(default_factory=list)  # in flight, writer gone
    references: list[tuple[Gen, int, Forwarded]] = field(default_factory=list)  # sent to leaders, not yet taken
    # What clients and the checker saw: acknowledged records, slots acknowledged, fences kept (a taker's
    # once the listing after it found nothing above it, a writer's own at once).
    acked: dict[Key, int] = field(default_factory=dict)
    acked_in: dict[Key, set[Gen]] = field(default_factory=dict)  # the generations that acknowledged each
    acked_slots: set[tuple[Gen, int]] = field(default_factory=set)
    fences_placed: set[tuple[Gen, int]] = field(default_factory=set)
    violations: list[str] = field(default_factory=list)
    next_record: int = 0

    def __post_init__(self) -> None:
        for topic in self.topics:
            self.epochs.setdefault(topic, {0: Epoch(None, (0,) * self.partitions)})
            for p in range(self.partitions):
                self.tables.setdefault((topic, p), [])

    def latest_epoch(self, topic: str) -> int:
        return max(self.epochs[topic])


# --- the store -----------------------------------------------------------------------------------------

def put_if_absent(world: World, gen: Gen, slot: int, obj: Slot) -> bool:
    taken = world.slots.setdefault(gen, {})
    if slot in taken:
        return False
    taken[slot] = obj
    return True


def claim_epoch(world: World, topic: str, epoch: int, record: Epoch) -> bool:
    if epoch in world.epochs[topic]:
        return False
    world.epochs[topic][epoch] = record
    return True


def append_at(world: World, entry: Entry) -> bool:
    """Append an entry to its table at its own offsets: offsets the table holds already must hold the same
    records (else a violation: an offset reused), and an entry past the table's end waits (False)."""
    table = world.tables[(entry.topic, entry.partition)]
    if entry.base > len(table) or not readable(world, entry):
        return False
    for i, record in enumerate(entry.records):
        offset = entry.base + i
        if offset < len(table):
            if table[offset] != record:
                world.violations.append(f"offset reused in table: {entry.topic}/{entry.partition}@{offset} holds "
                                        f"{table[offset]}, replay brought {record}")
        else:
            table.append(record)
    return True


def readable(world: World, entry: Entry) -> bool:
    """A forwarded entry's bytes are in the forwarding node's object, while that is there."""
    if entry.ref is None:
        return True
    held = world.slots.get(entry.ref[0], {}).get(entry.ref[1])
    return isinstance(held, JournalObject) and any(f.records == entry.records for f in held.forwarded)


def committed(world: World, obj: JournalObject) -> bool:
    """Everything the object holds is in the tables (its forwarded records too, wherever they went)."""
    return all(len(world.tables[(e.topic, e.partition)]) >= e.end for e in obj.entries) and \
        (not world.variant.keep_forwarded or
         all(set(f.records) <= set(world.tables[(f.topic, f.partition)]) for f in obj.forwarded))


# --- processes -----------------------------------------------------------------------------------------

def start(world: World) -> Proc:
    proc = Proc(pid=len(world.procs))
    world.procs.append(proc)
    return proc


def leads(proc: Proc, topic: str) -> bool:
    lead = proc.leads.get(topic)
    return lead is not None and lead.claimed


def produce(world: World, proc: Proc, topic: str, partition: int) -> bool:
    if not proc.acting or proc.fenced or not leads(proc, topic):
        return False
    proc.buffer.append((topic, partition, world.next_record))
    world.next_record += 1
    return True


def flush(world: World, proc: Proc) -> bool:
    """One journal object for everything buffered, at the generation's next slot, offsets from memory."""
    own = [key for key in proc.pending if key[0] == proc.gen]
    if not proc.acting or proc.fenced or not (proc.buffer or proc.outbox or proc.referenced) or \
            len(own) >= world.variant.window:
        return False
    grouped: dict[tuple[str, int], list[int]] = {}
    for topic, partition, record in proc.buffer:
        if leads(proc, topic):  # calls of a topic it no longer leads fail (retriable)
            grouped.setdefault((topic, partition), []).append(record)
    entries = []
    for (topic, partition), records in sorted(grouped.items()):
        entries.append(_at_next_offsets(proc, topic, partition, tuple(records), None))
    for gen, slot, forwarded in proc.referenced:
        if leads(proc, forwarded.topic):
            entries.append(_at_next_offsets(proc, forwarded.topic, forwarded.partition, forwarded.records, (gen, slot)))
    forwarding = tuple(proc.outbox)
    proc.buffer, proc.outbox, proc.referenced = [], [], []
    if not entries and not forwarding:
        return True
    proc.pending[(proc.gen, proc.next_slot)] = JournalObject(tuple(entries), forwarding)
    proc.next_slot += 1
    return True


def _at_next_offsets(proc: Proc, topic: str, partition: int, records: tuple[int, ...],
                     ref: tuple[Gen, int] | None) -> Entry:
    lead = proc.leads[topic]
    entry = Entry(topic, partition, lead.leo[partition], records, ref)
    lead.leo[partition] += len(records)
    return entry


def forward(world: World, proc: Proc, topic: str, partition: int, count: int) -> bool:
    """Records for a topic led elsewhere: written into this process's own next journal object."""
    if not proc.acting or proc.fenced or leads(proc, topic):
        return False
    proc.outbox.append(Forwarded(topic, partition, tuple(range(world.next_record, world.next_record + count))))
    world.next_record += count
    return True


def take_reference(world: World, proc: Proc, index: int) -> bool:
    """A leader takes a reference sent to it (the counts, not the bytes); its next flush gives it offsets."""
    if not proc.acting or proc.fenced or not 0 <= index < len(world.references) or \
            not leads(proc, world.references[index][2].topic):
        return False
    proc.referenced.append(world.references.pop(index))
    return True


def land(world: World, proc: Proc, key: tuple[Gen, int]) -> bool:
    """A put in flight reaches the store (also while its process is paused: the request was sent)."""
    if not proc.alive or key not in proc.pending:
        return False
    obj = proc.pending.pop(key)
    gen, slot = key
    if put_if_absent(world, gen, slot, obj):
        proc.landed.setdefault(gen, {})[slot] = obj
    else:  # 412, and the slot holds someone else's object: fenced
        proc.fenced = True
    return True


def lose(world: World, proc: Proc, key: tuple[Gen, int]) -> bool:
    """A put's answer never comes and the writer gives up on it at its deadline: the request may still
    land later (an orphan), and the writer must not skip the slot: it stops writing the generation."""
    if not proc.acting or key not in proc.pending:
        return False
    obj = proc.pending.pop(key)
    world.orphans.append((*key, obj))
    proc.in_doubt.append((*key, obj))
    proc.fenced = True
    return True


def land_orphan(world: World, index: int) -> bool:
    if not 0 <= index < len(world.orphans):
        return False
    gen, slot, obj = world.orphans.pop(index)
    put_if_absent(world, gen, slot, obj)  # nobody waits for the answer
    return True


def ack(world: World, proc: Proc) -> bool:
    """Acknowledge, per generation, the landed slots that follow the acknowledged ones without a gap."""
    if not proc.acting:
        return False
    done = False
    for gen, landed in proc.landed.items():
        slot = proc.acked.get(gen, 0)
        while slot in landed:
            for entry in landed[slot].entries:
                for i, record in enumerate(entry.records):
                    key = (entry.topic, entry.partition, entry.base + i)
                    if world.acked.get(key, record) != record:
                        world.violations.append(f"offset reused: {key} acknowledged for {world.acked[key]} and {record}")
                    world.acked[key] = record
                    world.acked_in.setdefault(key, set()).add(gen)
            world.acked_slots.add((gen, slot))
            world.references += [(gen, slot, forwarded) for forwarded in landed[slot].forwarded]  # to the leader
            slot += 1
            done = True
        proc.acked[gen] = slot
    return done


def table_commit(world: World, proc: Proc, topic: str) -> bool:
    """The background commit of one topic: its acknowledged entries, at their offsets, idempotently."""
    if not proc.acting:
        return False
    waiting = sorted((e for gen, landed in proc.landed.items() for slot, obj in landed.items()
                      if slot < proc.acked.get(gen, 0) for e in obj.entries if e.topic == topic),
                     key=lambda e: (e.partition, e.base))
    return any([append_at(world, entry) for entry in waiting])


def delete_journal(world: World, proc: Proc) -> bool:
    """Delete the writer's own committed objects in slot order, from what it knows (no listing: a fence put
    in a slot it deleted is not seen); its highest one becomes a tombstone instead, so that its slot stays
    taken. Only the highest stays: the hole below it is what a taker's stale listing may fence."""
    if not proc.acting:
        return False
    done = False
    for gen, landed in proc.landed.items():
        slots = world.slots.get(gen, {})
        for slot in sorted(landed):
            held = slots.get(slot)
            if held is None or isinstance(held, Fence):
                continue  # deleted already (by itself or a sweep); a fence may have landed in the hole since
            if isinstance(held, JournalObject) and not committed(world, held):
                break
            if slot != max(landed) or not world.variant.keep_seal:
                del slots[slot]
                done = True
            elif isinstance(held, JournalObject):
                slots[slot] = Tombstone()
                done = True
    return done


def crash(world: World, proc: Proc) -> bool:
    if not proc.alive:
        return False
    proc.alive = False
    world.orphans.extend((*key, obj) for key, obj in proc.pending.items())
    proc.pending.clear()
    return True


def pause(proc: Proc) -> bool:
    if not proc.acting:
        return False
    proc.paused = True
    return True


def resume(proc: Proc) -> bool:
    if not (proc.alive and proc.paused):
        return False
    proc.paused = False
    return True


def reopen(world: World, proc: Proc) -> bool:
    """A fenced writer opens a new generation. A slot it gave up on is fenced first by itself (a 412 means
    its put landed after all: its own object). Its topics wait for a new claim; their next offsets are the
    ends of its landed entries, which are acknowledged (or replayed) whatever happens next."""
    if not proc.acting or not proc.fenced or any(key[0] == proc.gen for key in proc.pending):
        return False
    for gen, slot, obj in proc.in_doubt:
        if not world.variant.self_fence:
            continue
        if put_if_absent(world, gen, slot, Fence(proc.pid)):
            world.fences_placed.add((gen, slot))
        elif world.slots[gen][slot] == obj:
            proc.landed.setdefault(gen, {})[slot] = obj
    proc.in_doubt.clear()
    proc.run += 1
    proc.next_slot = 0
    proc.fenced = False
    for topic, lead in proc.leads.items():
        lead.claimed = False
        for p in range(world.partitions):
            ends = [e.end for landed in proc.landed.values() for obj in landed.values() for e in obj.entries
                    if e.topic == topic and e.partition == p]
            lead.leo[p] = max([world.epochs[topic][lead.epoch].starts[p], *ends])
    return True


def reclaim(world: World, proc: Proc, topic: str) -> bool:
    """Claim the next epoch of a topic it led in its previous generation, naming the new one; lost: the
    topic moved, and the process leads it no more."""
    lead = proc.leads.get(topic)
    if not proc.acting or proc.fenced or lead is None or lead.claimed:
        return False
    if world.latest_epoch(topic) == lead.epoch and \
            claim_epoch(world, topic, lead.epoch + 1, Epoch(proc.gen, tuple(lead.leo))):
        lead.epoch += 1
        lead.claimed = True
    else:
        del proc.leads[topic]
    return True
