#!/usr/bin/env bash
# Regenerates the stubs into a temporary directory and fails if they differ from
# the committed src/gen/. Run through npm (`npm run check:generated`) so that the
# local plugin (node_modules/.bin/protoc-gen-ts_proto) is on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
PATH="$PWD/node_modules/.bin:$PATH"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
buf generate --template buf.gen.yaml --output "$tmp"
if ! diff -ru src/gen "$tmp/src/gen"; then
  echo "src/gen/ is out of date with proto/: run 'npm run generate' and commit the result" >&2
  exit 1
fi
echo "generated code: up to date"
