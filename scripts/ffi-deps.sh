#!/usr/bin/env bash
# Installs what the FFI tests need beyond Rust: a C compiler, valgrind and python3
# (ffi/tests/examples.rs builds examples/c with cc, runs it under valgrind, and runs
# examples/python with python3). Debian/Ubuntu; a no-op when all are present.
set -euo pipefail
missing=()
command -v cc >/dev/null || missing+=(gcc libc6-dev)
command -v valgrind >/dev/null || missing+=(valgrind)
command -v python3 >/dev/null || missing+=(python3)
if ((${#missing[@]})); then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi
