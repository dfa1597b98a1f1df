#!/usr/bin/env bash
# The secure inference service against the one-shot path, on this machine: three
# puma-serve processes on 127.0.0.1, an owner that uploads GPT-2 base's shape with
# seeded random weights, then requests of a 32-token prompt for 8 new tokens: time to
# the first ids and in all, client peak RSS and bytes sent, and requests per minute with
# 1, 2 and 4 clients at once; beside it, one puma-party run of the same request (three
# processes, the model shared for the request).
#
# Usage: bash scripts/bench-service.sh [REQUESTS_PER_LEVEL]   (default 4)
# Prints a Markdown table. Needs GNU time (/usr/bin/time) for peak RSS.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

N=${1:-4}
cargo build --release -q -p puma-examples --bin keygen --bin puma-serve --bin puma-client --bin puma-party
R=target/release
DIR=$(mktemp -d)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$DIR"
}
trap cleanup EXIT

$R/keygen --out "$DIR" --service --port 7810 --client-port 7910 >/dev/null
CFG=$DIR/service.toml
for i in 0 1 2; do
    $R/puma-serve --config "$CFG" --id $i 2>"$DIR/s$i.log" &
    PIDS+=($!)
done
until $R/puma-client --config "$CFG" status --json 2>/dev/null | grep -q '"peers_down": \[\]'; do sleep 0.2; done

t0=$(date +%s.%N)
$R/puma-client --config "$CFG" upload --name base --random-shape base >/dev/null 2>&1
t1=$(date +%s.%N)
upload=$(printf "%.2f" "$(echo "$t1 - $t0" | bc)")

IDS=$(seq 1000 1031 | paste -sd, -)
one() { $R/puma-client --config "$CFG" generate --model base --prompt-ids "$IDS" --max-new-tokens 8 --json; }

# One request alone, with the client's peak RSS.
/usr/bin/time -f "%M" -o "$DIR/rss" $R/puma-client --config "$CFG" generate --model base \
    --prompt-ids "$IDS" --max-new-tokens 8 --json >"$DIR/single.json"
field() { python3 -c "import json,sys; print(json.load(open('$1'))['$2'])"; }
ttft=$(printf "%.2f" "$(field "$DIR/single.json" first_ids_secs)")
total=$(printf "%.2f" "$(field "$DIR/single.json" total_secs)")
sent=$(field "$DIR/single.json" client_sent)
rounds=$(field "$DIR/single.json" rounds)
rss_kb=$(cat "$DIR/rss")

rpm() {
    local c=$1 start end
    start=$(date +%s.%N)
    for ((k = 0; k < N; k += c)); do
        for ((j = 0; j < c && k + j < N; j++)); do one >/dev/null & done
        wait
    done
    end=$(date +%s.%N)
    echo "scale=2; $N * 60 / ($end - $start)" | bc
}
r1=$(rpm 1); r2=$(rpm 2); r4=$(rpm 4)

# The one-shot path: three puma-party processes, the model shared for this request.
$R/keygen --out "$DIR/parties" --port 7820 >/dev/null
PCFG=$DIR/parties/parties.toml
HELPERS=()
for i in 1 2; do
    $R/puma-party --id $i --config "$PCFG" --random-shape base --max-new-tokens 8 >/dev/null 2>&1 &
    HELPERS+=($!)
done
t0=$(date +%s.%N)
$R/puma-party --id 0 --config "$PCFG" --random-shape base --prompt-ids "$IDS" --max-new-tokens 8 >/dev/null 2>&1
t1=$(date +%s.%N)
wait "${HELPERS[@]}"
oneshot=$(printf "%.2f" "$(echo "$t1 - $t0" | bc)")

echo "| GPT-2 base shape, 32 -> 8 tokens | figure |"
echo "|---|---|"
echo "| owner upload (once; three servers store their shares) | ${upload} s |"
echo "| service: time to first ids | ${ttft} s |"
echo "| service: whole request | ${total} s |"
echo "| one-shot puma-party (model shared for the request) | ${oneshot} s |"
echo "| service: rounds per request | ${rounds} |"
echo "| client bytes sent per request | ${sent} |"
echo "| client peak RSS | $((rss_kb / 1024)) MB |"
echo "| requests per minute, 1 / 2 / 4 clients at once ($N requests each) | ${r1} / ${r2} / ${r4} |"
