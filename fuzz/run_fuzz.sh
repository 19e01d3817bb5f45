#!/bin/sh
# Runs fuzz targets (built with build_fuzz.sh) for SECS seconds each, two at
# a time, at the lowest CPU priority. Usage: ./run_fuzz.sh [SECS] [targets...]
set -u
cd "$(dirname "$0")"
SECS=${1:-600}
shift 2>/dev/null || true
TARGETS=${*:-"table_reader log_reader manifest_decoder filter_decode hll_from_bytes"}
BIN=target/x86_64-unknown-linux-gnu/release
mkdir -p logs
run() {
    mkdir -p "corpus/$1" "artifacts/$1"
    nice -n 19 "$BIN/$1" "corpus/$1" -artifact_prefix="artifacts/$1/" \
        -max_total_time="$SECS" -max_len=4096 -rss_limit_mb=1024 -print_final_stats=1 \
        >"logs/$1.log" 2>&1
    echo "$1 exit $?" >>logs/summary.txt
}
set -- $TARGETS
while [ $# -gt 0 ]; do
    run "$1" &
    if [ $# -gt 1 ]; then run "$2" & shift; fi
    shift
    wait
done
