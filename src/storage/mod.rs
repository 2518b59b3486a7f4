//! One partition's log on disk, in Apache Kafka's own segment format.
//!
//! A partition directory holds segments, each three files named by the segment's base offset
//! (20 zero-padded digits): `NNNNNNNNNNNNNNNNNNNN.log` (RecordBatch v2 batches back to back),
//! `.index` (sparse offset → position) and `.timeindex` (sparse timestamp → offset). Kafka's
//! own tools can read what logbus writes, and logbus reads what Kafka writes (uncompressed).
//!
//! The layer knows nothing of threads or topics. Its modules, bottom up:
//!
//! | module | what |
//! |---|---|
//! | [`io`] | the I/O trait under every file access, and the real file system |
//! | [`varint`] | zig-zag varints |
//! | [`record_batch`] | the RecordBatch v2 codec (CRC-32C) |

pub mod io;
pub mod record_batch;
pub mod varint;
