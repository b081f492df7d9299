#!/usr/bin/env bash
# Build Prometheus from its Go module and print the directory holding `prometheus` and
# `promtool`. One source for both tools, pinned in go.mod:
#   promtool    the rule and dashboard tests (`make unit`)
#   prometheus  the loopback scrape test (kwok tier) and the in-cluster scrape (real tier)
# Debian's `prometheus` package is not used: it is built without Kubernetes service
# discovery (kubernetes_sd_configs), which is how users find msop, and a package installed
# on the machine would hide a missing install step from CI.
#
# If MSOP_PROMETHEUS_BIN names a directory with both binaries, it is used.
# Output: $MSOP_CACHE_DIR (default <repo>/.cache)/prometheus/bin-<hash of the inputs>.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../lib/cached-go-build.sh
source "$here/../lib/cached-go-build.sh"
have_all() { [[ -x "$1/prometheus" && -x "$1/promtool" ]]; }

if [[ -n "${MSOP_PROMETHEUS_BIN:-}" ]]; then
  for b in prometheus promtool; do
    [[ -x "$MSOP_PROMETHEUS_BIN/$b" ]] || { echo "build.sh: no $b in $MSOP_PROMETHEUS_BIN" >&2; exit 1; }
  done
  echo "$MSOP_PROMETHEUS_BIN"; exit 0
fi

version=$(awk '$1 == "github.com/prometheus/prometheus" {print $2}' "$here/go.mod")
# Prometheus 3.x is published as module versions v0.3MM.P for release 3.MM.P.
release=$(echo "$version" | sed -E 's/^v0\.3([0-9]{2})\.([0-9]+)$/3.\1.\2/; s/^3\.0([0-9])/3.\1/')
cached_build_begin prometheus "prometheus and promtool $release ($version)"
# Only the Kubernetes service discovery is compiled in (Prometheus's own build tags):
# the cloud SDKs of the other mechanisms would triple the cold build.
CGO_ENABLED=0 go build -mod=readonly -trimpath -tags remove_all_sd,enable_kubernetes_sd \
  -ldflags "-s -w -X github.com/prometheus/common/version.Version=$release" \
  -o "$tmp/" github.com/prometheus/prometheus/cmd/prometheus github.com/prometheus/prometheus/cmd/promtool
cached_build_end
