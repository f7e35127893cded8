#!/usr/bin/env bash
# The contract's own checks, a CI stage of their own (.ci/run, also in `quick`):
#   buf lint       the style and naming rules of buf.yaml, on proto/
#   buf breaking   proto/ against the committed baseline image proto/baseline/opreg.binpb
#                  (rules: buf.yaml, category FILE)
# buf is pinned in proto/tools/package.json and installed there from npm.
#   proto/check.sh                    check (non-zero on a lint error or a breaking change)
#   proto/check.sh --update-baseline  rebuild the baseline from proto/ (when a contract
#                                     version is released)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
buf=proto/tools/node_modules/.bin/buf
if [[ ! -x "$buf" ]]; then
  (cd proto/tools && npm ci --no-audit --no-fund --silent)
fi
baseline=proto/baseline/opreg.binpb
if [[ "${1:-}" == "--update-baseline" ]]; then
  "$buf" build proto -o "$baseline"
  echo "baseline rebuilt: $baseline"
  exit 0
fi
"$buf" lint
echo "buf lint: ok"
"$buf" breaking proto --against "$baseline"
echo "buf breaking: no breaking change against $baseline"
