#!/usr/bin/env bash
# Runs every fuzz target of fuzz/ for a fixed time and prints the executions per target.
#
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#   SECONDS_PER_TARGET  default 60 (CI); run longer locally, e.g. 600
#   TARGET              default: every target (`cargo fuzz list`)
# Env: FUZZ_JOBS  targets fuzzed at once (default: the number of cores, at most 3)
#
# Stable toolchain only: cargo-fuzz needs nightly flags, so RUSTC_BOOTSTRAP=1 unlocks them.
# Targets are built without a sanitizer (-s none): the fuzzed crates have no `unsafe`, and
# a plain build is several times faster on CI's two cores. A crash or leak stops the run
# with a non-zero exit; its input is in fuzz/artifacts/<target>/ (turn it into a test).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
SECS="${1:-60}"
shift || true

export RUSTC_BOOTSTRAP=1
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked --version 0.13.2
fi

cd fuzz
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then
    mapfile -t TARGETS < <(cargo fuzz list)
fi
cargo fuzz build -s none

JOBS="${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}"
[ "$JOBS" -gt 3 ] && JOBS=3
mkdir -p logs

run_target() {
    local t="$1" secs="$2"
    mkdir -p "corpus/$t"
    cp -n seeds/"$t"/* "corpus/$t/" 2>/dev/null || true
    if cargo fuzz run -s none "$t" "corpus/$t" -- \
        -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        >"logs/$t.log" 2>&1; then
        echo "$t: ok"
    else
        echo "$t: FAILED (see fuzz/logs/$t.log and fuzz/artifacts/$t/)"
        tail -n 40 "logs/$t.log"
        return 1
    fi
}
export -f run_target

status=0
printf '%s\n' "${TARGETS[@]}" | xargs -P "$JOBS" -I{} bash -c 'run_target "$1" "$2"' _ {} "$SECS" || status=1

echo
printf '%-14s %14s %10s %8s\n' target executions exec/s corpus
for t in "${TARGETS[@]}"; do
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "logs/$t.log" | grep -o '[0-9]*$' || echo "?")
    rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "logs/$t.log" | grep -o '[0-9]*$' || echo "?")
    corpus=$(find "corpus/$t" -type f | wc -l)
    printf '%-14s %14s %10s %8s\n' "$t" "$execs" "$rate" "$corpus"
done
exit "$status"
