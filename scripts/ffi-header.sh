#!/usr/bin/env bash
# Regenerates ffi/include/puma.h with cbindgen (as a library, through the header test).
set -euo pipefail
cd "$(dirname "$0")/.."
PUMA_WRITE_HEADER=1 cargo test -p puma-ffi --test it -- --quiet header::
echo "wrote ffi/include/puma.h"
