#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 20) with cargo-fuzz on the
# nightly toolchain, starting from the corpus in fuzz/corpus/ (new inputs are
# kept there, untracked). A crash fails the run and leaves its input in
# fuzz/artifacts/TARGET/; `cargo +nightly fuzz run TARGET ARTIFACT` replays it.
# Installs cargo-fuzz when it is missing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
seconds="${1:-20}"
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked --quiet
# No sanitizer: the code is safe Rust; libFuzzer's coverage guidance is what counts.
# The dev profile (with debug assertions, overflow checks included) builds in
# about 3 minutes against the release profile's 5; 20 s of slower runs still
# reach the corpus's coverage.
cargo +nightly fuzz build --dev -s none
for target in $(cargo +nightly fuzz list); do
  mkdir -p "corpus/$target"
  log="$(mktemp)"
  if ! cargo +nightly fuzz run --dev -s none "$target" -- -max_total_time="$seconds" >"$log" 2>&1; then
    tail -40 "$log"
    echo "fuzz target $target failed; the input is in fuzz/artifacts/$target/" >&2
    exit 1
  fi
  printf '%-22s %s\n' "$target" "$(grep -E '^Done [0-9]+ runs' "$log" | tail -1)"
  rm -f "$log"
done
