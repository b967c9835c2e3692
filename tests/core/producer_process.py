"""A producing process for the multi-writer and crash tests.

Prints one JSON line per acknowledged record: {"p", "o", "v"}, flushed at once,
so the parent knows exactly what was acknowledged before it kills us.
"""

from __future__ import annotations

import argparse
import json
import sys

from lakelog.platform import Broker, ProducerBatch, Record
from lakelog.settings import Settings


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--storage", default="{}")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--batches", type=int, default=1_000_000)
    parser.add_argument("--batch-size", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--producer-id", type=int)
    parser.add_argument("--first-batch", type=int, default=0)
    args = parser.parse_args()
    broker = Broker(Settings(root=args.root, storage=json.loads(args.storage), linger_ms=1))
    for batch in range(args.first_batch, args.first_batch + args.batches):
        records = [Record(f"{args.name}-{batch}-{i}".encode(), partition=(batch + i) % args.partitions)
                   for i in range(args.batch_size)]
        producer = None
        if args.producer_id is not None:
            producer = ProducerBatch(args.producer_id, 0, batch * args.batch_size)
        result = broker.produce(args.topic, records, producer=producer, timeout_ms=60_000)
        sys.stdout.write("".join(
            json.dumps({"p": p, "o": o, "v": r.value.decode(), "b": batch}) + "\n"
            for r, (p, o, _) in zip(records, result.records())
        ))
        sys.stdout.flush()
    broker.close()


if __name__ == "__main__":
    main()
