#!/usr/bin/env bash
# CI for the Python client: a virtualenv in client/python/.venv, the package and
# its test dependencies, the generated-code check, then pytest against a real
# opreg-server ($OPREG_SERVER_BIN, default <repo>/target/debug/opreg-server,
# which must already be built; it needs PostgreSQL's server binaries).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"

step() { printf '\n== python client: %s\n' "$*"; }

python="${PYTHON:-python3}"
venv="$here/.venv"

step "virtualenv ($("$python" --version 2>&1))"
if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c 'import sys' 2>/dev/null; then
  rm -rf "$venv"
  if ! "$python" -m venv "$venv" 2>/dev/null; then
    # Debian's python3 has no ensurepip without python3-venv.
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
      rm -rf "$venv"
      "$python" -m venv "$venv"
    else
      echo "cannot create a virtualenv with $python (install python3-venv)" >&2
      exit 1
    fi
  fi
fi
py="$venv/bin/python"

step "install"
# Editable: the tests (and anyone running pytest here later) use the working tree.
"$py" -m pip install --quiet --disable-pip-version-check \
  -r requirements-generate.txt -r requirements-test.txt -e .
"$py" -m pip list --disable-pip-version-check 2>/dev/null | grep -Ei '^(opreg|grpcio|grpcio-status|grpcio-tools|protobuf|googleapis-common-protos|pytest|pytest-asyncio) '

step "generated code is up to date"
PYTHON="$py" scripts/generate.sh --check

step "the wheel carries the generated code and the type markers"
wheels="$(mktemp -d)"
trap 'rm -rf "$wheels"' EXIT
"$py" -m pip wheel --quiet --disable-pip-version-check --no-deps --wheel-dir "$wheels" . 2>/dev/null
"$py" - "$wheels"/opreg-*.whl <<'PY'
import sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
need = {"opreg/py.typed", "opreg/_gen/v1/registry_pb2.py", "opreg/_gen/v1/registry_pb2.pyi",
        "opreg/_gen/v1/registry_pb2_grpc.py", "opreg/_gen/v1/admin_pb2.py", "opreg/_gen/v1/admin_pb2.pyi",
        "opreg/_gen/v1/admin_pb2_grpc.py", "opreg/client.py", "opreg/aio.py", "opreg/digest.py",
        "opreg/_worker.py"}
missing = sorted(need - names)
if missing:
    sys.exit(f"wheel lacks {missing}")
print(f"{sys.argv[1].rsplit('/', 1)[-1]}: {len(names)} files, generated code and py.typed included")
PY

step "pytest"
set +e
"$py" -m pytest -v -p no:cacheprovider "$@"
status=$?
set -e
if [[ $status -eq 5 ]]; then
  echo "pytest collected no tests: failing" >&2
  exit 1
fi
exit $status
