//! Moving persisted topics into a Kafka cluster and back.
