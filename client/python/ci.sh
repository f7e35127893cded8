#!/usr/bin/env bash
# CI for the Python client: a virtualenv in client/python/.venv, the package and
# its test dependencies, the generated-code check, mypy --strict and ruff, the
# package as users install it (scripts/check-package.sh: fresh venvs from the
# source tree and from the built wheel), then pytest against a real opreg-server
# ($OPREG_SERVER_BIN, default <repo>/target/debug/opreg-server, which must
# already be built; it needs PostgreSQL's server binaries) and, for the
# conformance scenarios, opreg-fault-proxy ($OPREG_FAULT_PROXY_BIN, default
# <repo>/target/debug/opreg-fault-proxy). With OPREG_CI_LINT_ONLY set it stops
# after the linters and the decision table's test (`.ci/run quick`).
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
  -r requirements-generate.txt -r requirements-test.txt -e '.[otel]'
"$py" -m pip list --disable-pip-version-check 2>/dev/null | grep -Ei '^(opreg|grpcio|grpcio-status|grpcio-tools|protobuf|googleapis-common-protos|pytest|pytest-asyncio|opentelemetry-api|opentelemetry-sdk|mypy|ruff|build) '

step "generated code is up to date"
PYTHON="$py" scripts/generate.sh --check

step "mypy --strict (src/opreg, the generated code excluded)"
"$py" -m mypy --cache-dir "$venv/.mypy_cache" src/opreg

step "ruff check and ruff format --check"
RUFF_CACHE_DIR="$venv/.ruff_cache" "$py" -m ruff check --no-fix src tests examples scripts
RUFF_CACHE_DIR="$venv/.ruff_cache" "$py" -m ruff format --check src tests examples scripts

if [[ -n "${OPREG_CI_LINT_ONLY:-}" ]]; then
  step "the decision table (client/testdata/decisions.json), no server"
  "$py" -m pytest -q -p no:cacheprovider tests/test_decisions.py
  echo "python client: lint only (OPREG_CI_LINT_ONLY): ok"
  exit 0
fi

step "the package: version = VERSION, sdist and wheel, fresh installs running examples/quickstart.py"
PYTHON="$python" BUILD_PYTHON="$py" scripts/check-package.sh

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
