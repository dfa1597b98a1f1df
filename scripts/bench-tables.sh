#!/usr/bin/env bash
# Regenerates the generated tables of BENCHMARKS.md (between "BEGIN GENERATED" and
# "END GENERATED" markers) from the benchmark programs' --json output, stamping each with
# the date and the commit it was generated from. With --check, only checks that they are
# current (exit 1 if not). Only exact, machine-independent figures (bytes, rounds, ids) are
# generated, so the dev profile gives the same tables as a release build, and faster to
# build; CARGO_PROFILE=release to use release binaries.
set -euo pipefail
cd "$(dirname "$0")/.."
profile="${CARGO_PROFILE:-dev}"
cargo build --quiet --profile "$profile" -p puma-bench --bin gpt2_net --bin bench_tables
dir="target/$([ "$profile" = dev ] && echo debug || echo "$profile")"
json="$(mktemp)"
trap 'rm -f "$json"' EXIT
# The 8-token Shakespeare run, in memory and over TCP+TLS and QUIC on loopback (the binary
# fails unless all three give the same ids and bytes).
"$dir/gpt2_net" --quic --json >"$json"
if [ "${1:-}" = "--check" ]; then
  "$dir/bench_tables" gpt2_net --doc BENCHMARKS.md --check <"$json"
  echo "BENCHMARKS.md: generated tables are current"
else
  stamp="$(date -u +%Y-%m-%d), commit $(git describe --always --dirty --abbrev=10)"
  "$dir/bench_tables" gpt2_net --doc BENCHMARKS.md --stamp "$stamp" <"$json"
  echo "BENCHMARKS.md: regenerated the gpt2_net table ($stamp)"
fi
