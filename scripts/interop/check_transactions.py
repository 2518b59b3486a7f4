#!/usr/bin/env python3
"""Independent check of a logbus partition directory's transactions, by kafka-python's
record parser and a small parser of Kafka's .txnindex written here from Kafka's format.

Usage: check_transactions.py DIR EXPECTED

EXPECTED lists, one per line (space-separated):

    txn OFFSET PRODUCER_ID EPOCH          a transactional data record
    plain OFFSET                          a record outside any transaction
    marker OFFSET commit|abort PRODUCER_ID EPOCH COORDINATOR_EPOCH
    aborted PRODUCER_ID FIRST LAST LSO    a .txnindex entry, in index order

Checks:
- every batch parses with kafka-python, its CRC is valid; a record's batch is transactional
  (attribute bit 4) exactly for `txn` and `marker` lines, a control batch (bit 5) exactly for
  `marker` lines, with the producer id and epoch given;
- a control batch holds one ControlRecord, key version 0 and type 1 (COMMIT) or 0 (ABORT);
  its value is Kafka's EndTransactionMarker: version int16 0, coordinator epoch int32;
- the .txnindex files (Kafka's TransactionIndex: 34-byte entries of version int16 (0),
  producerId int64, firstOffset int64, lastOffset int64, lastStableOffset int64), read in
  segment order, hold exactly the `aborted` lines, each in the segment whose offsets hold
  its lastOffset (the ABORT marker's).
Exits 0 when all hold; otherwise prints every problem and exits 1.
"""

import os
import struct
import sys

from kafka.record.memory_records import MemoryRecords

problems = []


def problem(msg):
    problems.append(msg)
    print("PROBLEM:", msg)


def main():
    part, expected_path = sys.argv[1], sys.argv[2]
    expected = {}
    aborted_expected = []
    for line in open(expected_path):
        f = line.split()
        if not f:
            continue
        if f[0] == "aborted":
            aborted_expected.append(tuple(int(x) for x in f[1:5]))
        else:
            expected[int(f[1])] = f
    logs = sorted(n for n in os.listdir(part) if n.endswith(".log"))
    bases = [int(n[:-4]) for n in logs]
    seen = {}
    for name in logs:
        data = open(os.path.join(part, name), "rb").read()
        records = MemoryRecords(data)
        while True:
            batch = records.next_batch()
            if batch is None:
                break
            if not batch.validate_crc():
                problem(f"{name}: a batch fails its CRC")
            for r in batch:
                if batch.is_control_batch:
                    if r.version != 0 or r.type not in (0, 1):
                        problem(f"offset {r.offset}: control key version {r.version} type {r.type}")
                    version, coordinator_epoch = struct.unpack(">hi", bytes(r.value)[:6])
                    if version != 0 or len(r.value) != 6:
                        problem(f"offset {r.offset}: EndTransactionMarker value {bytes(r.value).hex()}")
                    seen[r.offset] = ["marker", str(r.offset), "commit" if r.type == 1 else "abort",
                                      str(batch.producer_id), str(batch.producer_epoch),
                                      str(coordinator_epoch)]
                    if not batch.is_transactional:
                        problem(f"offset {r.offset}: a control batch without the transactional bit")
                elif batch.is_transactional:
                    seen[r.offset] = ["txn", str(r.offset), str(batch.producer_id),
                                      str(batch.producer_epoch)]
                else:
                    seen[r.offset] = ["plain", str(r.offset)]
    for off in sorted(set(expected) | set(seen)):
        if expected.get(off) != seen.get(off):
            problem(f"offset {off}: expected {expected.get(off)}, found {seen.get(off)}")
    # The transaction indexes, parsed here from Kafka's format.
    entries = []
    for i, base in enumerate(bases):
        path = os.path.join(part, "%020d.txnindex" % base)
        if not os.path.exists(path):
            continue
        data = open(path, "rb").read()
        if len(data) % 34:
            problem(f"{path}: {len(data)} bytes, not whole 34-byte entries")
        upper = bases[i + 1] if i + 1 < len(bases) else None
        for k in range(len(data) // 34):
            version, pid, first, last, lso = struct.unpack(">hqqqq", data[k * 34:(k + 1) * 34])
            if version != 0:
                problem(f"{path}: entry {k} has version {version}")
            if last < base or (upper is not None and last >= upper):
                problem(f"{path}: entry {k}'s marker {last} is not in this segment")
            entries.append((pid, first, last, lso))
    if entries != aborted_expected:
        problem(f"txnindex entries {entries}, expected {aborted_expected}")
    if problems:
        sys.exit(1)
    print(f"transactions: OK ({len(seen)} records, {len(entries)} aborted)")


main()
