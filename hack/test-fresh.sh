#!/usr/bin/env bash
# Run `make test` (or the goals given) the way a newcomer would: from a fresh clone of this
# repository's HEAD, in a clean Debian bookworm root that holds only the README's
# prerequisites. Proves that the make targets install everything the tests need.
#
#   hack/test-fresh.sh [make goal ...]      default goal: test
#
# The root (mmdebstrap --variant=minbase) holds: python3 + python3-venv (3.11), git, make,
# ca-certificates, and Go from the Go module proxy's toolchain module (the version in
# hack/cluster/go.mod's `go` line, the minimum the README promises). Nothing else comes from
# this machine's installed packages or caches: every Go module, Python package, Debian
# package and image is fetched and built inside the root by the make targets.
#
# What the root does share with this machine, and why:
#   /proc /sys /dev (recursive binds; cgroups are under /sys)  the real tier runs containers
#   /etc/resolv.conf                                           name resolution
#   /etc/ssl/certs (read-only) and the TLS/proxy variables     the machine's own network path
#     of the environment                                       to the registries
# The root is bound onto itself and made the root mount of a mount namespace of its own
# (pivot_root, as "/" is on a machine; this machine's root is unmounted there), and a tmpfs
# is mounted on /run and /tmp. Those mounts (and the harness's network-namespace mounts)
# go away with the namespace.
#
# Needs root. MSOP_FRESH_DIR (default /var/tmp/msop-fresh) holds the root and the log of the
# last run; a passing run deletes its root, a failing one keeps it for inspection.
# Output: the log goes to $MSOP_FRESH_DIR/make.log and to stdout; the last line says the
# commit, the goals, the result and the wall time.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
goals=("$@")
((${#goals[@]})) || goals=(test)

[[ "$(id -u)" == 0 ]] || { echo "test-fresh.sh: needs root (chroot, mounts, the real tier)" >&2; exit 1; }
command -v mmdebstrap >/dev/null || {
  echo "test-fresh.sh: installing mmdebstrap" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null
}

work=${MSOP_FRESH_DIR:-/var/tmp/msop-fresh}
root=$work/root
commit=$(git -C "$repo" rev-parse HEAD)
go_version=$(awk '$1 == "go" {print $2; exit}' "$repo/hack/cluster/go.mod")

# Processes started inside the root (make, containerd, kubelet, shims, a stray test server)
# are found by the run's mount namespace, and containers by their root directory under the
# root, and killed, so nothing outlives the run.
kill_root_processes() {
  local sig=$1 pid link ns="" found=1
  [[ -s $root/.fresh-mntns ]] && ns=$(<"$root/.fresh-mntns")
  for pid in /proc/[0-9]*; do
    link=$(readlink "$pid/root" 2>/dev/null) || continue
    if ! [[ $link == "$root"/* || ( -n $ns && $(readlink "$pid/ns/mnt" 2>/dev/null) == "$ns" ) ]]; then
      continue
    fi
    kill "-$sig" "${pid#/proc/}" 2>/dev/null && found=0
  done
  return $found
}
cleanup_root() {
  [[ -d $root ]] || return 0
  if kill_root_processes TERM; then sleep 3; kill_root_processes KILL || true; sleep 1; fi
  # The mounts lived in the run's mount namespace; anything the harness mounted on the host
  # side by mistake would show up here.
  if grep -q " $root" /proc/self/mountinfo; then
    echo "test-fresh.sh: mounts left under $root:" >&2; grep " $root" /proc/self/mountinfo >&2
    return 1
  fi
  rm -rf --one-file-system "$root"
}

cleanup_root
mkdir -p "$work"
start=$(date +%s)
log=$work/make.log
: >"$log"
say() { echo "test-fresh.sh: $*" | tee -a "$log" >&2; }

say "building a bookworm root in $root"
mmdebstrap --quiet --variant=minbase \
  --include=python3,python3-venv,git,make,ca-certificates \
  bookworm "$root" >>"$log" 2>&1

say "installing Go $go_version from the Go module proxy's toolchain module"
proxy=$(go env GOPROXY 2>/dev/null || echo https://proxy.golang.org)
proxy=${proxy%%,*}
[[ $proxy == http* ]] || proxy=https://proxy.golang.org
python3 - "$proxy/golang.org/toolchain/@v/v0.0.1-go$go_version.linux-amd64.zip" "$root/usr/local" <<'PY'
import io, os, sys, urllib.request, zipfile
url, dest = sys.argv[1], sys.argv[2]
with urllib.request.urlopen(url, timeout=300) as resp:
    data = io.BytesIO(resp.read())
with zipfile.ZipFile(data) as z:
    for info in z.infolist():
        # golang.org/toolchain@v0.0.1-goX.linux-amd64/<path> -> /usr/local/go/<path>
        prefix, _, rel = info.filename.partition(".linux-amd64/")
        if not prefix.startswith("golang.org/toolchain@") or not rel or info.is_dir():
            continue
        path = os.path.join(dest, "go", rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with z.open(info) as src, open(path, "wb") as dst:
            dst.write(src.read())
        os.chmod(path, (info.external_attr >> 16) & 0o777 or 0o644)
PY

say "cloning $commit"
git clone --quiet --no-local "$repo" "$root/work/msop" >>"$log" 2>&1
# What a Debian install has; mmdebstrap leaves both to the machine.
[[ -s $root/etc/hosts ]] || printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
: >>"$root/etc/resolv.conf"
git -C "$root/work/msop" checkout --quiet --detach "$commit"

# The machine's way out to the registries: its TLS trust and proxy variables. Nothing else
# of this environment (caches such as PIP_FIND_LINKS, PATH, tools) goes in.
env_args=(HOME=/root PATH=/usr/local/go/bin:/root/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
          LANG=C.UTF-8 CI="${CI:-}")
while IFS='=' read -r name value; do
  case $name in
    *_proxy|*_PROXY|SSL_CERT_FILE|SSL_CERT_DIR|PIP_CERT|REQUESTS_CA_BUNDLE|CURL_CA_BUNDLE|GIT_SSL_CAINFO|GOPROXY|GOSUMDB|GONOSUMDB|GOPRIVATE|PIP_INDEX_URL|PIP_EXTRA_INDEX_URL|PIP_DEFAULT_TIMEOUT)
      env_args+=("$name=$value") ;;
  esac
done < <(env)

say "running make ${goals[*]} in the root (log: $log)"
set +e
unshare --mount --propagation private bash -euo pipefail -c '
  root=$1; shift
  # The root is the root mount of this mount namespace, as "/" is on a machine (a chroot
  # would not do): buildah remounts "/" as private before it unpacks a layer (EINVAL on a
  # plain directory), and runc exec enters a container through its mount namespace, whose
  # root mount is the namespace'"'"'s: under a chroot that is this machine'"'"'s "/", and
  # `kubectl exec` would land there instead of in the container.
  mount --bind "$root" "$root"
  mount --rbind /proc "$root/proc"
  mount --rbind /sys "$root/sys"
  mount --rbind /dev "$root/dev"
  mount -t tmpfs tmpfs "$root/run"
  mount -t tmpfs tmpfs "$root/tmp"
  mount --bind /etc/resolv.conf "$root/etc/resolv.conf"
  mount --bind /etc/ssl/certs "$root/etc/ssl/certs"
  mount -o remount,bind,ro "$root/etc/ssl/certs"
  readlink /proc/self/ns/mnt >"$root/.fresh-mntns"
  mkdir -p "$root/.old-root"
  cd "$root"
  pivot_root . .old-root
  # umount comes from util-linux'"'"'s mount package, which a minbase root need not have yet.
  /.old-root/usr/bin/umount -l /.old-root
  rmdir /.old-root
  exec /usr/sbin/chroot / /usr/bin/env -i "$@"
' fresh "$root" "${env_args[@]}" bash -c 'cd /work/msop && exec make "$@"' make "${goals[@]}" 2>&1 | tee -a "$log"
rc=${PIPESTATUS[0]}
set -e

elapsed=$(( $(date +%s) - start ))
verdict=passed; ((rc == 0)) || verdict="FAILED (make exit $rc)"
say "make ${goals[*]} $verdict in $((elapsed / 60)) min $((elapsed % 60)) s from a fresh clone of $commit in a clean bookworm root (Go $go_version)"
if ((rc == 0)); then
  cleanup_root
else
  kill_root_processes TERM && { sleep 3; kill_root_processes KILL || true; }
  say "kept the root for inspection: $root (the next run deletes it)"
fi
exit "$rc"
