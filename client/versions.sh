#!/usr/bin/env bash
# One version for every opreg package, kept in the repository's VERSION file:
# the Cargo workspace (server, Rust client and CLI, conformance proxy), the
# Python, TypeScript, Go and Java packages, the Helm chart and the kustomize
# base's image tag.
#
#   client/versions.sh            check that every package carries VERSION (CI)
#   client/versions.sh 0.2.0      write 0.2.0 to VERSION and into every package
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

if [[ $# -eq 1 ]]; then
  [[ $1 =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.]+)?$ ]] || { echo "not a version: $1" >&2; exit 2; }
  echo "$1" >VERSION
  sed -i "0,/^version = \".*\"/s//version = \"$1\"/" Cargo.toml
  sed -i "0,/^version = \".*\"/s//version = \"$1\"/" client/python/pyproject.toml
  (cd client/typescript && npm version --no-git-tag-version --allow-same-version "$1" >/dev/null)
  sed -i "s/^export const VERSION = \".*\";/export const VERSION = \"$1\";/" client/typescript/src/version.ts
  sed -i "s/^const Version = \".*\"/const Version = \"$1\"/" client/go/version.go
  # The project's own version: the first <version> after its artifactId.
  sed -i "/<artifactId>opreg-client<\/artifactId>/,/<version>/s|<version>.*</version>|<version>$1</version>|" client/java/pom.xml
  sed -i "s/^version: .*/version: $1/; s/^appVersion: .*/appVersion: \"$1\"/" deploy/helm/opreg/Chart.yaml
  sed -i "s/^\(  *newTag: \)\"[^\"]*\"/\1\"$1\"/" deploy/kubernetes/kustomization.yaml
fi

want="$(tr -d '[:space:]' <VERSION)"
status=0
check() { # name, found
  if [[ "$2" != "$want" ]]; then
    echo "$1 is at version '$2', VERSION says '$want'" >&2
    status=1
  fi
}
check "Cargo workspace (Cargo.toml)" "$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)"
check "client/python/pyproject.toml" "$(sed -n 's/^version = "\(.*\)"/\1/p' client/python/pyproject.toml | head -1)"
check "client/typescript/package.json" "$(node -p 'require("./client/typescript/package.json").version')"
check "client/typescript/package-lock.json" "$(node -p 'require("./client/typescript/package-lock.json").version')"
check "client/typescript/src/version.ts" "$(sed -n 's/^export const VERSION = "\(.*\)";/\1/p' client/typescript/src/version.ts)"
check "client/go/version.go" "$(sed -n 's/^const Version = "\(.*\)"/\1/p' client/go/version.go)"
check "client/java/pom.xml" "$(sed -n '/<artifactId>opreg-client<\/artifactId>/,/<version>/s|.*<version>\(.*\)</version>.*|\1|p' client/java/pom.xml | head -1)"
check "deploy/helm/opreg/Chart.yaml (version)" "$(sed -n 's/^version: //p' deploy/helm/opreg/Chart.yaml)"
check "deploy/helm/opreg/Chart.yaml (appVersion)" "$(sed -n 's/^appVersion: "\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' deploy/helm/opreg/Chart.yaml)"
check "deploy/kubernetes/kustomization.yaml (newTag)" "$(sed -n 's/^  *newTag: "\(.*\)".*/\1/p' deploy/kubernetes/kustomization.yaml)"
if [[ $status -eq 0 ]]; then echo "every package is at version $want"; fi
exit $status
