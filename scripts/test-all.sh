#!/usr/bin/env bash
# Runs every test logbus has: unit, integration and doc tests; the loom models and their
# mutation check; Miri on the unsafe core. Installs what it needs when it is missing and fails loudly when it cannot:
# no step is ever skipped silently.
#
#   scripts/test-all.sh            # everything
#   LOGBUS_STEPS="loom miri" scripts/test-all.sh   # a subset (names: tests loom mutations miri interop)
set -euo pipefail

cd "$(dirname "$0")/.."
steps=${LOGBUS_STEPS:-"tests loom mutations miri interop"}

say() { printf '\n==> %s\n' "$*"; }
die() { printf '\nFAILED: %s\n' "$*" >&2; exit 1; }

command -v cargo >/dev/null || die "cargo is not installed (install Rust with rustup: https://rustup.rs)"

run_tests() {
    # --all-features includes `kafka`: librdkafka is compiled from source once (a C compiler
    # and make; no cmake), and tests/kafka_*.rs run against its in-process mock cluster.
    local tool
    for tool in cc make perl; do
        command -v "$tool" >/dev/null \
            || die "$tool is needed to build librdkafka for the kafka feature (Debian: apt-get install build-essential perl)"
    done
    say "unit, integration and doc tests (all features, the kafka ones included)"
    cargo test --workspace --all-features
    run_examples
}

run_examples() {
    # Each example checks what it shows and fails (exit status) when it does not hold; the
    # tests above only compile them. `cargo test` built them with these features.
    say "examples (each run to its end)"
    local dir example out
    dir=$(mktemp -d)
    for example in examples/*.rs; do
        example=$(basename "$example" .rs)
        out="$dir/$example.out"
        # persisted_log needs a data directory; the others take an optional one or none.
        if ! timeout 300 cargo run --quiet --all-features --example "$example" -- "$dir/$example-data" \
            >"$out" 2>&1 </dev/null; then
            cat "$out" >&2
            die "example $example failed (its output is above)"
        fi
        printf '  %s: %s\n' "$example" "$(tail -n 1 "$out")"
    done
    rm -rf "$dir"
}

ensure_python_venv() {
    # kafka-python is the independent implementation the interop test checks our segment
    # files against; it lives in a local virtual environment, created when missing. Its
    # codecs need libraries it imports only when present (kafka/codec.py: `snappy` from
    # python-snappy, `lz4.frame` from lz4, `zstandard`; gzip is Python's own): checked by
    # import too, so an existing venv lacking them gets them, and a pip that cannot install
    # them fails the step rather than letting the codec tests fail later.
    local venv=.venv
    local imports='import kafka.record, crc32c, snappy, lz4.frame, zstandard, kafka.codec as c
assert c.has_snappy() and c.has_lz4() and c.has_zstd(), "kafka-python sees no codec library"'
    if ! "$venv/bin/python" -c "$imports" >/dev/null 2>&1; then
        command -v python3 >/dev/null || die "python3 is needed for the interop test"
        if [ ! -x "$venv/bin/python" ]; then
            say "creating $venv (PyPI: kafka-python and its codec libraries)"
            python3 -m venv "$venv" || die "python3 -m venv failed (Debian: apt-get install python3-venv)"
        else
            say "$venv lacks kafka-python or a codec library: installing (PyPI)"
        fi
        "$venv/bin/pip" install --quiet 'kafka-python>=2.2' crc32c python-snappy lz4 zstandard \
            || die "could not install kafka-python and its codec libraries (python-snappy, lz4, zstandard) from PyPI"
        "$venv/bin/python" -c "$imports" \
            || die "$venv: kafka-python or its codec libraries still do not import after pip install"
    fi
    LOGBUS_PYTHON="$PWD/$venv/bin/python"
    export LOGBUS_PYTHON
}

run_interop() {
    ensure_python_venv
    say "interop: kafka-python reads logbus's segments, logbus reads kafka-python's"
    # The persisted-log example's data directory is one of the inputs (built, not run, here).
    cargo build -p logbus --all-features --example persisted_log
    cargo test -p logbus --all-features --test storage -- --ignored storage_interop::
}

run_loom() {
    # Loom explores every interleaving up to the preemption bound; --release keeps it fast.
    # Its own target directory: the cfg changes every crate's build.
    # Crate-private pieces have their models in the library's own unit tests (the std-side
    # unit tests are compiled out under the cfg); loom-tests/ holds the public-API models.
    say "loom models (LOOM_MAX_PREEMPTIONS=${LOOM_MAX_PREEMPTIONS:-2})"
    local loom_env=(env RUSTFLAGS="--cfg logbus_loom"
        LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-2}")
    "${loom_env[@]}" cargo test -p logbus --lib --release --target-dir target/loom
    "${loom_env[@]}" cargo test -p logbus-loom-tests --release --target-dir target/loom
}

run_mutations() {
    # Each key ordering a model guards, weakened in a scratch copy: its model must fail.
    say "loom mutation check (scripts/loom-mutations.sh)"
    scripts/loom-mutations.sh
}

ensure_miri() {
    if ! cargo +nightly miri --version >/dev/null 2>&1; then
        say "installing Miri (nightly toolchain, components miri and rust-src)"
        command -v rustup >/dev/null || die "rustup is needed to install Miri"
        rustup toolchain install nightly --profile minimal --component miri,rust-src \
            || die "could not install the nightly toolchain with Miri"
    fi
    cargo +nightly miri setup >/dev/null || die "cargo miri setup failed"
}

run_miri() {
    ensure_miri
    # The unsafe core: the shim and every structure with unsafe blocks. Test counts shrink
    # under cfg(miri). Permissive provenance: parking_lot casts integers to pointers.
    local filters=(sync::)
    for module in ring queue observer; do
        if [ -e "src/$module" ] || [ -e "src/$module.rs" ]; then
            filters+=("$module::")
        fi
    done
    # The partition's lending reads (records read in place from slots a producer reuses).
    filters+=(partition::lend::)
    # The partition's entries (a union of value and box, a key that may be uninitialised).
    filters+=(partition::entry::)
    # A replicated partition's open chunks (write-once slots read while others are filled).
    filters+=(partition::replica_log::chunk::)
    say "Miri on the unsafe core: ${filters[*]}"
    MIRIFLAGS="${MIRIFLAGS:--Zmiri-permissive-provenance}" \
        cargo +nightly miri test -p logbus --lib --target-dir target/miri -- "${filters[@]}"
}

for step in $steps; do
    case "$step" in
        tests) run_tests ;;
        loom) run_loom ;;
        mutations) run_mutations ;;
        miri) run_miri ;;
        interop) run_interop ;;
        *) die "unknown step '$step' (valid: tests loom mutations miri interop)" ;;
    esac
done
say "all steps passed: $steps"
