#!/usr/bin/env bash
# Development certificates and policy for deploy/compose.yaml, in deploy/dev/
# (ignored by git): a CA, the server's certificate for localhost and "opreg",
# a client certificate whose URI SAN is spiffe://opreg.dev/developer, and a
# policy that makes that certificate an admin and worker in every namespace
# plus one API key (printed once; only its SHA-256 is stored). Never use
# these outside a development machine.
#
#   deploy/dev-pki.sh && docker compose -f deploy/compose.yaml up --build
#   deploy/dev-pki.sh DIR     (elsewhere; CI uses it for its secured-server check)
set -euo pipefail
dir="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/dev}"
if [[ -f "$dir/policy.toml" ]]; then
  echo "$dir already holds a policy; remove it to start over" >&2
  exit 0
fi
mkdir -p "$dir"
cd "$dir"
key=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes)
openssl req -x509 "${key[@]}" -keyout ca.key -out ca.pem -days 365 -subj "/CN=opreg development CA" 2>/dev/null
issue() { # name subjectAltName
  printf 'subjectAltName=%s\n' "$2" > "$1.ext"
  openssl req "${key[@]}" -keyout "$1.key" -out "$1.csr" -subj "/CN=$1" 2>/dev/null
  openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 365 \
    -extfile "$1.ext" -out "$1.pem" 2>/dev/null
  rm "$1.csr" "$1.ext"
}
issue server "DNS:localhost,DNS:opreg,IP:127.0.0.1"
issue client "URI:spiffe://opreg.dev/developer"
api_key="$(openssl rand -hex 24)"
cat > policy.toml <<TOML
[[principal]]
name = "developer"
tls_identity = "spiffe://opreg.dev/developer"
namespaces = ["*"]
roles = ["admin", "worker"]

[[principal]]
name = "developer-key"
api_key_sha256 = "$(printf %s "$api_key" | sha256sum | cut -d' ' -f1)"
namespaces = ["*"]
roles = ["worker"]
TOML
# The server runs as uid 10001 in the container.
chmod 0644 ./*.pem ./*.key policy.toml
echo "$dir: CA, server and client certificates, policy.toml"
echo "API key (worker, every namespace; shown once): $api_key"
echo "CLI: opreg --endpoint https://localhost:50051 --ca-cert deploy/dev/ca.pem \\"
echo "       --client-cert deploy/dev/client.pem --client-key deploy/dev/client.key lookup KEY"
