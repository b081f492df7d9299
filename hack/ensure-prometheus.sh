#!/usr/bin/env bash
# Make sure a Prometheus server binary is available for the e2e scrape test.
# Idempotent: does nothing when `prometheus` is already on PATH (or $PROMETHEUS names one).
# Otherwise installs Debian's `prometheus` package (needs root and the Debian archive);
# the Debian package's service is not started: the test runs its own server on loopback.
set -euo pipefail

if [[ -n "${PROMETHEUS:-}" && -x "${PROMETHEUS}" ]] || command -v prometheus >/dev/null 2>&1; then
  exit 0
fi

if [[ "$(id -u)" != 0 ]]; then
  SUDO=sudo
else
  SUDO=
fi
echo "hack/ensure-prometheus.sh: installing Debian's prometheus package" >&2
export DEBIAN_FRONTEND=noninteractive
# policy-rc.d 101 keeps dpkg from starting the packaged service during the install.
policy=/usr/sbin/policy-rc.d
created_policy=
if [[ ! -e "$policy" ]]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
  $SUDO chmod +x "$policy"
  created_policy=1
fi
trap '[[ -n "$created_policy" ]] && $SUDO rm -f "$policy"' EXIT
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
command -v prometheus >/dev/null
