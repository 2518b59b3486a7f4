//! Kafka's error codes as logbus errors.

use std::time::Duration;

use rdkafka::error::{KafkaError, RDKafkaErrorCode as Code};

use crate::error::Error;

/// Where an error happened: the operation, and the topic and partition when known.
#[derive(Debug, Clone, Copy)]
pub(crate) struct At<'a> {
    pub(crate) operation: &'static str,
    pub(crate) topic: Option<&'a str>,
    pub(crate) partition: Option<u32>,
    /// The timeout the operation ran under (for [`Error::Timeout`]).
    pub(crate) timeout: Option<Duration>,
}

impl<'a> At<'a> {
    pub(crate) fn op(operation: &'static str) -> Self {
        Self {
            operation,
            topic: None,
            partition: None,
            timeout: None,
        }
    }

    pub(crate) fn topic(mut self, topic: &'a str) -> Self {
        self.topic = Some(topic);
        self
    }

    pub(crate) fn partition(mut self, partition: u32) -> Self {
        self.partition = Some(partition);
        self
    }

    pub(crate) fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
}

/// The code inside a client error, if it has one.
pub(crate) fn code_of(error: &KafkaError) -> Option<Code> {
    match error {
        KafkaError::AdminOp(c) => Some(*c),
        other => other.rdkafka_error_code(),
    }
}

/// Whether `code` says the request timed out (its effect unknown).
pub(crate) fn is_timeout(code: Code) -> bool {
    matches!(
        code,
        Code::OperationTimedOut
            | Code::MessageTimedOut
            | Code::RequestTimedOut
            | Code::TimedOutQueue
    )
}

/// Kafka's retriable codes (the protocol's `RetriableException`s, and librdkafka's
/// transport-level ones).
pub(crate) fn is_retriable(code: Code) -> bool {
    matches!(
        code,
        Code::InvalidMessage
            | Code::UnknownTopicOrPartition
            | Code::LeaderNotAvailable
            | Code::NotLeaderForPartition
            | Code::NetworkException
            | Code::CoordinatorLoadInProgress
            | Code::CoordinatorNotAvailable
            | Code::NotCoordinator
            | Code::NotEnoughReplicas
            | Code::NotEnoughReplicasAfterAppend
            | Code::KafkaStorageError
            | Code::FencedLeaderEpoch
            | Code::UnknownLeaderEpoch
            | Code::OffsetNotAvailable
            | Code::PreferredLeaderNotAvailable
            | Code::ThrottlingQuotaExceeded
            | Code::BrokerTransportFailure
            | Code::AllBrokersDown
            | Code::WaitingForCoordinator
            | Code::Retry
    )
}

/// Whether `code` says a newer producer with the same id (or a newer epoch of this one)
/// took over: Kafka's `PRODUCER_FENCED` and `INVALID_PRODUCER_EPOCH`, librdkafka's `_FENCED`.
pub(crate) fn is_fenced(code: Code) -> bool {
    matches!(
        code,
        Code::ProducerFenced | Code::InvalidProducerEpoch | Code::Fenced
    )
}

/// [`Error::ProducerFenced`] as the `kafka` face reports it: librdkafka does not tell the
/// client its producer id or the epochs, so they are -1 (as the in-process producer reports
/// a call made after it was fenced).
pub(crate) fn fenced() -> Error {
    Error::ProducerFenced {
        producer_id: -1,
        epoch: -1,
        current_epoch: -1,
    }
}

/// A local wait at `at` that ran out (no Kafka error code).
pub(crate) fn timed_out(at: At<'_>) -> Error {
    Error::Timeout {
        operation: at.operation,
        topic: at.topic.map(str::to_owned),
        partition: at.partition,
        timeout_ms: at.timeout.map(|t| t.as_millis() as u64),
        code: None,
    }
}

/// `code` as a logbus error at `at`, with the client's words `reason`.
pub(crate) fn from_code(code: Code, reason: String, at: At<'_>) -> Error {
    let topic = at.topic.map(str::to_owned);
    match code {
        c if is_timeout(c) => Error::Timeout {
            operation: at.operation,
            topic,
            partition: at.partition,
            timeout_ms: at.timeout.map(|t| t.as_millis() as u64),
            code: Some(c as i32),
        },
        Code::UnknownTopic => Error::UnknownTopic {
            topic: topic.unwrap_or_default(),
        },
        c if is_fenced(c) => fenced(),
        c => Error::Kafka {
            operation: at.operation,
            topic,
            partition: at.partition,
            code: c as i32,
            name: format!("{c:?}"),
            retriable: is_retriable(c),
            reason,
        },
    }
}

/// A client error as a logbus error at `at`.
pub(crate) fn from_kafka(error: KafkaError, at: At<'_>) -> Error {
    match code_of(&error) {
        Some(code) => from_code(code, error.to_string(), at),
        None => Error::Kafka {
            operation: at.operation,
            topic: at.topic.map(str::to_owned),
            partition: at.partition,
            code: -1,
            name: "CLIENT".into(),
            retriable: false,
            reason: error.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_and_retriable_errors_are_told_apart() {
        let at = At::op("send").topic("t").partition(2);
        let e = from_code(
            Code::MessageTimedOut,
            "x".into(),
            at.timeout(Duration::from_secs(1)),
        );
        assert!(matches!(
            e,
            Error::Timeout {
                timeout_ms: Some(1000),
                partition: Some(2),
                ..
            }
        ));
        assert!(!e.is_retriable());
        let e = from_code(Code::NotLeaderForPartition, "moved".into(), at);
        assert!(e.is_retriable());
        assert!(matches!(&e, Error::Kafka { code: 6, topic: Some(t), .. } if t == "t"));
        assert!(e.to_string().contains("of `t`-2"), "{e}");
        let e = from_code(Code::TopicAuthorizationFailed, "no".into(), at);
        assert!(!e.is_retriable());
        assert!(matches!(
            from_code(Code::UnknownTopic, String::new(), at),
            Error::UnknownTopic { topic } if topic == "t"
        ));
        // A newer producer with the same id: the in-process producer's variant.
        for code in [
            Code::ProducerFenced,
            Code::InvalidProducerEpoch,
            Code::Fenced,
        ] {
            assert!(
                matches!(
                    from_code(code, "x".into(), at),
                    Error::ProducerFenced { .. }
                ),
                "{code:?}"
            );
        }
    }
}
