"""The journal model's failure cases spelled out step by step (test_journal_protocol.py explores them at
random): a zombie leader fenced, a crash between journal and table commit, and what goes wrong without
the fence or with a deleted seal; a fence that lands in a hole below the writer (put at a stale listing's
highest + 1), caught by the listing after it, and a fence deleted from its hole under another taker's."""

from __future__ import annotations

from tests.journal_model import protocol as pr
from tests.journal_model import takeover as tk
from tests.journal_model.invariants import problems, replay_is_idempotent
from tests.journal_model.protocol import Fence, Tombstone, Variant, World


def led_by_first(variant: Variant = Variant()) -> tuple[World, pr.Proc, pr.Proc]:
    world = World(("t",), 1, variant)
    first, second = pr.start(world), pr.start(world)
    take_over(world, first)
    return world, first, second


def write(world: World, proc: pr.Proc, count: int) -> tuple[pr.Gen, int]:
    for _ in range(count):
        assert pr.produce(world, proc, "t", 0)
    assert pr.flush(world, proc)
    return max(key for key in proc.pending if key[0] == proc.gen)


def take_over(world: World, proc: pr.Proc) -> None:
    """The whole takeover, no other process's step in between: list, fence, list again, replay, claim."""
    assert tk.begin_takeover(world, proc, "t")
    while "t" in proc.taking:
        assert tk.step_takeover(world, proc, "t")


def test_a_zombie_leaders_put_after_the_fence_fails_and_it_acknowledges_nothing_more() -> None:
    world, zombie, taker = led_by_first()
    assert pr.land(world, zombie, write(world, zombie, 2)) and pr.ack(world, zombie)
    pr.pause(zombie)
    in_flight = write_paused(world, zombie)
    take_over(world, taker)
    assert world.slots[zombie.gen][1] == Fence(taker.pid)  # the slot after the highest one listed
    pr.resume(zombie)
    assert pr.land(world, zombie, in_flight) and zombie.fenced and not pr.ack(world, zombie)
    assert world.tables[("t", 0)] == [0, 1]  # what it acknowledged, replayed at its offsets
    assert pr.land(world, taker, write(world, taker, 1)) and pr.ack(world, taker)
    assert world.acked[("t", 0, 2)] == 3 and problems(world) == []  # the taker goes on at offset 2


def write_paused(world: World, proc: pr.Proc) -> tuple[pr.Gen, int]:
    """A flush whose put was sent just before the process was paused."""
    proc.paused = False
    key = write(world, proc, 1)
    proc.paused = True
    return key


def test_records_acknowledged_but_not_in_the_table_survive_the_leaders_crash() -> None:
    world, leader, taker = led_by_first()
    assert pr.land(world, leader, write(world, leader, 3)) and pr.ack(world, leader)
    assert pr.table_commit(world, leader, "t") and world.tables[("t", 0)] == [0, 1, 2]
    assert pr.land(world, leader, write(world, leader, 2)) and pr.ack(world, leader)
    pr.crash(world, leader)  # between the journal write and the table commit
    assert replay_is_idempotent(world, "t") == []
    take_over(world, taker)
    assert world.tables[("t", 0)] == [0, 1, 2, 3, 4] and problems(world) == []
    assert world.epochs["t"][2].starts == (5,)


def test_committed_objects_go_and_the_last_one_stays_as_a_tombstone() -> None:
    world, leader, _ = led_by_first()
    for _ in range(2):
        assert pr.land(world, leader, write(world, leader, 1)) and pr.ack(world, leader)
    assert pr.table_commit(world, leader, "t") and pr.delete_journal(world, leader)
    assert world.slots[leader.gen] == {1: Tombstone()}


def test_without_the_fence_a_zombie_and_its_successor_acknowledge_one_offset() -> None:
    world, zombie, taker = led_by_first(Variant(fence=False))
    pr.pause(zombie)
    in_flight = write_paused(world, zombie)
    take_over(world, taker)
    assert pr.land(world, taker, write(world, taker, 1)) and pr.ack(world, taker)
    pr.resume(zombie)
    assert pr.land(world, zombie, in_flight) and pr.ack(world, zombie)  # nothing stopped it
    assert any("offset reused" in problem for problem in problems(world))


def test_a_deleted_fence_lets_a_zombies_late_put_through() -> None:
    world, zombie, taker = led_by_first(Variant(keep_seal=False))
    assert pr.land(world, zombie, write(world, zombie, 1)) and pr.ack(world, zombie)
    pr.pause(zombie)
    in_flight = write_paused(world, zombie)
    take_over(world, taker)
    assert tk.sweep(world, taker, zombie.gen) and world.slots[zombie.gen] == {}  # committed, fence too
    pr.resume(zombie)
    assert pr.land(world, zombie, in_flight) and pr.ack(world, zombie)
    assert any("at or above a fence" in problem for problem in problems(world))


def test_a_journal_object_never_written_leaves_its_slot_to_the_fence() -> None:
    world, leader, taker = led_by_first()
    assert pr.land(world, leader, write(world, leader, 1)) and pr.ack(world, leader)
    write(world, leader, 1)  # its put is sent, and the process dies before any answer
    pr.crash(world, leader)
    take_over(world, taker)
    assert world.slots[leader.gen][1] == Fence(taker.pid)
    assert pr.land_orphan(world, 0) and world.slots[leader.gen][1] == Fence(taker.pid)  # the late put lost
    assert pr.land(world, taker, write(world, taker, 1)) and pr.ack(world, taker)
    assert world.tables[("t", 0)] == [0] and world.acked[("t", 0, 1)] == 2 and problems(world) == []


def write_landed(world: World, proc: pr.Proc, count: int = 1) -> int:
    """A flush whose put lands and is acknowledged at once; answers its slot."""
    key = write(world, proc, count)
    assert pr.land(world, proc, key) and pr.ack(world, proc)
    return key[1]


def fence_in_a_hole(variant: Variant) -> tuple[World, pr.Proc, pr.Proc]:
    """The taker lists the writer's slots (up to 0), then the writer lands slots 1 and 2, commits them and
    deletes all but its highest: the slot after the listed highest is free again when the fence is put."""
    world, writer, taker = led_by_first(variant)
    write_landed(world, writer)
    assert tk.begin_takeover(world, taker, "t") and taker.taking["t"].next_try == 1
    write_landed(world, writer), write_landed(world, writer)
    assert pr.table_commit(world, writer, "t") and pr.delete_journal(world, writer)
    assert world.slots[writer.gen] == {2: Tombstone()}
    assert tk.step_takeover(world, taker, "t") and world.slots[writer.gen][1] == Fence(taker.pid)
    return world, writer, taker


def test_without_the_relisting_a_fence_in_a_hole_lets_two_writers_acknowledge_one_offset() -> None:
    world, writer, taker = fence_in_a_hole(Variant(relist_fence=False))
    while "t" in taker.taking:  # the fence at 1 is kept: replay, claim
        assert tk.step_takeover(world, taker, "t")
    assert pr.land(world, writer, write(world, writer, 1)) and pr.ack(world, writer)  # slot 3: nothing stops it
    write_landed(world, taker)
    found = problems(world)
    assert any("at or above a fence" in problem for problem in found)
    assert any("offset reused" in problem for problem in found)


def test_the_listing_after_the_fence_finds_it_in_a_hole_and_fences_above_the_writer() -> None:
    world, writer, taker = fence_in_a_hole(Variant())
    assert write_landed(world, writer) == 3 and problems(world) == []  # legitimate: the fence at 1 seals nothing
    assert tk.step_takeover(world, taker, "t") and taker.taking["t"].next_try == 4  # slot 3 seen above it
    assert tk.step_takeover(world, taker, "t") and world.slots[writer.gen][4] == Fence(taker.pid)
    assert world.slots[writer.gen][1] == Fence(taker.pid)  # the one in the hole stays
    while "t" in taker.taking:
        assert tk.step_takeover(world, taker, "t") and problems(world) == []
    assert pr.land(world, writer, write(world, writer, 1)) and writer.fenced and not pr.ack(world, writer)
    write_landed(world, taker)
    assert world.acked[("t", 0, 4)] == 5 and world.tables[("t", 0)] == [0, 1, 2, 3] and problems(world) == []


def two_takers_one_fence_above_the_other(variant: Variant) -> tuple[World, pr.Proc, pr.Proc]:
    """The writer's put of slot 1 is in flight; one taker fences slot 1, a second fences slot 2 (above the
    first's), replays and claims; then the first lists again and sees a slot above its fence."""
    world, writer, first = led_by_first(variant)
    second = pr.start(world)
    write_landed(world, writer)
    in_flight = write(world, writer, 1)
    assert tk.begin_takeover(world, first, "t") and tk.step_takeover(world, first, "t")
    assert world.slots[writer.gen][1] == Fence(first.pid)
    take_over(world, second)
    assert world.slots[writer.gen][2] == Fence(second.pid) and world.tables[("t", 0)] == [0]
    assert tk.step_takeover(world, first, "t")  # the first's listing after its fence: slot 2 above it
    assert pr.land(world, writer, in_flight)
    return world, writer, second


def test_deleting_a_fence_found_below_another_takers_lets_the_writers_late_put_through() -> None:
    world, writer, second = two_takers_one_fence_above_the_other(Variant(keep_fenced_hole=False))
    assert pr.ack(world, writer)  # slot 1 landed where the first taker's fence was: acknowledged at offset 1
    write_landed(world, second)  # the second taker's offset 1 too
    assert any("offset reused" in problem for problem in problems(world))


def test_a_fence_found_below_another_takers_stays_and_the_writers_late_put_fails() -> None:
    world, writer, second = two_takers_one_fence_above_the_other(Variant())
    assert writer.fenced and not pr.ack(world, writer)
    write_landed(world, second)
    assert world.acked[("t", 0, 1)] == 2 and problems(world) == []
