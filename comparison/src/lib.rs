//! Same-run comparison harnesses of logbus against its peers: each bench runs logbus and a
//! peer interleaved (A B A B ...) in one process and prints the median of the per-pair
//! ratios (`cargo bench -p logbus-comparison --bench NAME`). See BENCHMARKS.md.
