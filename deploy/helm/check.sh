#!/usr/bin/env bash
# The Helm chart's checks (CI): helm lint --strict, helm template with the
# default values, with every option (opreg/ci/all-options-values.yaml) and with
# every toggle off, then the equivalence test (equivalence/): with default
# values the chart renders the kustomize base's objects (deploy/kubernetes).
#
#   deploy/helm/check.sh      needs Go; installs Helm v4.3.2 with go install if missing
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
export GOTOOLCHAIN=local
chart=deploy/helm/opreg
want=v4.3.2

# A release binary says v4.3.2; a `go install` build says "v4.3" (no ldflags),
# so its module version is read from the binary's build information.
helm_version() {
  local v
  v=$("$1" version --template '{{.Version}}' 2>/dev/null) || return 0
  if [[ "$v" == "$want" ]]; then
    echo "$v"
  else
    go version -m "$1" 2>/dev/null | awk '$1 == "mod" && $2 == "helm.sh/helm/v4" { print $3 }'
  fi
}
gobin="$(go env GOBIN)"
gobin="${gobin:-$(go env GOPATH)/bin}"
helm=""
for candidate in "$(command -v helm || true)" "$gobin/helm"; do
  if [[ -x "$candidate" && "$(helm_version "$candidate")" == "$want" ]]; then
    helm="$candidate"
    echo "helm $want: $helm (found)"
    break
  fi
done
if [[ -z "$helm" ]]; then
  start=$SECONDS
  go install "helm.sh/helm/v4/cmd/helm@$want"
  helm="$gobin/helm"
  echo "helm $want: $helm (go install helm.sh/helm/v4/cmd/helm@$want, $((SECONDS - start)) s)"
fi

# files/rules.yml and files/opreg.json are symlinks into deploy/ (one source);
# Helm follows them and says so on every call: that notice is filtered out.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
run_helm() {
  if "$helm" "$@" 2>"$scratch/stderr"; then
    grep -v 'found symbolic link in path' "$scratch/stderr" >&2 || true
  else
    local rc=$?
    cat "$scratch/stderr" >&2
    return $rc
  fi
}

version="$(tr -d '[:space:]' <VERSION)"
for field in version appVersion; do
  found="$(sed -n "s/^$field: \"\{0,1\}\([^\"]*\)\"\{0,1\}\$/\1/p" "$chart/Chart.yaml")"
  if [[ "$found" != "$version" ]]; then
    echo "$chart/Chart.yaml: $field is '$found', VERSION says '$version'" >&2
    exit 1
  fi
done

run_helm lint --strict --quiet "$chart"
run_helm lint --strict --quiet "$chart" -f "$chart/ci/all-options-values.yaml"
echo "helm lint --strict: ok (default values, every option)"

# Each rendering must hold these kinds (and the toggled-off one none of the rest).
expect_kinds() { # file, kinds...
  local file=$1 kind
  shift
  for kind in "$@"; do
    grep -x "kind: $kind" "$file" >/dev/null || { echo "$file: no $kind rendered" >&2; exit 1; }
  done
}
run_helm template opreg "$chart" >"$scratch/defaults.yaml"
expect_kinds "$scratch/defaults.yaml" Deployment Service PodDisruptionBudget ServiceMonitor PrometheusRule ConfigMap

run_helm template opreg "$chart" -f "$chart/ci/all-options-values.yaml" >"$scratch/all.yaml"
expect_kinds "$scratch/all.yaml" Deployment Service PodDisruptionBudget ServiceMonitor PrometheusRule ConfigMap Certificate
# Every server setting reached the container.
for variable in OPREG_RETENTION OPREG_NAMESPACE_RETENTION OPREG_MAX_CONCURRENT_RETRIES \
  OPREG_NAMESPACE_MAX_CONCURRENT_RETRIES OPREG_RATE_LIMIT OPREG_NAMESPACE_RATE_LIMITS \
  OPREG_RETRY_MAX_ATTEMPTS OPREG_RETRY_INITIAL_BACKOFF OPREG_RETRY_MAX_BACKOFF OPREG_RETRY_DEADLINE \
  OPREG_POOL_MAX_CONNECTIONS OPREG_SHUTDOWN_DELAY OPREG_SHUTDOWN_GRACE OTEL_EXPORTER_OTLP_ENDPOINT; do
  grep -x " *- name: $variable" "$scratch/all.yaml" >/dev/null || { echo "every option: $variable not rendered" >&2; exit 1; }
done

run_helm template opreg "$chart" --set migrate.enabled=false,podDisruptionBudget.enabled=false \
  --set serviceMonitor.enabled=false,prometheusRule.enabled=false,dashboard.enabled=false \
  --set topologySpread.enabled=false >"$scratch/off.yaml"
expect_kinds "$scratch/off.yaml" Deployment Service
if grep -E -x 'kind: (PodDisruptionBudget|ServiceMonitor|PrometheusRule|ConfigMap|Certificate)| *- name: migrate' \
  "$scratch/off.yaml"; then
  echo "every toggle off: the lines above were still rendered" >&2
  exit 1
fi
echo "helm template: ok (default values, every option, every toggle off)"

(cd deploy/helm/equivalence && HELM="$helm" go test -count=1 ./...)
echo "the chart with default values renders the kustomize base: ok"
