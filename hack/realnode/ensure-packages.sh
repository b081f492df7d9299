#!/usr/bin/env bash
# Debian packages for the real-node test tier (testbed/realnode.py), installed once.
#   containerd runc containernetworking-plugins iptables  the node's runtime and pod network
#   mmdebstrap buildah                                    offline image builds (no registry)
#   gcc libc6-dev                                         the static pause binary
#   iproute2 util-linux procps                            network namespaces, nsenter, sysctl, kill
# Idempotent: apt is not touched when every command is already there. Needs root.
# No packaged service is started (policy-rc.d 101): the harness starts its own processes.
set -euo pipefail

declare -A want=(
  [containerd]=containerd [runc]=runc [/usr/lib/cni/bridge]=containernetworking-plugins
  [iptables]=iptables [mmdebstrap]=mmdebstrap [buildah]=buildah [gcc]=gcc
  [/usr/lib/x86_64-linux-gnu/libc.a]=libc6-dev [ip]=iproute2 [nsenter]=util-linux
  [sysctl]=procps [/usr/bin/kill]=procps
)
missing=()
for cmd in "${!want[@]}"; do
  if [[ $cmd == /* ]]; then [[ -e $cmd ]] && continue; else command -v "$cmd" >/dev/null && continue; fi
  missing+=("${want[$cmd]}")
done

if ((${#missing[@]})); then
  [[ "$(id -u)" == 0 ]] || { echo "ensure-packages.sh: root is needed to install: ${missing[*]}" >&2; exit 1; }
  echo "hack/realnode/ensure-packages.sh: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  policy=/usr/sbin/policy-rc.d created_policy=
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod +x "$policy"; created_policy=1
  fi
  trap '[[ -n "$created_policy" ]] && rm -f "$policy"' EXIT
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
