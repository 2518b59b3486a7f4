//! The crate's error type.
//!
//! One enum for the whole crate, `#[non_exhaustive]` so that each layer can add the variants
//! it needs without breaking users. Every variant carries the facts a caller needs to act on
//! it (what was wrong and what would have been valid); I/O failures keep the `io::Error` as
//! their `source`.
//!
//! The enum and the helpers of its messages live here; [`Corruption`] (what was wrong with
//! a batch or an index, the `reason` of the corruption variants) in `error/corruption.rs`,
//! [`Error`]'s methods in `error/methods.rs`, and the `io::Error` payload of a path that is
//! not a regular file (re-exported as `storage::io::NotRegularFile`) in
//! `error/not_regular_file.rs`.

use std::io;
use std::path::PathBuf;

mod corruption;
mod methods;
pub(crate) mod not_regular_file;

pub use corruption::Corruption;

/// Everything that can go wrong in logbus.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A configuration value is out of its valid range.
    #[error("invalid config `{name}` = {value}: {valid}")]
    InvalidConfig {
        /// The setting's name, as in the config struct.
        name: &'static str,
        /// The rejected value, printed.
        value: String,
        /// What would have been accepted.
        valid: String,
    },

    /// Bytes could not be decoded as the requested type.
    #[error("cannot decode {type_id}: {reason}")]
    Decode {
        /// The [`Codec::TYPE_ID`](crate::Codec::TYPE_ID) of the type being decoded.
        type_id: &'static str,
        /// What was wrong with the bytes.
        reason: String,
    },

    /// A position (a ring sequence, a partition offset) lies outside the range that can be
    /// served.
    #[error("sequence {requested} out of range: valid is {oldest}..={newest}")]
    SequenceOutOfRange {
        /// The sequence asked for.
        requested: u64,
        /// The oldest valid sequence at the time of the request.
        oldest: u64,
        /// The newest valid sequence at the time of the request (inclusive; for a reader's
        /// start this is the next sequence to be published).
        newest: u64,
    },

    /// An operation did not complete before its deadline: a local wait (a send waiting for
    /// room or for its acknowledgement, the `kafka` feature's client queue staying full), or
    /// a request to a Kafka cluster that got no answer in time (the `kafka` feature, with
    /// `code` set: a record not acknowledged within its delivery timeout, a commit or a
    /// metadata request not answered). Whether the operation took effect is not known, so a
    /// retry may duplicate it.
    #[error(
        "{operation}{} timed out{}{}",
        at(topic, partition),
        match timeout_ms { Some(ms) => format!(" after {ms} ms"), None => String::new() },
        match code { Some(c) => format!(" (kafka code {c})"), None => String::new() }
    )]
    Timeout {
        /// What logbus was doing (`"send"`, `"commit"`, `"poll"`, ...).
        operation: &'static str,
        /// The topic, when known.
        topic: Option<String>,
        /// The partition, when known.
        partition: Option<u32>,
        /// The timeout that passed, in milliseconds, when known (`None`: the cluster's own,
        /// or a deadline the caller's timeout does not name).
        timeout_ms: Option<u64>,
        /// Kafka's error code when a cluster's request timed out (`_MSG_TIMED_OUT`,
        /// `_TIMED_OUT`, `REQUEST_TIMED_OUT`); `None` for a local wait.
        code: Option<i32>,
    },

    /// Bytes failed validation (see [`Corruption`]): a record batch, a segment or an index
    /// file. `file` is `None` while the bytes are known only as bytes in memory (the record
    /// batch codec); the storage layer places the problem in its file
    /// ([`Error::in_file`]), with `position` counted from the file's start.
    #[error(
        "{}: {reason}",
        match file {
            Some(file) => format!("corrupt file {}: at byte {position}", file.display()),
            None => format!("corrupt record batch at byte {position}"),
        }
    )]
    Corrupt {
        /// The file holding the bad bytes, once known.
        file: Option<PathBuf>,
        /// Byte position of the offending field (or batch): inside `file`, or from the
        /// start of the bytes decoded.
        position: u64,
        /// What was wrong.
        reason: Corruption,
    },

    /// A record batch is compressed with a codec this build cannot read: an id Kafka does
    /// not define (5-7), or a codec whose cargo feature (`gzip`, `snappy`, `lz4`, `zstd`) is
    /// off. Also returned when asked to write with a codec whose feature is off.
    #[error(
        "record batch at byte {position}{} is compressed with {codec}, which this build cannot \
         read or write (codec ids 0-4 are Kafka's; each codec needs its cargo feature)",
        in_file(file)
    )]
    UnsupportedCompression {
        /// The file holding the batch, when it came from a file.
        file: Option<PathBuf>,
        /// Byte position where the batch starts.
        position: u64,
        /// The codec named by the batch's attributes (`gzip`, `snappy`, `lz4`, `zstd`, or
        /// `unknown(n)`).
        codec: String,
    },

    /// A record or batch is larger than a configured limit allows.
    #[error("{what} of {size} bytes exceeds the limit of {max} bytes")]
    RecordTooLarge {
        /// What was too large (`"record batch"`, `"record key"`, ...).
        what: &'static str,
        /// Its size in bytes.
        size: u64,
        /// The largest size accepted.
        max: u64,
    },

    /// A record without a key was sent to a topic whose
    /// [`CleanupPolicy`](crate::broker::CleanupPolicy) compacts: compaction keeps the latest
    /// record per key, so every record needs one (Kafka refuses such a record as an invalid
    /// record). Send the record with a key, or give the topic `CleanupPolicy::Delete`.
    #[error(
        "a record without a key cannot be sent to topic {topic:?}: its cleanup policy \
         compacts, and compaction keeps the latest record per key (send it with a key)"
    )]
    KeyRequired {
        /// The compacted topic.
        topic: String,
    },

    /// A batch to append holds no record (a log's batches hold at least one).
    #[error(
        "cannot append an empty record batch (recordsCount {records_count}, lastOffsetDelta \
         {last_offset_delta}); a batch needs at least one record"
    )]
    EmptyBatch {
        /// The batch's record count.
        records_count: i32,
        /// The batch's last offset delta.
        last_offset_delta: i32,
    },

    /// A batch to append starts below the log end offset (offsets only grow).
    #[error(
        "cannot append a batch at offset {base_offset}: the log already ends at \
         {log_end_offset}, and appends must start at or above it"
    )]
    OffsetBelowLogEnd {
        /// The batch's base offset.
        base_offset: u64,
        /// The log end offset.
        log_end_offset: u64,
    },

    /// An offset lies outside what a log holds: a consumer's position behind the tail (with
    /// `auto_offset_reset = None`; the position stays for the caller to seek), an offset given
    /// to `commit_offsets` or `seek` past the log end, or a read of a
    /// [`SegmentSet`](crate::storage::SegmentSet) outside `[log start, log end]`.
    #[error(
        "offset {requested}{} is out of range: the log holds offsets [{start}, {end})",
        at(topic, partition)
    )]
    OffsetOutOfRange {
        /// The topic, when the log is a topic's partition (`None` for a storage log used
        /// directly).
        topic: Option<String>,
        /// The partition, with `topic`.
        partition: Option<u32>,
        /// The offset asked for.
        requested: u64,
        /// The log start offset (the first offset still held).
        start: u64,
        /// The log end offset (one past the last offset held).
        end: u64,
    },

    /// A checkpoint file does not follow Kafka's text layout.
    #[error("invalid checkpoint file {}: line {line}: {reason}", file.display())]
    InvalidCheckpoint {
        /// The checkpoint file.
        file: PathBuf,
        /// The 1-based line number of the problem.
        line: usize,
        /// What was wrong, and what was expected.
        reason: String,
    },

    /// An earlier I/O failure left a log in an unknown state on disk, so it refuses writes.
    ///
    /// As Kafka takes a log directory offline after a storage error, logbus stops writing to
    /// the log; reopening it runs recovery, which keeps everything that was durable.
    #[error(
        "the log in {} is offline after an earlier I/O error; reopen it to run recovery",
        dir.display()
    )]
    LogOffline {
        /// The partition directory.
        dir: PathBuf,
    },

    /// A persisted partition's log went offline after an I/O error (a failed write or
    /// fsync of its writer): sends to the partition are refused (the record is handed
    /// back), flushes fail, and a consumer gets this once it has read what the partition
    /// holds. The topic still exists (unlike [`Error::Closed`] after a delete); reopening
    /// the broker runs recovery, which keeps every durable record.
    #[error(
        "`{topic}`-{partition} is offline: its log in {} failed ({reason}); reopen the broker \
         to run recovery",
        dir.display()
    )]
    PartitionOffline {
        /// The topic.
        topic: String,
        /// The partition.
        partition: u32,
        /// The partition directory.
        dir: PathBuf,
        /// The I/O error that took the log offline.
        reason: String,
    },

    /// A path given as a segment file or a partition directory is neither (e.g. a file not
    /// named `NNNNNNNNNNNNNNNNNNNN.log`, or a directory holding no segments).
    #[error("{}: {reason}", path.display())]
    NotASegment {
        /// The path given.
        path: PathBuf,
        /// What it is instead, and what would have been accepted.
        reason: String,
    },

    /// A persisted topic found in the data directory has not been opened yet: its key and
    /// value types are known only once [`Broker::topic`](crate::broker::Broker::topic)
    /// names them (checked against the codec type ids in its metadata).
    #[error(
        "persisted topic `{topic}` (key codec `{key_type}`, value codec `{value_type}`) is not \
         open: call Broker::topic::<K, V> with codecs of those type ids first"
    )]
    TopicNotOpen {
        /// The topic.
        topic: String,
        /// Its key codec's type id, from its metadata.
        key_type: String,
        /// Its value codec's type id.
        value_type: String,
    },

    /// A record was appended to a persisted partition (it has an offset) but its log went
    /// offline before the flush policy acknowledged it: the record may or may not be on
    /// disk after a crash. It is not handed back (it is in the log); reopening the broker
    /// runs recovery, and reading the partition says whether it survived.
    #[error("record at offset {offset} of `{topic}`-{partition} is not acknowledged: {reason}")]
    NotAcknowledged {
        /// The topic.
        topic: String,
        /// The partition.
        partition: u32,
        /// The record's offset.
        offset: u64,
        /// Why the log went offline.
        reason: String,
    },

    /// The directory is open already: a data directory another broker holds, or a partition
    /// directory another [`SegmentSet`] holds, in this process or another (one writer per
    /// directory).
    ///
    /// [`SegmentSet`]: crate::storage::SegmentSet
    #[error(
        "directory {} is in use: another open broker or log holds the lock on {} (one writer \
         per directory; close it first)",
        dir.display(),
        lock_file.display()
    )]
    DirectoryLocked {
        /// The data or partition directory.
        dir: PathBuf,
        /// The lock file held.
        lock_file: PathBuf,
    },

    /// A persisted topic's metadata names a partition whose directory is gone (deleted by
    /// hand, or with the data directory while the broker ran): its records are lost, so the
    /// broker does not open rather than start it empty. Restore the directory, or open with
    /// [`BrokerBuilder::recreate_missing_partitions`](crate::broker::BrokerBuilder::recreate_missing_partitions)
    /// to accept the loss (it is then reported by `Broker::recovery_reports`).
    #[error(
        "partition {partition} of persisted topic `{topic}` has no directory {} (its records \
         are lost): restore it, or open with BrokerBuilder::recreate_missing_partitions to \
         start it empty",
        dir.display()
    )]
    PartitionDirMissing {
        /// The topic.
        topic: String,
        /// The partition.
        partition: u32,
        /// The missing directory.
        dir: PathBuf,
    },

    /// A path given as a data directory is not one: it has no marker (`meta.properties`)
    /// and no sibling directory says it had one (that is [`Error::DataDirLost`]). Missing or
    /// empty, it becomes a data directory with
    /// [`BrokerBuilder::create`](crate::broker::BrokerBuilder::create) (a directory that
    /// vanished, deleted or a mount that failed, must not reopen as an empty log, so creating
    /// one is explicit); holding anything else, it is not logbus's and is refused even then.
    #[error(
        "{} is not a logbus data directory{}",
        dir.display(),
        match (missing, entries, example) {
            (true, _, _) => ": it does not exist; to start a new one there, open with \
                             BrokerBuilder::create(true)".to_string(),
            (false, 0, _) => " (no meta.properties) and is empty; to start a new one there, \
                              open with BrokerBuilder::create(true)".to_string(),
            (false, n, Some(e)) => format!(
                " (no meta.properties) and holds {n} entries (e.g. `{e}`): choose an empty or \
                 new directory"
            ),
            (false, n, None) => format!(
                " (no meta.properties) and holds {n} entries: choose an empty or new directory"
            ),
        }
    )]
    DataDirUnformatted {
        /// The directory.
        dir: PathBuf,
        /// `true`: the path does not exist (`entries` is 0).
        missing: bool,
        /// How many entries it holds (a leftover lock file not counted).
        entries: usize,
        /// One of them.
        example: Option<String>,
    },

    /// A data directory's marker (`meta.properties`) cannot be read as one: truncated,
    /// corrupt, not UTF-8, too large, of an unknown version, or with a key missing, repeated
    /// or invalid.
    #[error(
        "invalid data directory marker {}: {reason}; restore it from a backup, or move the \
         directory aside",
        file.display()
    )]
    InvalidDirMarker {
        /// The marker file.
        file: PathBuf,
        /// What was wrong, and what was expected.
        reason: String,
    },

    /// A data directory belongs to another broker, or to another set of directories, than
    /// the directories it was opened with.
    #[error("data directory {} is not one of this broker's: {reason}", dir.display())]
    ForeignDataDir {
        /// The directory.
        dir: PathBuf,
        /// What its marker says, against what the other directories' markers say.
        reason: String,
    },

    /// One of a broker's data directories lost its marker (it was deleted, emptied, or its
    /// disk came back blank) while the others kept theirs: its records are gone, and
    /// reopening it empty would pass for a valid replica. Restore it, or open with
    /// [`BrokerBuilder::replace_lost_data_dirs`](crate::broker::BrokerBuilder::replace_lost_data_dirs)
    /// to format it again: its replicas then rejoin as out-of-sync followers and copy the
    /// leaders' logs.
    #[error(
        "data directory {} (index {index}, id {directory_id}) is {}, while the broker's \
         other directories are formatted: its records are lost; restore it, or open with \
         BrokerBuilder::replace_lost_data_dirs(true) to format it again (its replicas then \
         catch up from the others)",
        dir.display(),
        if *missing { "missing" } else { "empty" }
    )]
    DataDirLost {
        /// The directory.
        dir: PathBuf,
        /// Its index among the directories, as the other markers record them.
        index: usize,
        /// The directory id it had.
        directory_id: String,
        /// `true`: the path does not exist; `false`: it exists, empty.
        missing: bool,
    },

    /// A path in a partition directory is not a regular file (a symbolic link, a FIFO, a
    /// device, a directory): logbus opens only regular files, so that nothing blocks on a
    /// FIFO and nothing is written through a link to a file elsewhere.
    #[error("{}: not a regular file: it is {what}; segment files must be regular files", path.display())]
    NotRegularFile {
        /// The path.
        path: PathBuf,
        /// What it is instead.
        what: &'static str,
    },

    /// A segment file is larger than a segment may be: index positions are 32-bit, so a
    /// `.log` past 2^31 - 1 bytes (Kafka's `segment.bytes` limit) cannot be indexed.
    #[error(
        "segment {} holds {size} bytes, more than the {max} a segment may hold (index positions \
         are 32-bit, as Kafka's)",
        path.display()
    )]
    SegmentTooLarge {
        /// The `.log` file.
        path: PathBuf,
        /// Its length.
        size: u64,
        /// The largest length accepted.
        max: u64,
    },

    /// A valid batch (its CRC holds) is larger than the configured `max_batch_bytes`, which
    /// bounds the memory a read may take: raise the limit to open or read this log.
    #[error(
        "the batch at byte {position} of {} is {size} bytes (its CRC holds), more than \
         max_batch_bytes = {max}; raise max_batch_bytes to read it",
        file.display()
    )]
    BatchTooLarge {
        /// The `.log` file.
        file: PathBuf,
        /// Where the batch starts.
        position: u64,
        /// Its size in bytes.
        size: u64,
        /// The configured limit.
        max: u64,
    },

    /// An I/O operation failed.
    #[error("I/O error while {context}")]
    Io {
        /// What logbus was doing (with the file's path where there is one).
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// No topic of this name exists.
    #[error("unknown topic `{topic}`")]
    UnknownTopic {
        /// The name asked for.
        topic: String,
    },

    /// `create_topic` with a name already taken.
    #[error("topic `{topic}` already exists")]
    TopicExists {
        /// The name.
        topic: String,
    },

    /// A topic name breaks the rule: 1 to
    /// [`MAX_TOPIC_NAME_LEN`](crate::broker::MAX_TOPIC_NAME_LEN) (242) characters of
    /// `[a-zA-Z0-9._-]`, not `.` or `..` (a Kafka cluster's topics, with the `kafka` feature:
    /// up to Kafka's 249).
    #[error("invalid topic name {name:?}: {reason}")]
    InvalidTopicName {
        /// The name given.
        name: String,
        /// Why it was refused, and what is valid.
        reason: String,
    },

    /// A partition number at or above the topic's partition count.
    #[error("partition {partition} of topic `{topic}` does not exist: the topic has {count} partitions (0..{count})")]
    PartitionOutOfRange {
        /// The topic.
        topic: String,
        /// The partition asked for.
        partition: u32,
        /// The topic's partition count.
        count: u32,
    },

    /// `add_partitions` asked for fewer partitions than the topic has (partitions can only
    /// be added, as in Kafka).
    #[error("topic `{topic}` has {current} partitions; a partition count can only grow, so {requested} is refused")]
    PartitionsCannotShrink {
        /// The topic.
        topic: String,
        /// Its partition count.
        current: u32,
        /// The count asked for.
        requested: u32,
    },

    /// A topic exists with other key or value types than the ones asked for.
    #[error("topic `{topic}` holds {existing}, not {requested}")]
    TypeMismatch {
        /// The topic.
        topic: String,
        /// Its types, as `Topic<K, V>`.
        existing: String,
        /// The types asked for, as `Topic<K, V>`.
        requested: String,
    },

    /// A consumer with `auto_offset_reset = None` has no committed offset and no position
    /// for a partition: seek first.
    #[error(
        "no committed offset for `{topic}`-{partition} and auto_offset_reset is None: seek first"
    )]
    NoOffsetForPartition {
        /// The topic.
        topic: String,
        /// The partition.
        partition: u32,
    },

    /// A consumer operation on a partition it is not assigned.
    #[error("`{topic}`-{partition} is not assigned to this consumer")]
    NotAssigned {
        /// The topic.
        topic: String,
        /// The partition.
        partition: u32,
    },

    /// A group operation (commit, committed) by a consumer created without a `group_id`.
    #[error("{operation} needs a group id; this consumer was created without one")]
    NoGroupId {
        /// The operation refused.
        operation: &'static str,
    },

    /// No consumer group of this name is known.
    #[error("unknown consumer group `{group}`")]
    UnknownGroup {
        /// The group asked for.
        group: String,
    },

    /// `delete_group` while consumers of the group are open.
    #[error("consumer group `{group}` still has {members} open consumers; close them first")]
    GroupNotEmpty {
        /// The group.
        group: String,
        /// How many of its consumers are open.
        members: usize,
    },

    /// `try_send` found the partition full of records a group has not committed
    /// (`Overflow::Block`).
    #[error("partition {partition} of topic `{topic}` is full of records not yet committed")]
    Full {
        /// The topic.
        topic: String,
        /// The partition.
        partition: u32,
    },

    /// A record timestamp outside `0..=`[`MAX_TIMESTAMP`](crate::MAX_TIMESTAMP) (Kafka
    /// refuses negative timestamps; logbus keeps two bits of each entry for itself): given to
    /// a send or a lookup by time (`offset` is `None`), or found on a record read from disk
    /// (`offset` names it).
    #[error(
        "invalid timestamp {timestamp}{}: record timestamps are milliseconds since the Unix \
         epoch, in 0..=4611686018427387903 (2^62 - 1)",
        match offset { Some(o) => format!(" of the record at offset {o}"), None => String::new() }
    )]
    InvalidTimestamp {
        /// The timestamp.
        timestamp: i64,
        /// The offset of the record that holds it, when it was read from a log.
        offset: Option<u64>,
    },

    /// The object operated on is closed (a deleted topic, a closed consumer).
    #[error("closed: {what}")]
    Closed {
        /// What is closed.
        what: String,
    },

    /// A commit from a group member that is no longer in the group's current generation
    /// (a rebalance completed without it, or it was evicted): its partitions may belong to
    /// another member now (Kafka's `CommitFailedException`, `ILLEGAL_GENERATION`).
    #[error(
        "member `{member}` of group `{group}` is in generation {member_generation}, the group in \
         {group_generation}: the commit is refused (poll to rejoin)"
    )]
    StaleGeneration {
        /// The group.
        group: String,
        /// The member id.
        member: String,
        /// The generation the member acted in.
        member_generation: i32,
        /// The group's current generation.
        group_generation: i32,
    },

    /// `assign` and `subscribe` mixed on one consumer (Kafka's "Subscription to topics,
    /// partitions and pattern are mutually exclusive").
    #[error("{operation}: this consumer {current}; call unsubscribe first")]
    SubscriptionConflict {
        /// The operation refused.
        operation: &'static str,
        /// What the consumer does now.
        current: &'static str,
    },

    /// A consumer joining a group whose members use another assignor (Kafka's
    /// `INCONSISTENT_GROUP_PROTOCOL`).
    #[error("a consumer joining group `{group}` asks for assignor `{requested}`, the group uses `{current}`")]
    InconsistentGroupProtocol {
        /// The group.
        group: String,
        /// The assignor the group's members use.
        current: String,
        /// The assignor the new member asked for.
        requested: String,
    },

    /// A static member (`group_instance_id`) joining while a consumer with the same
    /// instance id is still open in the group.
    #[error("group instance id `{instance}` is already used by an open member of group `{group}`")]
    DuplicateInstanceId {
        /// The group.
        group: String,
        /// The instance id.
        instance: String,
    },

    /// A transactional call in a state that does not allow it (send outside a
    /// transaction, commit without begin, begin twice, a non-transactional producer...).
    #[error("transactional id `{transactional_id}`: `{operation}` is not valid in state {state}; valid: {valid}")]
    InvalidTxnState {
        /// The transactional id (empty for a producer without one).
        transactional_id: String,
        /// The producer's transaction state.
        state: &'static str,
        /// The call refused.
        operation: &'static str,
        /// What is valid in that state.
        valid: &'static str,
    },

    /// The transaction was open longer than its `transaction_timeout` and the coordinator
    /// aborted it. The producer's epoch was bumped: call `begin_transaction` again (the
    /// producer itself is not fenced).
    #[error("transactional id `{transactional_id}`: the transaction at epoch {epoch} timed out after {timeout_ms} ms and was aborted; begin a new one")]
    TransactionTimedOut {
        /// The transactional id.
        transactional_id: String,
        /// The epoch of the aborted transaction.
        epoch: i16,
        /// The producer's transaction timeout.
        timeout_ms: u64,
    },

    /// A send of the open transaction failed (its records may be in some logs or not):
    /// the transaction can only be aborted (`abort_transaction`), then retried.
    #[error("transactional id `{transactional_id}`: the transaction must be aborted: {reason}")]
    TransactionAbortable {
        /// The transactional id.
        transactional_id: String,
        /// The send's error.
        reason: String,
    },

    /// A subscription pattern with characters outside `[a-zA-Z0-9._-*?]`.
    #[error("invalid subscription pattern `{pattern}`: {reason}")]
    InvalidPattern {
        /// The pattern given.
        pattern: String,
        /// What was wrong, and what is allowed.
        reason: String,
    },

    /// `poll` called from inside a rebalance listener of the same consumer.
    #[error("poll called from inside a rebalance listener; commit, seek or pause there instead")]
    PollInListener,

    /// `acks = all`: the partition's ISR is smaller than the topic's
    /// `min_insync_replicas`, so the record was refused before it was appended (Kafka's
    /// `NOT_ENOUGH_REPLICAS`). Retriable: the ISR grows back as followers catch up. Not a
    /// twin of [`Error::NotEnoughReplicasAfterAppend`] (Kafka keeps the two apart too): here
    /// the record is in no log, so a retry cannot duplicate it.
    #[error("`{topic}`-{partition}: {isr} in-sync replicas, below min_insync_replicas = {min}; the record was not appended")]
    NotEnoughReplicas {
        /// The topic.
        topic: String,
        /// The partition.
        partition: u32,
        /// The ISR's size.
        isr: usize,
        /// The topic's `min_insync_replicas`.
        min: usize,
    },

    /// `acks = all`: the record was appended, but the ISR shrank below
    /// `min_insync_replicas` before every in-sync replica had it (Kafka's
    /// `NOT_ENOUGH_REPLICAS_AFTER_APPEND`). The record may still be read later; a retry
    /// may duplicate it (unlike [`Error::NotEnoughReplicas`], refused before the append).
    #[error("`{topic}`-{partition}: appended, but the ISR shrank to {isr}, below min_insync_replicas = {min}, before it was acknowledged")]
    NotEnoughReplicasAfterAppend {
        /// The topic.
        topic: String,
        /// The partition.
        partition: u32,
        /// The ISR's size.
        isr: usize,
        /// The topic's `min_insync_replicas`.
        min: usize,
    },

    /// No replica of the partition can lead it now (every in-sync replica is down and
    /// unclean leader election is off). Retriable.
    #[error("`{topic}`-{partition} has no leader: every in-sync replica is offline")]
    LeaderNotAvailable {
        /// The topic.
        topic: String,
        /// The partition.
        partition: u32,
    },

    /// The leader changed while a send waited for its acknowledgement; the record may or
    /// may not be in the new leader's log (a retry may duplicate it).
    #[error("`{topic}`-{partition}: the leader changed before the record was acknowledged")]
    NotLeader {
        /// The topic.
        topic: String,
        /// The partition.
        partition: u32,
    },

    /// An idempotent send's sequence is not the next one the partition's leader expects
    /// for its producer (Kafka's `OutOfOrderSequenceException`): a record of the producer
    /// before it is missing from the log.
    #[error("`{topic}`-{partition}: producer {producer_id} (epoch {epoch}) sent sequence {got}, the log expected {expected}")]
    OutOfOrderSequence {
        /// The topic.
        topic: String,
        /// The partition.
        partition: u32,
        /// The producer id.
        producer_id: i64,
        /// The producer epoch.
        epoch: i16,
        /// The sequence the leader expected (its last sequence + 1, or 0 in a new epoch).
        expected: i32,
        /// The send's first sequence.
        got: i32,
    },

    /// A producer id's epoch was bumped past this producer's (Kafka's
    /// `ProducerFencedException` / `InvalidProducerEpochException`): a newer instance of
    /// the same producer owns it; this one may send no more. A transactional producer is
    /// fenced when another with the same `transactional_id` calls `init_transactions`, and
    /// a send of a transaction that is over (each transaction has its own epoch, KIP-890)
    /// is refused with it: close the producer.
    #[error(
        "producer {producer_id} at epoch {epoch} is fenced: the current epoch is {current_epoch}"
    )]
    ProducerFenced {
        /// The producer id.
        producer_id: i64,
        /// The fenced epoch (this producer's).
        epoch: i16,
        /// The epoch the broker or the partition knows.
        current_epoch: i16,
    },

    /// The producer met an error it cannot recover from (librdkafka's fatal errors, on the
    /// `kafka` face: an idempotent producer's broken sequence under
    /// `enable.gapless.guarantee`, a transactional producer's lost authorization or an
    /// unsupported broker). Every later call fails the same way: drop the producer and
    /// make a new one (a transactional one then calls `init_transactions`).
    #[error("producer{} failed for good ({name}): {reason}; make a new producer", transactional_id.as_deref().map(|t| format!(" `{t}`")).unwrap_or_default())]
    ProducerFatal {
        /// The transactional id, for a transactional producer.
        transactional_id: Option<String>,
        /// Kafka's (or librdkafka's) name of the error.
        name: String,
        /// The client's words.
        reason: String,
    },

    /// A producer-state snapshot file (`<offset>.snapshot`) that does not parse: recovery
    /// skips and deletes it and rebuilds the producers' states from an older snapshot or the
    /// log.
    #[error("corrupt producer snapshot {}: {reason}", path.display())]
    CorruptProducerSnapshot {
        /// The file.
        path: std::path::PathBuf,
        /// What was wrong.
        reason: String,
    },

    /// A replica id that is not one of the partition's replicas (fault injection).
    #[error("replica {replica} is not a replica of `{topic}`-{partition}: its replicas are {replicas:?}")]
    UnknownReplica {
        /// The topic.
        topic: String,
        /// The partition.
        partition: u32,
        /// The replica asked for.
        replica: u32,
        /// The partition's replicas.
        replicas: Vec<u32>,
    },

    /// A data directory index at or above the broker's count of data directories (fault
    /// injection, and a replica placement read from disk).
    #[error("data directory {index} does not exist: the broker has {count} (0..{count})")]
    DataDirOutOfRange {
        /// The directory index asked for.
        index: u32,
        /// How many the broker has.
        count: u32,
    },

    /// A push-style subscription's callback panicked; the record it panicked on was not
    /// committed (the group reads it again).
    #[error("callback of member `{member}` panicked on `{topic}`-{partition} at offset {offset}: {message}")]
    CallbackPanicked {
        /// The member whose callback panicked.
        member: String,
        /// The record's topic.
        topic: String,
        /// The record's partition.
        partition: u32,
        /// The record's offset (committed offsets stay at or below it).
        offset: u64,
        /// The panic's message, if it was a string.
        message: String,
    },

    /// A Kafka cluster refused or failed a request (the `kafka` feature): Kafka's error
    /// code with its name, and where. `retriable` is Kafka's own classification: the same
    /// request may succeed if tried again (a leader moving, a broker restarting).
    #[error("kafka: {operation}{}: {name} (code {code}{}): {reason}", at(topic, partition), if *retriable { ", retriable" } else { "" })]
    Kafka {
        /// What logbus was doing (`"send"`, `"commit"`, `"poll"`, ...).
        operation: &'static str,
        /// The topic, when the error is about one.
        topic: Option<String>,
        /// The partition, when the error is about one.
        partition: Option<u32>,
        /// Kafka's error code (librdkafka's negative codes for client-side errors).
        code: i32,
        /// The code's name (`NOT_LEADER_FOR_PARTITION`, `_TRANSPORT`, ...).
        name: String,
        /// Whether Kafka says the request may succeed when retried.
        retriable: bool,
        /// What the client said.
        reason: String,
    },

    /// An export found source records missing on the target with later ones already
    /// there (the `kafka` feature): the cluster refused some records while it accepted the
    /// ones after them. Kafka appends only, so the missing records cannot be put back in
    /// their place; the export stops rather than append them out of order.
    #[error(
        "export of `{topic}`-{partition}: the target lacks source offsets {} while the \
         records after them are there (from target offset {landed_from}); Kafka cannot \
         insert records before others: find why the cluster refused them, then delete \
         and recreate the target topic, or export to another topic",
        ranges(missing)
    )]
    ExportGap {
        /// The topic (the same name on both sides).
        topic: String,
        /// The partition.
        partition: u32,
        /// The missing source offsets, as half-open ranges `[from, to)` in order.
        missing: Vec<(u64, u64)>,
        /// The target offset of the first record that landed after a missing one.
        landed_from: u64,
        /// The cluster's refusal that left the gap, when this run saw it (its source).
        #[source]
        cause: Option<Box<Error>>,
    },

    /// An export or an import found the target holding something other than the copy it
    /// was resuming (the `kafka` feature): another source's records, a duplicate, a record
    /// another producer wrote, or a record that changed. Nothing was copied after it.
    #[error(
        "{operation} of `{topic}`-{partition}: target offset {target_offset} holds {found}; \
         {how}"
    )]
    CopyTargetMismatch {
        /// `"export"` or `"import"`.
        operation: &'static str,
        /// The topic.
        topic: String,
        /// The partition.
        partition: u32,
        /// The target's offset of the record that does not fit.
        target_offset: u64,
        /// What that record is, and what the copy expected there.
        found: String,
        /// How to proceed.
        how: &'static str,
    },
}

/// Half-open offset ranges as `[a, b), [c, d)`, the first few of them.
fn ranges(ranges: &[(u64, u64)]) -> String {
    const SHOWN: usize = 8;
    let mut text = ranges
        .iter()
        .take(SHOWN)
        .map(|(from, to)| format!("[{from}, {to})"))
        .collect::<Vec<_>>()
        .join(", ");
    if ranges.len() > SHOWN {
        text.push_str(&format!(" and {} more ranges", ranges.len() - SHOWN));
    }
    text
}

/// " of `topic`-partition" for the messages of the errors that may name a partition.
fn at(topic: &Option<String>, partition: &Option<u32>) -> String {
    match (topic, partition) {
        (Some(t), Some(p)) => format!(" of `{t}`-{p}"),
        (Some(t), None) => format!(" of `{t}`"),
        _ => String::new(),
    }
}

/// " of <file>" for [`Error::UnsupportedCompression`]'s message.
fn in_file(file: &Option<PathBuf>) -> String {
    match file {
        Some(path) => format!(" of {}", path.display()),
        None => String::new(),
    }
}

/// `Result` with [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
