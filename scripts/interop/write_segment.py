#!/usr/bin/env python3
"""Writes a partition directory the way another Kafka implementation would, with
kafka-python's own batch builder, for logbus to read back.

Usage: write_segment.py DIR EXPECTED [--codec none|gzip|snappy|lz4|zstd]

Writes DIR/00000000000000000000.log only (no index files: logbus must rebuild them) holding
several batches: null keys and values, a null header value, timestamps out of order inside a
batch, a non-zero leader epoch. EXPECTED gets the records in check_segments.py's format.

With --codec, every batch is compressed with that codec by kafka-python's own codecs
(kafka/codec.py: gzip, snappy in xerial framing, lz4 frame, zstd), and the records are
compressible (kafka-python writes a batch uncompressed when compressing does not shrink it).
The codec of each batch written is printed ("codecs: ...").
"""

import os
import struct
import sys

from kafka.record.default_records import DefaultRecordBatchBuilder


def hexo(b):
    return "-" if b is None else b.hex()


CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def main():
    directory, expected_path = sys.argv[1], sys.argv[2]
    args = sys.argv[3:]
    codec = CODECS[args[args.index("--codec") + 1]] if "--codec" in args else 0
    os.makedirs(directory, exist_ok=True)
    batches = [
        [(1700000000000, b"k0", b"v0", []),
         (1700000000005, None, b"v1", [("h", b"x")]),
         (1699999999990, b"k2", None, [("h1", None), ("h2", b"")])],
        [(1700000001000, b"", b"", [])],
        [(1700000002000 + i, ("key-%d" % i).encode(), os.urandom(i * 37 % 300), [("n", str(i).encode())])
         for i in range(50)],
    ]
    if codec:
        text = b"the quick brown fox jumps over the lazy dog " * 8
        batches = [
            [(1700000000000 + i, ("key-%d" % (i % 7)).encode(), text + str(i).encode(),
              [("n", str(i).encode()), ("null", None)]) for i in range(40)],
            [(1700000001000, None, text, []), (1699999999990, b"", text * 3, [("h", b"")])],
            [(1700000002000 + i, None, (b"%d " % i) * (i % 90 + 10), []) for i in range(200)],
        ]
    out = bytearray()
    expected = []
    codecs = []
    offset = 0
    for records in batches:
        builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=0,
                                            producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                            batch_size=1 << 20)
        for delta, (ts, key, value, headers) in enumerate(records):
            builder.append(delta, timestamp=ts, key=key, value=value, headers=headers)
            hdrs = ",".join(f"{k.encode().hex()}:{hexo(v)}" for k, v in headers)
            expected.append(f"{offset + delta}\t{ts}\t{hexo(key)}\t{hexo(value)}\t{hdrs}")
        buf = bytearray(builder.build())
        struct.pack_into(">q", buf, 0, offset)  # baseOffset: outside the CRC
        struct.pack_into(">i", buf, 12, 3)      # partitionLeaderEpoch: outside the CRC
        codecs.append(buf[22] & 7)  # attributes' low byte: the codec bits
        out += buf
        offset += len(records)
    with open(os.path.join(directory, "%020d.log" % 0), "wb") as f:
        f.write(out)
    with open(expected_path, "w") as f:
        f.write("\n".join(expected) + "\n")
    print(f"wrote {len(batches)} batches, {offset} records, {len(out)} bytes")
    names = {v: k for k, v in CODECS.items()}
    print("codecs: " + ",".join(names.get(c, str(c)) for c in codecs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
