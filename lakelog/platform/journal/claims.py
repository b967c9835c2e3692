"""Taking a topic's offsets from whoever held them: leader epochs and fences on object storage alone
(docs/architecture.md, "Takeover: fencing on object storage alone").

```
<root>/_journal/epochs/<topic>/<epoch, 20 digits>.json   {"node", "run"}: the generation that holds the epoch
```

A writer assigns a topic's offsets only in a generation that holds the topic's latest epoch. To get it:
read the latest epoch; if another generation holds it, fence that generation (a fence object in its next
free slot, put-if-absent: its next put fails, so it acknowledges nothing more) and put the entries of
this topic it wrote below the fence into the table at their offsets (`replay` of recovery.py's planning);
then create the next epoch with put-if-absent. A lost create means another writer claimed first: start
again from its epoch. No clock and no lease: the store's create-only writes order everything.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lakelog.platform.errors import StorageUnavailable
from lakelog.platform.journal.objects import (
    FENCE,
    JOURNAL,
    RECORDS,
    JournalObject,
    decode,
    encode_marker,
    generation_path,
    slot_name,
    slot_of,
)
from lakelog.platform.journal.table_commit import replay_entries
from lakelog.platform.journal.topic_state import Acknowledged
from lakelog.platform.storage import Storage

if TYPE_CHECKING:
    from lakelog.platform.broker.open_topic import OpenTopic

log = logging.getLogger(__name__)

CLAIM_ATTEMPTS = 8  # epochs lost to other claimers in a row before the calls fail (retriably)


@dataclass(frozen=True)
class Epoch:
    number: int
    node: str
    run: str


def epochs_path(topic: str) -> str:
    return f"{JOURNAL}/epochs/{topic}"


def latest_epoch(storage: Storage, topic: str) -> Epoch | None:
    """The topic's latest epoch (one LIST, one GET), None before the first claim."""
    folder = storage.uri(epochs_path(topic))
    numbers = [int(n[:-5]) for n in storage.list_names(folder) if n.endswith(".json") and n[:-5].isdigit()]
    if not numbers:
        return None
    number = max(numbers)
    body = json.loads(storage.read_bytes(f"{folder}/{slot_name(number)}.json"))
    return Epoch(number, str(body["node"]), str(body["run"]))


def claim_epoch(storage: Storage, topic: str, number: int, node: str, run: str) -> bool:
    """Create epoch `number` for (node, run); False when another writer created it first."""
    uri = storage.uri(epochs_path(topic), f"{slot_name(number)}.json")
    return storage.put_if_absent(uri, json.dumps({"node": node, "run": run}).encode())


def fence_generation(storage: Storage, node: str, run: str, by: str) -> tuple[int, list[int]]:
    """Put a fence in the generation's next free slot, above every slot its writer put; answers the fence's
    slot and the generation's other slots below it, as listed after the fence landed.

    The slot after the highest one listed may have been used meanwhile and deleted (its entries committed,
    a higher slot landed: the writer keeps only its highest): a fence there sits in a hole below the
    writer, which never meets it. So the listing after the fence decides: a slot of the writer's above it
    (records or a tombstone) means another fence goes above that. The one in the hole stays (fences are
    never deleted: another taker may have read below it); other takers' fences above do not count (the
    writer is below them too, and two takers would otherwise leapfrog each other)."""
    folder = storage.uri(generation_path(node, run))
    listed = _slots(storage, folder)
    while True:
        slot = listed[-1] + 1 if listed else 0
        while not storage.put_if_absent(f"{folder}/{slot_name(slot)}", encode_marker(FENCE, by, run, slot)):
            slot += 1  # the generation's own put of that slot landed first: it is below the fence, replayed too
        after = _slots(storage, folder)
        if not any(_writers(storage, folder, s) for s in after if s > slot):
            return slot, [s for s in after if s < slot]
        log.warning("journal: fence of generation %s/%s at slot %d fell below its writer (slots up to %d): "
                    "another goes above", node, run, slot, after[-1])
        listed = after


def _slots(storage: Storage, folder: str) -> list[int]:
    return sorted(s for s in (slot_of(n) for n in storage.list_names(folder)) if s is not None)


def _writers(storage: Storage, folder: str, slot: int) -> bool:
    """The slot holds (or held: only records objects are deleted) what the generation's writer put."""
    try:
        return decode(storage.read_bytes(f"{folder}/{slot_name(slot)}")).kind != FENCE
    except FileNotFoundError:
        return True


def objects_below(storage: Storage, node: str, run: str, fence: int,
                  listed: list[int]) -> list[tuple[int, JournalObject]]:
    """The generation's objects below its fence: those listed, and those that landed after the listing (read
    by slot; a slot found empty was never written or is deleted, its entries committed)."""
    folder = storage.uri(generation_path(node, run))
    slots = [s for s in listed if s < fence] + list(range((listed[-1] + 1) if listed else 0, fence))
    out = []
    for slot in slots:
        try:
            out.append((slot, decode(storage.read_bytes(f"{folder}/{slot_name(slot)}"))))
        except FileNotFoundError:
            continue
    return out


def topic_entries(objects: list[tuple[int, JournalObject]], run: str, topic: str) -> list[Acknowledged]:
    """One topic's entries of these objects, with their records."""
    items = []
    for slot, obj in objects:
        if obj.kind != RECORDS or topic not in obj.topics():
            continue
        records, start = obj.topic_records(topic), 0
        for entry in (e for e in obj.entries if e.topic == topic):
            items.append(Acknowledged((run, slot), entry, records.slice(start, entry.count)))
            start += entry.count
    return items


def take_over(storage: Storage, opened: OpenTopic, node: str, run: str,
              settled: frozenset[str] = frozenset()) -> Epoch:
    """Make (node, run) the holder of the topic's next epoch, fencing and replaying the generation before
    it, whoever's: one of this process's own earlier generations too (fenced when it was left, by a taker
    that did not claim after, or by itself at a deadline). Its entries are this writer's pending ones, but
    a later taker reads only the generation the latest epoch names: left out of the table here, they would
    be a gap there. `settled`: generations of this node its start found sealed, or fenced and replayed
    (recovery.py): one named by the epoch is neither fenced nor read again (the usual claim after a
    restart: one PUT, not a fence and a replay per topic). Raises `StorageUnavailable` after
    CLAIM_ATTEMPTS claims lost in a row, `JournalReplayFailed` on a gap."""
    topic = opened.meta.name
    for _ in range(CLAIM_ATTEMPTS):
        current = latest_epoch(storage, topic)
        if current is not None and (current.node, current.run) == (node, run):
            return current
        if current is not None and not (current.node == node and current.run in settled):
            fence, listed = fence_generation(storage, current.node, current.run, node)
            items = topic_entries(objects_below(storage, current.node, current.run, fence, listed), current.run,
                                  topic)
            opened.log.refresh()  # the table as it is now: the fenced writer may have committed meanwhile
            if items:
                replay_entries(opened, items)
            log.warning("journal: %s took %s from generation %s/%s (fenced at slot %d, %d entries replayed)",
                        node, topic, current.node, current.run, fence, len(items))
        number = 0 if current is None else current.number + 1
        if claim_epoch(storage, topic, number, node, run):
            opened.log.refresh()
            return Epoch(number, node, run)
    raise StorageUnavailable(f"{topic!r}: other writers kept claiming it; retry")
