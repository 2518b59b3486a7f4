//! Comparison harnesses for logbus: each bench runs logbus and a peer interleaved (A B A B
//! …) in one process and prints the median of the per-pair ratios. See `benches/`.
