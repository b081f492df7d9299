#!/usr/bin/env bash
# Build the release tools from their Go modules (pinned in go.mod) and print the directory
# that holds them:
#   helm       helm v3 (helm.sh/helm/v3): `helm lint`, `helm template` (the unit tests)
#              and `helm package` (make release) of charts/msop
#   kustomize  kustomize v5 at the version kubectl embeds: config/ rendered for the unit
#              tests and for dist/install.yaml
#
# If MSOP_HELM_BIN names a directory holding both, it is used.
# (go.mod names each module twice, in its tool and its require block: the versions are
# read from the latter.)
# Output: $MSOP_CACHE_DIR (default <repo>/.cache)/helm/bin-<hash of the inputs>.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../lib/cached-go-build.sh
source "$here/../lib/cached-go-build.sh"
have_all() { [[ -x "$1/helm" && -x "$1/kustomize" ]]; }

if [[ -n "${MSOP_HELM_BIN:-}" ]]; then
  have_all "$MSOP_HELM_BIN" || { echo "build.sh: MSOP_HELM_BIN=$MSOP_HELM_BIN lacks helm or kustomize" >&2; exit 1; }
  echo "$MSOP_HELM_BIN"; exit 0
fi

helm_version=$(awk '$1 == "helm.sh/helm/v3" && $2 ~ /^v/ {print $2}' "$here/go.mod")
kustomize_version=$(awk '$1 == "sigs.k8s.io/kustomize/kustomize/v5" && $2 ~ /^v/ {print $2}' "$here/go.mod")
# Helm's own build stamps the Kubernetes version its client libraries speak (client-go
# v0.N is Kubernetes 1.N): the default of `helm template`'s .Capabilities.KubeVersion and of
# `helm lint`'s API deprecation checks. Unstamped, both would say v1.20.
kube_minor=$(awk '$1 == "k8s.io/client-go" {print $2}' "$here/go.mod" | cut -d. -f2)
cached_build_begin helm "helm $helm_version and kustomize $kustomize_version"
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$helm_version"
for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
  ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$kube_minor"
done
CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags "$ldflags" \
  -o "$tmp/helm" helm.sh/helm/v3/cmd/helm
CGO_ENABLED=0 go build -mod=readonly -trimpath \
  -ldflags "-s -w -X sigs.k8s.io/kustomize/api/provenance.version=$kustomize_version" \
  -o "$tmp/kustomize" sigs.k8s.io/kustomize/kustomize/v5
cached_build_end
