//! The `kafka` feature against librdkafka's mock cluster, in this process: one test binary,
//! a module per former file. Each module is `#![cfg(feature = "kafka")]` (the export tests
//! through the `logbus` tool also need `cli`), so without the feature the binary is empty.

mod kafka_auto_commit;
mod kafka_differential;
mod kafka_export;
mod kafka_faults;
mod kafka_mock;
mod kafka_txn;
