//! Same-run comparison harnesses of logbus against its peers; the benches are the content
//! (`cargo bench -p logbus-comparison --bench NAME`). See BENCHMARKS.md for the method.
