#!/usr/bin/env bash
# Regenerates the stubs into a temporary directory and fails if they differ
# from the committed gen/ (run scripts/generate.sh and commit the result).
set -euo pipefail
# shellcheck source=tools.sh
source "$(dirname "${BASH_SOURCE[0]}")/tools.sh"
cd "$go_root"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$BUF" generate --template buf.gen.yaml --output "$tmp"
if ! diff -ru gen "$tmp/gen"; then
  echo "gen/ is out of date with proto/: run scripts/generate.sh and commit the result" >&2
  exit 1
fi
echo "generated code: up to date"
