#!/usr/bin/env bash
# Build Kueue's manager from the Go module sigs.k8s.io/kueue (pinned in go.mod) and print
# the directory that holds it:
#   kueue        the manager: queues, quota, admission, preemption, the Workload controller
#                and Kueue's own webhooks (the test harness serves them on loopback)
#   certgen      a CA and a serving certificate for 127.0.0.1 (certgen/main.go), for
#                those webhooks
#   crds/        the module's CRDs (config/components/crd/bases)
#   webhooks.yaml  the module's webhook configurations (config/components/webhook)
#
# If MSOP_KUEUE_BIN names a directory holding all of it, that is used.
# Output: $MSOP_CACHE_DIR (default <repo>/.cache)/kueue/bin-<hash of the inputs>.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../lib/cached-go-build.sh
source "$here/../lib/cached-go-build.sh"

have_all() {
  local d=$1
  [[ -x "$d/kueue" && -x "$d/certgen" && -f "$d/webhooks.yaml" ]] || return 1
  [[ -f "$d/crds/kueue.x-k8s.io_workloads.yaml" && -f "$d/crds/kueue.x-k8s.io_clusterqueues.yaml" ]]
}

if [[ -n "${MSOP_KUEUE_BIN:-}" ]]; then
  have_all "$MSOP_KUEUE_BIN" || { echo "build.sh: MSOP_KUEUE_BIN=$MSOP_KUEUE_BIN lacks a binary or CRD" >&2; exit 1; }
  echo "$MSOP_KUEUE_BIN"; exit 0
fi

version=$(awk '$1 == "sigs.k8s.io/kueue" {print $2}' "$here/go.mod")
cached_build_begin kueue "Kueue $version" "$here/certgen/main.go"
mkdir -p "$tmp/crds"
CGO_ENABLED=0 go build -mod=readonly -trimpath \
  -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$version" \
  -o "$tmp/kueue" sigs.k8s.io/kueue/cmd/kueue
CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags "-s -w" -o "$tmp/certgen" ./certgen
src=$(go list -mod=readonly -m -f '{{.Dir}}' sigs.k8s.io/kueue)
cp "$src"/config/components/crd/bases/*.yaml "$tmp/crds/"
cp "$src/config/components/webhook/manifests.yaml" "$tmp/webhooks.yaml"
cached_build_end
