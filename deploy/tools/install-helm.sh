#!/usr/bin/env bash
# Install a pinned helm v3 into <repo>/.local/tools/helm, built from the Go module proxy
# (no prebuilt binary can be downloaded here). Idempotent: does nothing when the pinned
# version is already installed (helm.stamp records what was built). Usage: deploy/tools/install-helm.sh  (prints the binary path)
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.22.0}"   # newest helm v3 release; builds with Go 1.26
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN_DIR="$ROOT/.local/tools"
HELM="$BIN_DIR/helm"
# Kubernetes version of the k8s.io/client-go that helm $HELM_VERSION builds with (v0.37 -> 1.37):
# helm's own Makefile stamps it in, and `helm template`/`lint` check kubeVersion against it.
K8S_MAJOR=1
K8S_MINOR=37
STAMP="$BIN_DIR/helm.stamp"   # what the binary was built as; a different pin rebuilds it
WANT="helm $HELM_VERSION kubernetes $K8S_MAJOR.$K8S_MINOR"

if [[ -x "$HELM" && -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]]; then
  echo "$HELM"
  exit 0
fi

if ! command -v go >/dev/null; then
  echo "install-helm: go is not on PATH; helm $HELM_VERSION is built from source with go install" >&2
  exit 1
fi

mkdir -p "$BIN_DIR"
echo "install-helm: building helm $HELM_VERSION with $(go version) (takes a few minutes once)" >&2
# The -X flags are the ones helm's Makefile sets; a plain go install leaves the version
# empty and the default Kubernetes version at 1.20.
LDFLAGS="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  LDFLAGS+=" -X $pkg.k8sVersionMajor=$K8S_MAJOR -X $pkg.k8sVersionMinor=$K8S_MINOR"
done
GOBIN="$BIN_DIR" GOFLAGS="-buildvcs=false" CGO_ENABLED=0 go install -trimpath \
  -ldflags "$LDFLAGS" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2
"$HELM" version --short >&2
echo "$WANT" >"$STAMP"
echo "$HELM"
