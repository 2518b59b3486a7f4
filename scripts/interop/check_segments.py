#!/usr/bin/env python3
"""Independent check of a logbus partition directory with kafka-python's record parser.

Usage: check_segments.py DIR EXPECTED [--index-interval N] [--closed] [--epochs] [--gaps]
                         [--codec none|gzip|snappy|lz4|zstd]

DIR holds NNNNNNNNNNNNNNNNNNNN.log/.index/.timeindex files written by logbus. EXPECTED lists
the records that were written, one per line, tab-separated:

    offset  timestamp  key  value  headers

key/value are hex, or '-' for null; headers is a comma-separated list of
name_hex:value_hex (value '-' for null), empty for none.

Checks, by Kafka's rules (record batch v2, .index and .timeindex files):
- every batch parses, is magic 2, its CRC-32C is valid, and the .log holds only whole batches;
- records (offsets, timestamps, keys, values, headers, nulls included) equal EXPECTED, with
  dense offsets across segments and each file named by its first batch's base offset;
- .index entries are exactly those Kafka's append rule produces for the given
  index.interval.bytes (an entry for an incoming batch when more than N bytes were appended
  since the last entry; the first batch never gets one), each mapping the batch's last offset
  to its start position; trailing zero entries (preallocation) are ignored;
- .timeindex entries are exactly those the same rule produces (largest timestamp so far and
  the last offset of the batch holding it, appended only when strictly greater), plus, with
  --closed, the final entry written on roll and close.
- with --gaps (a compacted log): offsets strictly increase instead of being dense, a
  segment's first batch may start above the offset it is named by, and a batch may hold
  fewer records than its offset range (Kafka's cleaner keeps a batch's base offset and last
  offset delta; an emptied batch holds none);
- with --epochs (a replica's directory): DIR/leader-epoch-checkpoint follows Kafka's layout
  (version 0, the entry count, then `epoch startOffset` lines, epochs and start offsets
  strictly increasing), and every batch's partitionLeaderEpoch (bytes 12..16 of its header)
  is the epoch whose range holds the whole batch.
- with --codec: every batch carries that codec (attributes bits 0-2); kafka-python
  decompresses compressed batches with its own codecs (kafka/codec.py), so their records are
  checked as above. The count of batches per codec is printed ("codecs: ...").
Exits 0 when all hold; otherwise prints every problem and exits 1.
"""

import os
import struct
import sys

from kafka.record.memory_records import MemoryRecords

problems = []
batch_epochs = []  # (base offset, last offset, partitionLeaderEpoch) of every batch


CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
# --codec NAME: every batch must carry this codec (attributes bits 0-2).
want_codec = None
codec_counts = {}


def problem(msg):
    problems.append(msg)
    print("PROBLEM:", msg)


def parse_bytes(field):
    return None if field == "-" else bytes.fromhex(field)


def parse_expected(path):
    records = []
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            off, ts, key, value, headers = line.split("\t")
            hdrs = []
            if headers:
                for pair in headers.split(","):
                    name, val = pair.split(":")
                    hdrs.append((bytes.fromhex(name).decode("utf-8"), parse_bytes(val)))
            records.append((int(off), int(ts), parse_bytes(key), parse_bytes(value), hdrs))
    return records


def read_entries(path, size, fmt):
    """Whole entries, stopping at the first all-zero entry (a preallocated tail; a real first
    entry is never all zero, since a segment's first batch never gets one)."""
    if not os.path.exists(path):
        return None
    data = open(path, "rb").read()
    entries = []
    for i in range(len(data) // size):
        chunk = data[i * size:(i + 1) * size]
        if chunk == b"\0" * size:
            break
        entries.append(struct.unpack(fmt, chunk))
    return entries


def check_segment(log_path, interval, closed, gaps=False):
    base = int(os.path.basename(log_path)[:20])
    data = open(log_path, "rb").read()
    mr = MemoryRecords(data)
    batches = []  # (position, size, last_offset, max_timestamp)
    records = []
    pos = 0
    while mr.has_next():
        batch = mr.next_batch()
        size = 12 + struct.unpack_from(">i", data, pos + 8)[0]
        if batch.magic != 2:
            problem(f"{log_path}@{pos}: magic {batch.magic}, expected 2")
        if not batch.validate_crc():  # before iterating (kafka-python asserts otherwise)
            problem(f"{log_path}@{pos}: CRC-32C mismatch")
        if pos == 0 and (batch.base_offset < base if gaps else batch.base_offset != base):
            problem(f"{log_path}: named {base}, first batch starts at offset {batch.base_offset}")
        codec = struct.unpack_from(">h", data, pos + 21)[0] & 7
        codec_counts[codec] = codec_counts.get(codec, 0) + 1
        if want_codec is not None and codec != want_codec:
            problem(f"{log_path}@{pos}: codec {codec}, expected {want_codec}")
        # kafka-python decompresses a compressed batch itself (kafka/codec.py).
        recs = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
        if len(recs) != batch.records_count:
            problem(f"{log_path}@{pos}: {len(recs)} records, header says {batch.records_count}")
        records += recs
        batches.append((pos, size, batch.last_offset, batch.max_timestamp))
        batch_epochs.append((batch.base_offset, batch.last_offset,
                             struct.unpack_from(">i", data, pos + 12)[0]))
        pos += size
    if pos != len(data):
        problem(f"{log_path}: {len(data) - pos} bytes after the last whole batch at {pos}")

    # Kafka's append rule, replayed: the entry for an incoming batch is written before its
    # bytes are counted, with the largest timestamp so far (incoming batch included).
    want_index, want_time = [], []
    since, max_ts, max_ts_offset = 0, -1, -1
    for position, size, last, batch_max in batches:
        if batch_max > max_ts:
            max_ts, max_ts_offset = batch_max, last
        if since > interval:
            want_index.append((last - base, position))
            if max_ts > (want_time[-1][0] if want_time else -1):
                want_time.append((max_ts, max_ts_offset - base))
            since = 0
        since += size
    # An empty time index counts as ending with (-1, base): no entry without a timestamp.
    if closed and max_ts > (want_time[-1][0] if want_time else -1):
        want_time.append((max_ts, max_ts_offset - base))

    stem = log_path[:-4]
    index = read_entries(stem + ".index", 8, ">ii")
    if index is None:
        problem(f"{stem}.index missing")
    elif index != want_index:
        problem(f"{stem}.index: {len(index)} entries {index[:6]}... differ from Kafka's rule: "
                f"{len(want_index)} entries {want_index[:6]}...")
    timeindex = read_entries(stem + ".timeindex", 12, ">qi")
    if timeindex is None:
        problem(f"{stem}.timeindex missing")
    elif timeindex != want_time:
        problem(f"{stem}.timeindex: {len(timeindex)} entries {timeindex[:6]}... differ from "
                f"Kafka's rule: {len(want_time)} entries {want_time[:6]}...")
    # The rules DumpLogSegments --verify-index-only applies, independently of the replay.
    starts = {p: last for p, _, last, _ in batches}
    for rel, position in index or []:
        if starts.get(position) != base + rel:
            problem(f"{stem}.index: entry ({rel}, {position}) names no batch ending at {base + rel}")
    maxima = {last: ts for _, _, last, ts in batches}
    for a, b in zip(timeindex or [], (timeindex or [])[1:]):
        if b[0] <= a[0]:
            problem(f"{stem}.timeindex: timestamps not strictly increasing: {a} then {b}")
    for ts, rel in timeindex or []:
        if maxima.get(base + rel) != ts:
            problem(f"{stem}.timeindex: entry ({ts}, {rel}) names no batch ending at "
                    f"{base + rel} with that max timestamp")
    return records


def check_epochs(directory):
    path = os.path.join(directory, "leader-epoch-checkpoint")
    if not os.path.exists(path):
        problem(f"{path} missing")
        return
    lines = open(path).read().split("\n")
    if lines[-1] == "":
        lines.pop()
    if len(lines) < 2 or lines[0] != "0":
        problem(f"{path}: expected version line 0, found {lines[:1]}")
        return
    count = int(lines[1])
    entries = [tuple(int(x) for x in line.split(" ")) for line in lines[2:]]
    if len(entries) != count or any(len(e) != 2 for e in entries):
        problem(f"{path}: count {count}, entries {entries}")
        return
    for a, b in zip(entries, entries[1:]):
        if not (b[0] > a[0] and b[1] > a[1]):
            problem(f"{path}: entries not strictly increasing: {a} then {b}")
    for base, last, epoch in batch_epochs:
        holding = [e for e in entries if e[1] <= base]
        want = holding[-1][0] if holding else None
        later = [e for e in entries if base < e[1] <= last]
        if want != epoch or later:
            problem(f"batch {base}..{last}: partitionLeaderEpoch {epoch}, the checkpoint "
                    f"{entries} gives {want}")
    print(f"leader-epoch-checkpoint: {entries}, {len(batch_epochs)} batches agree"
          if not problems else "leader-epoch-checkpoint: problems")


def main():
    args = sys.argv[1:]
    if len(args) < 2:
        print(__doc__)
        return 2
    directory, expected_path = args[0], args[1]
    interval = int(args[args.index("--index-interval") + 1]) if "--index-interval" in args else 4096
    closed = "--closed" in args
    global want_codec
    if "--codec" in args:
        want_codec = CODECS[args[args.index("--codec") + 1]]
    logs = sorted(f for f in os.listdir(directory) if f.endswith(".log"))
    if not logs:
        problem(f"{directory}: no .log files")
    records = []
    for name in logs:
        records += check_segment(os.path.join(directory, name), interval, closed, "--gaps" in args)
    if "--epochs" in args:
        check_epochs(directory)
    expected = parse_expected(expected_path)
    if len(records) != len(expected):
        problem(f"{len(records)} records in the files, {len(expected)} expected")
    for got, want in zip(records, expected):
        if got != want:
            problem(f"record {want[0]}: got {got!r}, expected {want!r}")
            break
    for a, b in zip(records, records[1:]):
        if b[0] <= a[0] if "--gaps" in args else b[0] != a[0] + 1:
            problem(f"offsets not {'increasing' if '--gaps' in args else 'dense'}: "
                    f"{a[0]} then {b[0]}")
            break
    names = {v: k for k, v in CODECS.items()}
    print("codecs: " + ", ".join(f"{names.get(c, c)} {n}" for c, n in sorted(codec_counts.items())))
    print(f"checked {len(logs)} segments, {len(records)} records: "
          + ("OK" if not problems else f"{len(problems)} problems"))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
