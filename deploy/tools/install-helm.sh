#!/usr/bin/env bash
# Install a pinned helm v3 into <repo>/.local/tools/helm, built from the Go module proxy
# (no prebuilt binary can be downloaded here). Idempotent: does nothing when the pinned
# version is already installed. Usage: deploy/tools/install-helm.sh  (prints the binary path)
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.22.0}"   # newest v3 that builds with the machine's Go (1.26)
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN_DIR="$ROOT/.local/tools"
HELM="$BIN_DIR/helm"

if [[ -x "$HELM" ]] && "$HELM" version --template '{{.Version}}' 2>/dev/null | grep -qx "$HELM_VERSION"; then
  echo "$HELM"
  exit 0
fi

if ! command -v go >/dev/null; then
  echo "install-helm: go is not on PATH; helm $HELM_VERSION is built from source with go install" >&2
  exit 1
fi

mkdir -p "$BIN_DIR"
echo "install-helm: building helm $HELM_VERSION with $(go version) (takes a few minutes once)" >&2
# -ldflags set the version that `helm version` prints (a plain go install leaves it empty).
GOBIN="$BIN_DIR" GOFLAGS="-buildvcs=false" CGO_ENABLED=0 go install \
  -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
  "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2
"$HELM" version --short >&2
echo "$HELM"
