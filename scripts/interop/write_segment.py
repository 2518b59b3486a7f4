#!/usr/bin/env python3
"""Writes a partition directory the way another Kafka implementation would, with
kafka-python's own batch builder, for logbus to read back.

Usage: write_segment.py DIR EXPECTED

Writes DIR/00000000000000000000.log only (no index files: logbus must rebuild them) holding
several batches: null keys and values, a null header value, timestamps out of order inside a
batch, a non-zero leader epoch. EXPECTED gets the records in check_segments.py's format.
"""

import os
import struct
import sys

from kafka.record.default_records import DefaultRecordBatchBuilder


def hexo(b):
    return "-" if b is None else b.hex()


def main():
    directory, expected_path = sys.argv[1], sys.argv[2]
    os.makedirs(directory, exist_ok=True)
    batches = [
        [(1700000000000, b"k0", b"v0", []),
         (1700000000005, None, b"v1", [("h", b"x")]),
         (1699999999990, b"k2", None, [("h1", None), ("h2", b"")])],
        [(1700000001000, b"", b"", [])],
        [(1700000002000 + i, ("key-%d" % i).encode(), os.urandom(i * 37 % 300), [("n", str(i).encode())])
         for i in range(50)],
    ]
    out = bytearray()
    expected = []
    offset = 0
    for records in batches:
        builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0,
                                            producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                            batch_size=1 << 20)
        for delta, (ts, key, value, headers) in enumerate(records):
            builder.append(delta, timestamp=ts, key=key, value=value, headers=headers)
            hdrs = ",".join(f"{k.encode().hex()}:{hexo(v)}" for k, v in headers)
            expected.append(f"{offset + delta}\t{ts}\t{hexo(key)}\t{hexo(value)}\t{hdrs}")
        buf = bytearray(builder.build())
        struct.pack_into(">q", buf, 0, offset)  # baseOffset: outside the CRC
        struct.pack_into(">i", buf, 12, 3)      # partitionLeaderEpoch: outside the CRC
        out += buf
        offset += len(records)
    with open(os.path.join(directory, "%020d.log" % 0), "wb") as f:
        f.write(out)
    with open(expected_path, "w") as f:
        f.write("\n".join(expected) + "\n")
    print(f"wrote {len(batches)} batches, {offset} records, {len(out)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
