#!/usr/bin/env bash
# Builds the previous release's server, for the fault suite's rolling-upgrade
# scenario (server/tests/fault_suite.rs): the commit in deploy/upgrade/PREVIOUS_RELEASE
# (or the one given), exported with `git archive` into target/previous-release/src
# and built unchanged, in a target directory of its own: cargo identifies a
# workspace's packages by their path inside the workspace, so in the current
# target directory the two trees' packages would share (and overwrite) each
# other's artifacts, generated code included. Without debug information: the
# binary only has to run.
#
#   deploy/upgrade/build-previous.sh [COMMIT]   prints the binary's path
#
# About 3 minutes from nothing on two cores (debug, no debug information).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
commit=${1:-$(sed -n 1p "$repo/deploy/upgrade/PREVIOUS_RELEASE")}
# A shallow clone lacks the commit: fetch the history from where it came.
if ! git -C "$repo" cat-file -e "$commit^{commit}" 2>/dev/null; then
  git -C "$repo" fetch --quiet --unshallow 2>/dev/null || git -C "$repo" fetch --quiet origin "$commit" || true
fi
if ! git -C "$repo" cat-file -e "$commit^{commit}" 2>/dev/null; then
  echo "build-previous.sh: commit $commit is not in this clone, and could not be fetched" >&2
  exit 1
fi
src="$repo/target/previous-release/src"
rm -rf "$src"
mkdir -p "$src"
git -C "$repo" archive "$commit" | tar -x -C "$src"
CARGO_TARGET_DIR="$repo/target/previous-release/target" CARGO_PROFILE_DEV_DEBUG=0 \
  cargo build --quiet --locked --manifest-path "$src/Cargo.toml" -p opreg-server --bin opreg-server >&2
echo "$repo/target/previous-release/target/debug/opreg-server"
