# Sourced by generate.sh, check-generated.sh and ci.sh: puts the code
# generators and staticcheck on PATH. protoc-gen-go and protoc-gen-go-grpc are
# installed with `go install` into client/go/.bin (pinned here: the versions
# the committed gen/ was made with), and so is staticcheck; buf is $BUF, else
# the one client/typescript installed from npm, else one installed from npm
# into client/go/.bin/npm.
# shellcheck shell=bash
PROTOC_GEN_GO_VERSION=v1.36.12
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2
BUF_NPM_VERSION=1.75.0
STATICCHECK_VERSION=v0.8.2 # honnef.co/go/tools; prints "staticcheck 2026.2.2 (0.8.2)"

go_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools_bin="$go_root/.bin"
mkdir -p "$tools_bin"

installed_version() { # binary -> its --version output, or nothing
  [[ -x "$tools_bin/$1" ]] && "$tools_bin/$1" --version 2>/dev/null || true
}
if [[ "$(installed_version protoc-gen-go)" != *"${PROTOC_GEN_GO_VERSION}"* ]]; then
  GOBIN="$tools_bin" go install "google.golang.org/protobuf/cmd/protoc-gen-go@${PROTOC_GEN_GO_VERSION}"
fi
if [[ "$(installed_version protoc-gen-go-grpc)" != *"${PROTOC_GEN_GO_GRPC_VERSION#v}"* ]]; then
  GOBIN="$tools_bin" go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@${PROTOC_GEN_GO_GRPC_VERSION}"
fi
if [[ "$(installed_version staticcheck)" != *"(${STATICCHECK_VERSION#v})"* ]]; then
  GOBIN="$tools_bin" go install "honnef.co/go/tools/cmd/staticcheck@${STATICCHECK_VERSION}"
fi
PATH="$tools_bin:$PATH"

if [[ -z "${BUF:-}" ]]; then
  if [[ -x "$go_root/../typescript/node_modules/.bin/buf" ]]; then
    BUF="$go_root/../typescript/node_modules/.bin/buf"
  else
    if [[ ! -x "$tools_bin/npm/node_modules/.bin/buf" ]]; then
      npm install --silent --no-audit --no-fund --no-save --prefix "$tools_bin/npm" "@bufbuild/buf@${BUF_NPM_VERSION}" >/dev/null
    fi
    BUF="$tools_bin/npm/node_modules/.bin/buf"
  fi
fi
export BUF PATH
