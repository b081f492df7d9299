#!/usr/bin/env bash
# Build Volcano's scheduler and controller manager from the Go module volcano.sh/volcano
# (pinned in go.mod) and print the directory that holds them:
#   vc-scheduler            gang scheduling: enqueue, allocate, backfill
#   vc-controller-manager   the PodGroup and Queue controllers (Queue status, open/close)
#   crds/                   the module's own CRDs (config/crd/volcano/bases) for the
#                           scheduling.volcano.sh, bus.volcano.sh, topology.volcano.sh,
#                           nodeinfo.volcano.sh and shard.volcano.sh groups the two read
# Volcano's admission webhook is not built: see docs/tasks/gang-scheduling.md (What to know
# about Volcano) for what its absence changes.
#
# If MSOP_VOLCANO_BIN names a directory holding all of it, that is used.
# Output: $MSOP_CACHE_DIR (default <repo>/.cache)/volcano/bin-<hash of the inputs>.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../lib/cached-go-build.sh
source "$here/../lib/cached-go-build.sh"
CRDS=(scheduling.volcano.sh_podgroups scheduling.volcano.sh_queues bus.volcano.sh_commands
      topology.volcano.sh_hypernodes nodeinfo.volcano.sh_numatopologies shard.volcano.sh_nodeshards)

have_all() {
  local d=$1 f
  for f in vc-scheduler vc-controller-manager; do [[ -x "$d/$f" ]] || return 1; done
  for f in "${CRDS[@]}"; do [[ -f "$d/crds/$f.yaml" ]] || return 1; done
}

if [[ -n "${MSOP_VOLCANO_BIN:-}" ]]; then
  have_all "$MSOP_VOLCANO_BIN" || { echo "build.sh: MSOP_VOLCANO_BIN=$MSOP_VOLCANO_BIN lacks a binary or CRD" >&2; exit 1; }
  echo "$MSOP_VOLCANO_BIN"; exit 0
fi

version=$(awk '$1 == "volcano.sh/volcano" {print $2}' "$here/go.mod")
cached_build_begin volcano "Volcano $version"
mkdir -p "$tmp/crds"
ldflags="-s -w -X volcano.sh/volcano/pkg/version.Version=$version"
for cmd in scheduler controller-manager; do
  CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags "$ldflags" \
    -o "$tmp/vc-$cmd" "volcano.sh/volcano/cmd/$cmd"
done
src=$(go list -mod=readonly -m -f '{{.Dir}}' volcano.sh/volcano)
for f in "${CRDS[@]}"; do cp "$src/config/crd/volcano/bases/$f.yaml" "$tmp/crds/"; done
cached_build_end
