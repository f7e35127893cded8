#!/usr/bin/env bash
# The image's build without a Docker engine: copies exactly what the builder
# stage of deploy/Dockerfile COPYs (less what .dockerignore leaves out) into a
# scratch directory, builds opreg-server there as the Dockerfile does
# (--locked, without the embedded PostgreSQL; debug, not release, to keep CI
# quick, and --offline because CI has fetched every crate already), and checks
# that the binary refuses to start without a database URL. The compose file's
# build must be this same build, and the image must run as a non-root user.
#
#   deploy/check-image-context.sh
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
context="$(mktemp -d)"
trap 'rm -rf "$context"' EXIT

# COPY lines of the builder stage: every word but the last is a source.
sources=$(awk '
  /^FROM / { stage++ }
  stage == 1 && /^COPY / && !/--from=/ { for (i = 2; i < NF; i++) print $i }
' "$repo/deploy/Dockerfile")
[[ -n "$sources" ]] || { echo "no COPY lines found in the builder stage" >&2; exit 1; }
for source in $sources; do
  mkdir -p "$context/$(dirname "$source")"
  # .dockerignore's entries here are build output and caches only.
  (cd "$repo" && tar -cf - --exclude=target --exclude=node_modules --exclude=.venv \
    --exclude=__pycache__ "$source") | tar -xf - -C "$context"
done

# The same command as the Dockerfile's RUN, in a target directory of its own:
# the image's feature set compiles the server apart from the workspace build.
(cd "$context" && cargo build --locked --offline -p opreg-server --no-default-features \
  --target-dir "$repo/target/image-context")
binary="$repo/target/image-context/debug/opreg-server"

set +e
refused=$(env -i PATH="$PATH" "$binary" 2>&1)
code=$?
set -e
if [[ $code -ne 2 ]] || ! grep -q "no embedded PostgreSQL" <<<"$refused"; then
  echo "without a database URL the image's binary must refuse to start (exit 2); it said ($code):" >&2
  echo "$refused" >&2
  exit 1
fi

# deploy/compose.yaml builds the image from the repository root with this
# Dockerfile (its paths are relative to deploy/), so the check above covers it.
builds=$(awk '
  /^ +build:/ { building = 1; next }
  building && /context:/ { context = $2 }
  building && /dockerfile:/ { print context, $2; building = 0 }
' "$repo/deploy/compose.yaml")
if [[ "$builds" != ".. deploy/Dockerfile" ]]; then
  echo "deploy/compose.yaml must build from context .. with deploy/Dockerfile (the build checked here); it has: ${builds:-no build}" >&2
  exit 1
fi

# The runtime stage's last USER names a numeric, non-root user.
user=$(awk '/^FROM / { user = "" } /^USER / { user = $2 } END { print user }' "$repo/deploy/Dockerfile")
if [[ ! "$user" =~ ^[0-9]+(:[0-9]+)?$ || "${user%%:*}" == 0 ]]; then
  echo "the image's last stage must run as a numeric non-root USER; it has: ${user:-none}" >&2
  exit 1
fi
echo "image context: the builder stage's COPY lines build opreg-server; without a URL it refuses to start;"
echo "  compose builds the same image; it runs as user $user"
