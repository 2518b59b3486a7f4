//! `logbus export` and `logbus import`: a data directory to a Kafka cluster and back.

use std::io::Write;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::process::ExitCode;

use logbus::kafka::export::{CopyReport, ExportConfig, Progress};
use logbus::kafka::{KafkaBroker, KafkaConfig};
use logbus::Error;

use super::Failure;

/// The arguments `export` and `import` share.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The data directory.
    data_dir: PathBuf,
    /// The cluster's brokers, `host:port[,host:port...]`.
    #[arg(long)]
    bootstrap_servers: String,
    /// A topic to copy (repeat for more). Export: every persisted topic when none is
    /// given. Import: required.
    #[arg(long = "topic")]
    topics: Vec<String>,
    /// A librdkafka client setting, `key=value` (repeat for more).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    settings: Vec<String>,
    /// Records per acknowledged batch.
    #[arg(long, default_value_t = 1000)]
    batch: usize,
    /// Stop after copying this many records (the same command run again resumes after
    /// them).
    #[arg(long)]
    max_records: Option<u64>,
    /// Export: the group whose committed offsets on the target record where this source's
    /// copy starts in each partition. Another group appends a whole new copy after what the
    /// target holds.
    #[arg(long, default_value = "logbus-export")]
    group: String,
}

fn broker(args: &Args, export: bool) -> Result<KafkaBroker, Error> {
    let mut config = KafkaConfig::new(args.bootstrap_servers.clone());
    if export {
        config = config.set("enable.idempotence", "true");
    }
    for s in &args.settings {
        let Some((k, v)) = s.split_once('=') else {
            return Err(Error::InvalidConfig {
                name: "--set",
                value: s.clone(),
                valid: "key=value".into(),
            });
        };
        config = config.set(k, v);
    }
    KafkaBroker::connect(config)
}

fn options<'a>(args: &'a Args, verb: &'a str) -> ExportConfig<'a> {
    let limit = args.max_records;
    let mut options = ExportConfig::new()
        .batch(args.batch)
        .group(args.group.clone())
        .progress(move |p: &Progress| {
            eprintln!(
                "{verb} {}-{}: {}/{} records ({} copied in all)",
                p.topic, p.partition, p.done, p.total, p.copied_total
            );
            match limit {
                Some(max) if p.copied_total >= max => ControlFlow::Break(()),
                _ => ControlFlow::Continue(()),
            }
        });
    if !args.topics.is_empty() {
        options = options.topics(args.topics.iter().cloned());
    }
    options
}

fn print(out: &mut dyn Write, report: &CopyReport) -> Result<ExitCode, Failure> {
    for m in &report.partitions {
        writeln!(out, "{m}")?;
    }
    if report.stopped {
        writeln!(
            out,
            "stopped before the end: run the same command again to resume"
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn export(out: &mut dyn Write, args: &Args) -> Result<ExitCode, Failure> {
    let broker = broker(args, true)?;
    let report = logbus::kafka::export::export(&args.data_dir, &broker, options(args, "export"))?;
    print(out, &report)
}

pub(crate) fn import(out: &mut dyn Write, args: &Args) -> Result<ExitCode, Failure> {
    let broker = broker(args, false)?;
    let report =
        logbus::kafka::export::import(args.data_dir.clone(), &broker, options(args, "import"))?;
    print(out, &report)
}
