#!/usr/bin/env bash
# Regenerates the Go stubs of proto/ into gen/ (buf.gen.yaml; local plugins).
set -euo pipefail
# shellcheck source=tools.sh
source "$(dirname "${BASH_SOURCE[0]}")/tools.sh"
cd "$go_root"
"$BUF" generate --template buf.gen.yaml
echo "generated: $(find gen -name '*.go' | wc -l) files in gen/"
