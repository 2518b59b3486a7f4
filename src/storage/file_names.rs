//! Segment file names: the base offset as 20 zero-padded digits, a dot, a suffix
//! (`00000000000000000042.log`, `.index`, `.timeindex`), and how a directory's names are
//! sorted into segments, leftovers and foreign files — read by recovery and by the verifier.

use std::collections::BTreeSet;

/// Suffix of a segment's log file.
pub const LOG_SUFFIX: &str = "log";
/// Suffix of a segment's offset index.
pub const INDEX_SUFFIX: &str = "index";
/// Suffix of a segment's time index.
pub const TIME_INDEX_SUFFIX: &str = "timeindex";

/// The file name of a segment file: the base offset as 20 zero-padded digits, then the suffix.
///
/// # Examples
///
/// ```
/// use logbus::storage::file_names::file_name;
/// assert_eq!(file_name(42, "log"), "00000000000000000042.log");
/// ```
pub fn file_name(base_offset: u64, suffix: &str) -> String {
    format!("{base_offset:020}.{suffix}")
}

/// Splits a name like `00000000000000000042.log` into `(42, "log")`; `None` for other names.
///
/// # Examples
///
/// ```
/// use logbus::storage::file_names::parse_file_name;
/// assert_eq!(parse_file_name("00000000000000000042.timeindex"), Some((42, "timeindex")));
/// assert_eq!(parse_file_name("42.log"), None);
/// ```
pub fn parse_file_name(name: &str) -> Option<(u64, &str)> {
    let (stem, suffix) = name.split_once('.')?;
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let base: u64 = stem.parse().ok()?;
    (base <= MAX_OFFSET).then_some((base, suffix))
}

/// The largest offset a segment name may carry: Kafka's offsets are signed 64-bit.
pub const MAX_OFFSET: u64 = i64::MAX.unsigned_abs();

/// Why `name`, shaped like a segment file name (20 digits, a dot, a suffix), names no valid
/// base offset: `Some` for offsets above [`MAX_OFFSET`] (which [`parse_file_name`] rejects),
/// `None` otherwise.
///
/// # Examples
///
/// ```
/// use logbus::storage::file_names::bad_offset_in_name;
/// assert!(bad_offset_in_name("18446744073709551615.log").is_some());
/// assert!(bad_offset_in_name("00000000000000000042.log").is_none());
/// ```
pub fn bad_offset_in_name(name: &str) -> Option<String> {
    let (stem, _) = name.split_once('.')?;
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    match stem.parse::<u64>() {
        Ok(base) if base <= MAX_OFFSET => None,
        _ => Some(format!(
            "the base offset {stem} in the name is above {MAX_OFFSET}: offsets are signed 64-bit \
             (as Kafka's), so no segment can start there"
        )),
    }
}

/// The suffixes of the files that make up a segment.
pub(crate) const SEGMENT_SUFFIXES: [&str; 3] = [LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX];

/// Whether `name` is a well-formed segment file name (`NNNNNNNNNNNNNNNNNNNN.log`, `.index`
/// or `.timeindex`).
pub(crate) fn is_segment_file(name: &str) -> bool {
    parse_file_name(name).is_some_and(|(_, suffix)| SEGMENT_SUFFIXES.contains(&suffix))
}

/// Whether `name` ends like a file of a segment (a non-empty stem, a dot, one of `suffixes`)
/// but is not named by a 20-digit base offset: Kafka's recovery ignores such files.
pub(crate) fn is_misnamed(name: &str, suffixes: &[&str]) -> bool {
    let shaped = suffixes.iter().any(|s| {
        name.len() > s.len() + 1 && name.ends_with(s) && name[..name.len() - s.len()].ends_with('.')
    });
    shaped && parse_file_name(name).is_none()
}

/// The base offsets of the `.log` files among `names`, ascending.
pub(crate) fn log_bases<'a>(names: impl IntoIterator<Item = &'a String>) -> BTreeSet<u64> {
    names
        .into_iter()
        .filter_map(|n| parse_file_name(n))
        .filter(|(_, suffix)| *suffix == LOG_SUFFIX)
        .map(|(base, _)| base)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn misnamed_and_well_named() {
        assert!(is_misnamed("42.log", &SEGMENT_SUFFIXES));
        assert!(is_misnamed("a.b.timeindex", &SEGMENT_SUFFIXES));
        assert!(!is_misnamed(".log", &SEGMENT_SUFFIXES));
        assert!(!is_misnamed("catalog", &SEGMENT_SUFFIXES));
        assert!(!is_misnamed(
            "00000000000000000000.log.deleted",
            &SEGMENT_SUFFIXES
        ));
        assert!(!is_misnamed("00000000000000000000.log", &SEGMENT_SUFFIXES));
        assert!(is_misnamed("7.txnindex", &["txnindex"]));
        assert!(is_segment_file("00000000000000000000.timeindex"));
        assert!(!is_segment_file("00000000000000000000.txnindex"));
    }
}
