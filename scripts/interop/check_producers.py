#!/usr/bin/env python3
"""Independent check of the idempotent producer's batch headers with kafka-python.

Usage: check_producers.py DIR [DIR...]

Each DIR is a partition directory written by logbus. For every batch, kafka-python's
parser (an independent implementation of record batch v2) reads the producer id, producer
epoch and base sequence (header bytes 43..61); the record of offset delta i has sequence
baseSequence + i (wrapping past 2^31 - 1 to 0). Checks, by Kafka's rules
(`ProducerStateManager` loading a log):
- a batch without a producer has id, epoch and base sequence all -1;
- per (producer id, epoch), sequences are contiguous from one batch to the next in the
  log, and a new epoch starts at 0 (a restart of the producer's sequences);
- no (producer id, epoch, sequence) appears twice (no duplicate of an idempotent send).
Prints one line per batch (`BATCH base_offset count producer_id epoch base_sequence
transactional`) and a summary `producers OK: ...`; exits 1 on any problem.
"""

import os
import sys

from kafka.record.memory_records import MemoryRecords

problems = []


def problem(msg):
    problems.append(msg)
    print("PROBLEM:", msg)


def main(dirs):
    batches = 0
    idempotent = 0
    producers = set()
    for d in dirs:
        last = {}  # (pid, epoch) -> last sequence
        epochs = {}  # pid -> latest epoch
        seen = set()
        for name in sorted(f for f in os.listdir(d) if f.endswith(".log")):
            data = open(os.path.join(d, name), "rb").read()
            records = MemoryRecords(data)
            while True:
                batch = records.next_batch()
                if batch is None:
                    break
                batches += 1
                offsets = [r.offset for r in batch]
                count = len(offsets)
                pid, epoch, seq = batch.producer_id, batch.producer_epoch, batch.base_sequence
                print(
                    f"BATCH {batch.base_offset} {count} {pid} {epoch} {seq} "
                    f"{int(batch.is_transactional)}"
                )
                if pid < 0:
                    if epoch != -1 or seq != -1:
                        problem(f"{d}: batch {batch.base_offset}: no producer but epoch {epoch} sequence {seq}")
                    continue
                producers.add(pid)
                idempotent += count
                if epoch < epochs.get(pid, -1):
                    problem(f"{d}: batch {batch.base_offset}: producer {pid} epoch {epoch} after {epochs[pid]}")
                if epoch > epochs.get(pid, -1) and seq != 0 and (pid, epoch) not in last:
                    # A new epoch starts at 0 (a first epoch seen mid-log may not).
                    if pid in epochs:
                        problem(f"{d}: batch {batch.base_offset}: producer {pid} new epoch {epoch} starts at {seq}")
                epochs[pid] = max(epoch, epochs.get(pid, -1))
                prev = last.get((pid, epoch))
                if prev is not None and seq != (prev + 1) % 2**31:
                    problem(f"{d}: batch {batch.base_offset}: producer {pid} epoch {epoch} sequence {seq} after {prev}")
                for i in range(count):
                    key = (pid, epoch, (seq + i) % 2**31)
                    if key in seen:
                        problem(f"{d}: batch {batch.base_offset}: duplicate {key}")
                    seen.add(key)
                last[(pid, epoch)] = (seq + count - 1) % 2**31
    print(f"producers OK: {batches} batches, {idempotent} idempotent records, {len(producers)} producer ids" if not problems else f"{len(problems)} problems")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
