#!/usr/bin/env bash
# `buf breaking`: compares the contract in proto/ with the committed baseline image
# proto/baseline/opreg.binpb (rules: buf.yaml, category FILE).
#   scripts/buf-breaking.sh                 check (non-zero on a breaking change)
#   scripts/buf-breaking.sh --update        rebuild the baseline from proto/ (do this
#                                           when a contract version is released)
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
buf="$here/node_modules/.bin/buf"
cd "$here/../.."
baseline=proto/baseline/opreg.binpb
if [[ "${1:-}" == "--update" ]]; then
  "$buf" build proto -o "$baseline"
  echo "baseline rebuilt: $baseline"
  exit 0
fi
"$buf" breaking proto --against "$baseline"
echo "buf breaking: no breaking change against $baseline"
