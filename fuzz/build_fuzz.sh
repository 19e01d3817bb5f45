#!/bin/sh
# Builds the fuzz targets with libFuzzer instrumentation on a stable
# toolchain (the flags `cargo fuzz build` passes; RUSTC_BOOTSTRAP allows
# them on stable). `cargo fuzz build` (with cargo-fuzz installed and
# RUSTC_BOOTSTRAP=1) does the same.
set -e
cd "$(dirname "$0")"
export RUSTC_BOOTSTRAP=1
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 -Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table -Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks"
cargo build --release --target x86_64-unknown-linux-gnu --bins "$@"
