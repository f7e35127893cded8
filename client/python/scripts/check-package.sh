#!/usr/bin/env bash
# The package as users get it: in fresh virtualenvs (not the dev one),
#   1. `pip install client/python` (from the source tree), and
#   2. the wheel `python -m build` makes (from its sdist),
# each running examples/quickstart.py against a real opreg-server started here
# ($OPREG_SERVER_BIN, default <repo>/target/debug/opreg-server). Also checks
# that pyproject.toml's version is the repository's VERSION and that the wheel
# carries the generated code and the type markers.
#
#   scripts/check-package.sh    (uses $PYTHON, else python3, for the venvs;
#                                $BUILD_PYTHON, else .venv/bin/python, for build)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
repo="$(cd "$here/../.." && pwd)"
python="${PYTHON:-python3}"
build_python="${BUILD_PYTHON:-$here/.venv/bin/python}"
server_bin="${OPREG_SERVER_BIN:-$repo/target/debug/opreg-server}"
pip_flags=(--quiet --disable-pip-version-check)

# -- the version --------------------------------------------------------------
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$here/pyproject.toml")"
if [[ ! -f "$repo/VERSION" ]]; then
  echo "check-package: no $repo/VERSION to compare pyproject.toml's version ($version) with" >&2
  exit 1
fi
want="$(tr -d '[:space:]' <"$repo/VERSION")"
if [[ "$version" != "$want" ]]; then
  echo "check-package: pyproject.toml has version $version, the repository's VERSION is $want" >&2
  exit 1
fi
echo "version $version (= VERSION)"

work="$(mktemp -d)"
chmod 755 "$work"  # as root the embedded PostgreSQL runs as another user that must traverse this
server_pid=""
cleanup() {
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid"
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# -- a server -------------------------------------------------------------------
if [[ ! -x "$server_bin" ]]; then
  echo "check-package: no opreg-server at $server_bin (build it, or set OPREG_SERVER_BIN)" >&2
  exit 1
fi
port="$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
env -u OPREG_DATABASE_URL OPREG_DATA_DIR="$work/pg" OPREG_LISTEN_ADDR="127.0.0.1:$port" \
  OPREG_METRICS_ADDR=127.0.0.1:0 NO_COLOR=1 "$server_bin" </dev/null >"$work/server.log" 2>&1 &
server_pid=$!

# -- the sdist and the wheel (while the server starts) ----------------------------
"$build_python" -m build --outdir "$work/dist" "$here" >"$work/build.log" 2>&1 || {
  cat "$work/build.log" >&2
  exit 1
}
wheel="$(ls "$work"/dist/opreg-"$version"-*.whl)"
"$build_python" - "$wheel" <<'PY'
import sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
need = {"opreg/py.typed", "opreg/client.py", "opreg/aio.py", "opreg/digest.py", "opreg/errors.py", "opreg/_worker.py"}
for proto in ("registry", "admin", "errors"):
    need |= {f"opreg/_gen/v1/{proto}_pb2.py", f"opreg/_gen/v1/{proto}_pb2.pyi", f"opreg/_gen/v1/{proto}_pb2_grpc.py"}
missing = sorted(need - names)
if missing:
    sys.exit(f"wheel lacks {missing}")
print(f"{sys.argv[1].rsplit('/', 1)[-1]}: {len(names)} files, generated code (errors_pb2 included) and py.typed")
PY

for _ in $(seq 600); do
  grep -q "opreg serving" "$work/server.log" && break
  if ! kill -0 "$server_pid" 2>/dev/null; then
    echo "check-package: opreg-server exited:" >&2
    cat "$work/server.log" >&2
    exit 1
  fi
  sleep 0.1
done
if ! grep -q "opreg serving" "$work/server.log"; then
  echo "check-package: opreg-server did not serve within 60 s:" >&2
  cat "$work/server.log" >&2
  exit 1
fi

# -- each install in a fresh venv, running the quickstart -------------------------
run_quickstart() {  # <name> <what to pip install>
  local venv="$work/venv-$1"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install "${pip_flags[@]}" "$2"
  # From outside the source tree: the installed package, not src/, is imported.
  (cd "$work" && "$venv/bin/python" "$here/examples/quickstart.py" "127.0.0.1:$port")
  local got
  got="$("$venv/bin/python" -c 'import opreg; print(opreg.__version__)')"
  if [[ "$got" != "$version" ]]; then
    echo "check-package: opreg.__version__ is $got in the $1 install, not $version" >&2
    exit 1
  fi
  echo "$1 install: quickstart ran, opreg.__version__ $got"
}
run_quickstart source "$here"
run_quickstart wheel "$wheel"
